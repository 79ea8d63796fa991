"""A MiniLM-shaped text transformer's forward + backward pass: float32 vs the bfloat16 policy vs
the old cast-everything bfloat16.

    python bench/bf16_step.py                     # 5 rounds x 3 steps
    python bench/bf16_step.py --rounds 9 --steps 5

The model is ``text_transformer`` MiniLM-L6 (width 384, 6 layers, 12 heads, MLP 1536, 30,522
tokens), random weights, ``--batch`` texts of ``--tokens`` token ids (the last quarter padding);
the loss is an in-batch InfoNCE of the first half's mean-pooled embeddings against the second's,
and a step is ``jax.value_and_grad`` of it (no optimizer). Three programs:

* ``float32``: as ``train.compute_dtype=float32``;
* ``bfloat16 policy``: the loss traced under ``encoders.precision.mixed()`` — every dense and
  attention GEMM takes bfloat16 inputs with float32 results, forward and both gradients, the
  parameters and everything elementwise float32 (``train.compute_dtype=bfloat16`` now);
* ``bfloat16 cast``: the parameters cast to bfloat16 (GEMMs with bfloat16 results, elementwise
  work in bfloat16): the step's old ``compute_dtype=bfloat16``.

The variants take turns within each round (a shared host's drift falls on all alike); each
prints its median ms per step over all rounds, its speed against float32, and its loss's and
gradient's relative difference from float32's. Ratios count only on idle cores (``machine.py``).

Hardware:  2-core Intel Xeon (AVX-512, AVX512-BF16, AMX), idle (load 0.61, no other work).
Runtime:   about 1 min (three compilations, 5 x 3 x 3 steps), 2026-12-06 08:28.
Measured (``python bench/bf16_step.py``, JAX 0.10.2; bfloat16 dot products reported):
                   ms/step  vs float32  loss rel. diff  grad rel. diff  grad dtypes
float32                547       1.00x         0.0e+00         0.0e+00      float32
bfloat16 policy        229       2.39x         1.1e-04         1.3e-02      float32
bfloat16 cast          605       0.90x         1.3e-04         5.0e-02      float32
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def programs(batch: int, tokens: int):
    """name -> jitted ``value_and_grad(params, ids)``, with the parameters and the token ids."""
    import jax
    import jax.numpy as jnp
    import optax

    from repr_jax.encoders import precision
    from repr_jax.encoders.text_transformer import VARIANTS, TextTransformer
    model = TextTransformer(**VARIANTS["MiniLM-L6"], max_len=max(tokens, 8))
    ids = jax.random.randint(jax.random.PRNGKey(1), (batch, tokens), 1, model.vocab_size)
    ids = ids.at[:, tokens - tokens // 4:].set(model.pad_id)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), ids)

    def loss(params, ids):
        emb = model.apply(params, ids)[0].astype(jnp.float32)
        emb = emb / jnp.linalg.norm(emb, axis=-1, keepdims=True)
        q, d = jnp.split(emb, 2)
        logits = q @ d.T / 0.05
        return optax.softmax_cross_entropy_with_integer_labels(
            logits, jnp.arange(q.shape[0])).mean()

    def policy(params, ids):
        with precision.mixed():
            return loss(params, ids)

    def cast(params, ids):
        return loss(jax.tree.map(lambda x: x.astype(jnp.bfloat16), params), ids)

    fns = {name: jax.jit(jax.value_and_grad(f)) for name, f in
           (("float32", loss), ("bfloat16 policy", policy), ("bfloat16 cast", cast))}
    return fns, params, ids


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64, help="texts per step (two halves paired)")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3, help="steps timed per variant per round")
    args = p.parse_args(argv)
    from machine import Machine
    machine = Machine.now()  # before our own work
    from repr_jax.host_memory import keep_host_memory
    keep_host_memory()  # as the CLI: before JAX starts

    import jax
    import jax.numpy as jnp

    from repr_jax.encoders import precision
    fns, params, ids = programs(args.batch, args.tokens)
    print(machine.line())
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; bfloat16 dot products "
          f"{'reported' if precision.bfloat16_is_fast() else 'not reported'} "
          f"(policy 'auto' -> {precision.resolve('auto')}); MiniLM-L6 shape, {args.batch} texts "
          f"x {args.tokens} tokens, forward + backward; median of {args.rounds} alternating "
          f"rounds x {args.steps} steps")
    results = {}
    for name, fn in fns.items():  # compile, and the values each gives
        results[name] = jax.block_until_ready(fn(params, ids))
    times = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            for _ in range(args.steps):
                t = time.perf_counter()
                jax.block_until_ready(fn(params, ids))
                times[name].append(time.perf_counter() - t)

    def flat(tree):
        return jnp.concatenate([x.astype(jnp.float32).ravel() for x in jax.tree.leaves(tree)])
    ref_loss, ref_grad = results["float32"][0], flat(results["float32"][1])
    base = statistics.median(times["float32"])
    print(f"{'':16} {'ms/step':>9} {'vs float32':>11} {'loss rel. diff':>15} "
          f"{'grad rel. diff':>15} {'grad dtypes':>12}")
    for name in fns:
        med = statistics.median(times[name])
        loss, grads = results[name]
        dl = float(abs(loss - ref_loss) / abs(ref_loss))
        dg = float(jnp.linalg.norm(flat(grads) - ref_grad) / jnp.linalg.norm(ref_grad))
        dtypes = ",".join(sorted({str(x.dtype) for x in jax.tree.leaves(grads)}))
        print(f"{name:16} {med * 1e3:9.0f} {base / med:10.2f}x {dl:15.1e} {dg:15.1e} {dtypes:>12}")
    print(machine.ratio("bfloat16 policy speed / float32",
                        base / statistics.median(times["bfloat16 policy"])))


if __name__ == "__main__":
    main()
