"""The ViT-Ti step's matmuls one at a time: XLA:CPU's float32 GEMM vs PyTorch's, side by side.

    python bench/vit_dots.py                    # all cores
    taskset -c 0 python bench/vit_dots.py       # one core (both sides size their pools from it)

Each of a block's dense layers runs three GEMMs per step over its ``T = batch x tokens`` rows:
the forward ``x @ W``, the input gradient ``g @ W^T`` and the weight gradient ``x^T @ g`` (the
contraction over all T rows). Shapes are those of ``train_vs_pytorch.py --model vit`` (T = 256
views x 17 tokens, width 192, MLP 768); the q/k/v/out projections are the 192 x 192 ones.
Both sides multiply the same operands (the script stops if the products' norms differ by over
1e-4). Prints ms per call (best of 3 rounds of ``--calls``), GFLOP/s and PyTorch's time over ours;
PyTorch runs in a fresh process with glibc's default malloc, as in ``train_vs_pytorch.py``.
"""

from __future__ import annotations

import argparse
import json
import os

from vit_block_halves import best_ms, torch_side

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def gemms(tokens: int, width: int, mlp: int) -> dict[str, tuple[str, tuple[int, int], tuple[int, int]]]:
    """name -> (form, lhs shape, rhs shape); form "nn": a @ b, "nt": a @ b^T, "tn": a^T @ b."""
    out = {}
    for layer, (d_in, d_out) in (("mlp_in", (width, mlp)), ("mlp_out", (mlp, width)),
                                 ("q/k/v/out", (width, width))):
        out[f"{layer} forward"] = ("nn", (tokens, d_in), (d_in, d_out))
        out[f"{layer} input grad"] = ("nt", (tokens, d_out), (d_in, d_out))
        out[f"{layer} weight grad"] = ("tn", (tokens, d_in), (tokens, d_out))
    return out


FORMS = {"nn": lambda a, b: a @ b, "nt": lambda a, b: a @ b.T, "tn": lambda a, b: a.T @ b}


def operands(shapes):
    """The same float32 operands on both sides: name -> (a, b) as numpy arrays."""
    import numpy as np
    rng = np.random.default_rng(0)
    return {name: tuple(rng.standard_normal(s, np.float32) for s in (sa, sb))
            for name, (_, sa, sb) in shapes.items()}


def ours(shapes, calls: int) -> dict[str, tuple[float, float]]:
    """name -> (ms per call, Frobenius norm of the product)."""
    import jax
    import numpy as np
    out = {}
    for name, (a, b) in operands(shapes).items():
        a, b = jax.device_put(a), jax.device_put(b)
        fn = jax.jit(FORMS[shapes[name][0]])
        out[name] = (best_ms(lambda: jax.block_until_ready(fn(a, b)), calls),
                     float(np.linalg.norm(fn(a, b))))
    return out


def pytorch(shapes, calls: int) -> dict[str, tuple[float, float]]:
    import torch
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    out = {}
    for name, (a, b) in operands(shapes).items():
        a, b = torch.from_numpy(a), torch.from_numpy(b)
        fn = FORMS[shapes[name][0]]
        out[name] = (best_ms(lambda: fn(a, b), calls), float(torch.linalg.norm(fn(a, b))))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--tokens", type=int, default=256 * 17, help="rows T (batch x tokens)")
    p.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shapes = gemms(args.tokens, 192, 768)
    if args.torch_only:  # the child process below
        print(json.dumps(pytorch(shapes, args.calls)))
        return
    from repr_jax.host_memory import keep_host_memory
    keep_host_memory()  # as the CLI: before JAX starts
    a = ours(shapes, args.calls)
    b = json.loads(torch_side(__file__, "--calls", str(args.calls), "--tokens", str(args.tokens)))
    for name in shapes:  # the same products on both sides
        if abs(a[name][1] - b[name][1]) > 1e-4 * b[name][1]:
            raise SystemExit(f"{name}: results differ (norm {a[name][1]:.6g} vs {b[name][1]:.6g})")
    a, b = ({n: v[0] for n, v in side.items()} for side in (a, b))
    print(f"float32 GEMMs of a ViT-Ti block, T = {args.tokens} rows, best of 3 x {args.calls} calls, "
          f"{len(os.sched_getaffinity(0))} core(s)")
    print(f"{'':22} {'form':>5} {'repr_jax (XLA)':>16} {'PyTorch':>16} {'PyTorch/ours':>13}")
    for name, (form, sa, sb) in shapes.items():
        flops = 2 * sa[0] * sa[1] * (sb[0] if form == "nt" else sb[1])
        gf = lambda ms: flops / ms / 1e6  # noqa: E731 (GFLOP/s from ms)
        print(f"{name:22} {form:>5} {a[name]:6.2f}ms {gf(a[name]):5.0f}GF/s "
              f"{b[name]:6.2f}ms {gf(b[name]):5.0f}GF/s {b[name] / a[name]:12.2f}x")
    per_block = {n: 4 if n.startswith("q/k/v/out") else 1 for n in shapes}  # four projections
    total_a = sum(a[n] * k for n, k in per_block.items())
    total_b = sum(b[n] * k for n, k in per_block.items())
    print(f"{'a block, 4 projections':22} {'':>5} {total_a:6.2f}ms {'':9} {total_b:6.2f}ms {'':9} "
          f"{total_b / total_a:9.2f}x")


if __name__ == "__main__":
    main()
