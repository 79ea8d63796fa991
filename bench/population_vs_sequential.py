"""A population of K members in one compiled step vs. the same K runs one after another.

    python bench/population_vs_sequential.py                 # K = 16, the default experiment's model
    python bench/population_vs_sequential.py --members 64 --steps 20

Two models: the default experiment's (SimCLR, 1-D CNN 32-64-128, batch 256, MNIST-1D) and a tiny MLP
member (SimCLR, MLP 32-32, batch 64) that cannot fill the cores on its own. For each, the time of one
train step of a single run × K is set against one step of the K-member population: as ``repr-jax``
trains it (``train.population_chunk=0``: the CNN's members one after another inside the step on
CPU, the MLP's vmapped) and, for the CNN, vmapped with its convolutions as patch matmuls or as XLA
convolutions (a grouped convolution). Steps are timed after compilation (median of ``--steps``),
members differing in learning rate, sharing batches.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def stepper(cfg, *, members: int):
    """``run(n)``: the times (seconds) of the next ``n`` train steps of a single run
    (``members=0``) or a ``members``-member population, compiled and warmed up first."""
    import jax

    from repr_jax.config import override
    from repr_jax.data import BatchStream
    from repr_jax.train import build_method, load_dataset, sharding
    from repr_jax.train.run import init_state, make_step_fn, sample_batch, state_init_fn
    from repr_jax.train.population import make_population_step, members_per_chunk, stack
    from repr_jax.train.step import hyperparams
    from machine import timed_steps
    dataset = load_dataset(cfg)
    mesh = sharding.make_mesh(1)
    stream = BatchStream(dataset.splits["train"], batch_size=cfg.train.batch_size, seed=0)
    if members == 0:  # a single run
        method = build_method(cfg, dataset)
        state = init_state(cfg, method, sample_batch(dataset), mesh)
        fn, hp = make_step_fn(cfg, method, mesh, state), hyperparams(cfg)
    else:
        method = build_method(cfg, dataset, population=members_per_chunk(cfg) != 1)
        keys = jax.numpy.stack([jax.random.PRNGKey(i) for i in range(members)])
        state = jax.jit(jax.vmap(state_init_fn(cfg, method), in_axes=(0, None)))(
            keys, sample_batch(dataset))
        hp = stack([hyperparams(override(cfg, [f"optim.lr={1e-3 * (1 + i / members)}"]))
                    for i in range(members)])
        fn = make_population_step(cfg, method, mesh, shared_batches=True)
    return timed_steps(fn, state, hp, stream, mesh)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=16)
    p.add_argument("--steps", type=int, default=5, help="steps timed per round")
    p.add_argument("--rounds", type=int, default=4, help="rounds, each timing every variant")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc as it is (the CLI keeps freed host memory: "
                        "repr_jax/host_memory.py)")
    args = p.parse_args(argv)
    from repr_jax.host_memory import keep_host_memory
    kept = False if args.default_malloc else keep_host_memory()  # as the CLI: before JAX starts

    import jax

    from repr_jax.config import load, override
    k = args.members
    cnn = override(load("simclr_mnist1d"), ["train.num_devices=1"])
    mlp = override(cnn, ["encoder.name=mlp", "encoder.widths=(32,32)", "encoder.norm=layer",
                         "method.proj_hidden=32", "method.proj_dim=16", "train.batch_size=64"])
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPU cores; "
          f"K = {k} members; median of {args.rounds} interleaved rounds x {args.steps} steps; "
          f"host memory "
          f"{'kept' if kept else 'as glibc defaults'}")
    vmapped = f"train.population_chunk={k}"
    for name, cfg, variants in [
            ("default CNN (32-64-128, batch 256)", cnn,
             [("auto: members one after another", []),
              ("vmapped, patch matmuls", [vmapped, "encoder.conv=im2col"]),
              ("vmapped, XLA conv (grouped)", [vmapped, "encoder.conv=xla"])]),
            ("tiny MLP (32-32, batch 64)", mlp, [("auto: vmapped", [])])]:
        single = stepper(cfg, members=0)
        print(f"\n{name}")
        for label, settings in variants:
            # Each variant interleaved with the single run, so a slow spell of the machine (or
            # the allocator state a bigger program leaves behind) hits both sides alike.
            population, ts, tp = stepper(override(cfg, settings), members=k), [], []
            for _ in range(args.rounds):
                ts += single(args.steps)
                tp += population(args.steps)
            one, pop = statistics.median(ts), statistics.median(tp)
            print(f"  population ({label}): {pop * 1e3:.0f} ms/step vs one run {one * 1e3:.1f} "
                  f"ms/step x {k} = {k * one * 1e3:.0f} ms -> {k * one / pop:.2f}x the speed "
                  f"of {k} sequential runs")

if __name__ == "__main__":
    main()
