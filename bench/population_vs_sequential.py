"""A vmapped population of K members vs. the same K runs one after another.

    python bench/population_vs_sequential.py                 # K = 16, the default experiment's model
    python bench/population_vs_sequential.py --members 64 --steps 20

Two models: the default experiment's (SimCLR, 1-D CNN 32-64-128, batch 256, MNIST-1D) and a tiny MLP
member (SimCLR, MLP 32-32, batch 64) that cannot fill the cores on its own. For each, the time of one
train step of a single run (XLA convolutions, as ``repr-jax train``) × K is set against one step of
the K-member population, with the convolutions as patch matmuls (``encoder.conv=im2col``, what
populations use) and, for the CNN, as XLA convolutions (vmapped: a grouped convolution). Steps are
timed after compilation (median of ``--steps``), members differing in learning rate, sharing batches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def step_time(cfg, *, members: int, steps: int) -> float:
    """Median seconds of one (population) step, after a compiling warm-up."""
    import jax
    import numpy as np

    from repr_jax.config import override
    from repr_jax.data import BatchStream
    from repr_jax.train import build_method, load_dataset, sharding
    from repr_jax.train.loop import init_state, make_step_fn, sample_batch, state_init_fn
    from repr_jax.train.population import make_population_step, stack
    from repr_jax.train.step import hyperparams
    dataset = load_dataset(cfg)
    mesh = sharding.make_mesh(1)
    stream = BatchStream(dataset.splits["train"], batch_size=cfg.train.batch_size, seed=0)
    if members == 0:  # a single run
        method = build_method(cfg, dataset)
        state = init_state(cfg, method, sample_batch(dataset), mesh)
        fn, hp = make_step_fn(cfg, method, mesh, state), hyperparams(cfg)
    else:
        method = build_method(cfg, dataset, population=True)
        keys = jax.numpy.stack([jax.random.PRNGKey(i) for i in range(members)])
        state = jax.jit(jax.vmap(state_init_fn(cfg, method), in_axes=(0, None)))(
            keys, sample_batch(dataset))
        hp = stack([hyperparams(override(cfg, [f"optim.lr={1e-3 * (1 + i / members)}"]))
                    for i in range(members)])
        fn = make_population_step(cfg, method, mesh, shared_batches=True)
    times = []
    for step in range(steps + 2):
        batch = sharding.global_batch(stream.batch(step), mesh)
        t = time.perf_counter()
        state, metrics = fn(state, batch, hp)
        jax.block_until_ready(metrics)
        if step >= 2:  # the first compiles, the second settles
            times.append(time.perf_counter() - t)
    assert np.isfinite(np.asarray(metrics["loss"])).all()
    return statistics.median(times)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args(argv)

    import jax

    from repr_jax.config import load, override
    k = args.members
    cnn = override(load("simclr_mnist1d"), ["train.num_devices=1"])
    mlp = override(cnn, ["encoder.name=mlp", "encoder.widths=(32,32)", "encoder.norm=layer",
                         "method.proj_hidden=32", "method.proj_dim=16", "train.batch_size=64"])
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPU cores; "
          f"K = {k} members; median of {args.steps} steps")
    for name, cfg, variants in [
            ("default CNN (32-64-128, batch 256)", cnn,
             [("im2col", "encoder.conv=im2col"), ("XLA conv (grouped)", "encoder.conv=xla")]),
            ("tiny MLP (32-32, batch 64)", mlp, [("population", "encoder.conv=auto")])]:
        single = step_time(cfg, members=0, steps=args.steps)
        print(f"\n{name}: one run {single * 1e3:.1f} ms/step -> {k} in sequence "
              f"{k * single * 1e3:.0f} ms")
        for label, setting in variants:
            pop = step_time(override(cfg, [setting]), members=k, steps=args.steps)
            print(f"  population ({label}): {pop * 1e3:.0f} ms/step -> "
                  f"{k * single / pop:.2f}x the speed of {k} sequential runs")


if __name__ == "__main__":
    main()
