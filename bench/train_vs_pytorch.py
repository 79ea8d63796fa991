"""Training throughput: repr_jax's SimCLR step vs. the same step in PyTorch (CPU, eager).

    python bench/train_vs_pytorch.py                 # the default experiment's step, batch 256
    python bench/train_vs_pytorch.py --steps 50

Both sides train the default experiment's model on MNIST-1D: two augmented views per signal (shift
up to 6 with zero fill, amplitude x U(0.7, 1.3), Gaussian noise 0.1, one zeroed 20% segment), the 1-D
CNN 32-64-128 (kernel 5, BatchNorm without conv bias, ReLU, 2x max pool between blocks, mean pool),
the projector 128 -> 256 -> ReLU -> 64, NT-Xent at temperature 0.2 over the 512 views, AdamW (lr 2e-3,
weight decay 1e-4), batch 256. Each side is timed over ``--steps`` steps after a warm-up (ours after
compilation), in one process, one after the other. Also prints the achieved FLOP/s of our step
(XLA's FLOP count of the step / its time) against this machine's float32 matmul peak, measured here
with a 2048 x 2048 matmul.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def ours(steps: int) -> tuple[float, float]:
    """(seconds per step, FLOPs per step) of repr_jax's compiled step."""
    import jax

    from repr_jax.config import load, override
    from repr_jax.data import BatchStream
    from repr_jax.train import build_method, load_dataset, sharding
    from repr_jax.train.loop import compile_step, init_state, sample_batch
    from repr_jax.train.step import hyperparams
    cfg = override(load("simclr_mnist1d"), ["train.num_devices=1"])
    dataset = load_dataset(cfg)
    mesh = sharding.make_mesh(1)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, sample_batch(dataset), mesh)
    stream = BatchStream(dataset.splits["train"], batch_size=256, seed=0)
    batches = [sharding.global_batch(stream.batch(i), mesh) for i in range(steps + 3)]
    step, costs = compile_step(cfg, method, mesh, state, batches[0])
    hp = hyperparams(cfg)
    for b in batches[:3]:
        state, m = step(state, b, hp)
    jax.block_until_ready(m)
    t = time.perf_counter()
    for b in batches[3:]:
        state, m = step(state, b, hp)
    jax.block_until_ready(m)
    return (time.perf_counter() - t) / steps, costs["flops_per_step"]


def pytorch(steps: int) -> float:
    """Seconds per step of the same SimCLR step in eager PyTorch."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    from repr_jax.config import load
    from repr_jax.data import BatchStream
    from repr_jax.train import load_dataset
    torch.manual_seed(0)
    dataset = load_dataset(load("simclr_mnist1d"))
    stream = BatchStream(dataset.splits["train"], batch_size=256, seed=0)

    def block(c_in, c_out):
        return [nn.Conv1d(c_in, c_out, 5, padding=2, bias=False), nn.BatchNorm1d(c_out), nn.ReLU()]

    encoder = nn.Sequential(*block(1, 32), nn.MaxPool1d(2), *block(32, 64), nn.MaxPool1d(2),
                            *block(64, 128))
    projector = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 64))
    params = list(encoder.parameters()) + list(projector.parameters())
    opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=1e-4)

    def view(x):
        b, length = x.shape
        shift = torch.randint(-6, 7, (b,))
        idx = (torch.arange(length)[None, :] - shift[:, None])
        x = torch.where((idx >= 0) & (idx < length), x.gather(1, idx.clamp(0, length - 1)), 0.0)
        start = torch.randint(0, length - 8 + 1, (b, 1))
        pos = torch.arange(length)[None, :]
        x = torch.where((pos >= start) & (pos < start + 8), 0.0, x)
        x = x * torch.empty(b, 1).uniform_(0.7, 1.3)
        return x + 0.1 * torch.randn_like(x)

    def step(x):
        h = encoder(torch.cat([view(x), view(x)])[:, None, :]).mean(-1)  # [2B, 128]
        z = F.normalize(projector(h), dim=1)
        logits = z @ z.T / 0.2
        n = x.shape[0]
        logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
        target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
        loss = F.cross_entropy(logits, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    xs = [torch.from_numpy(np.asarray(stream.batch(i)["x"])) for i in range(steps + 3)]
    for x in xs[:3]:
        step(x)
    t = time.perf_counter()
    for x in xs[3:]:
        loss = step(x)
    float(loss.detach())
    return (time.perf_counter() - t) / steps


def matmul_peak() -> float:
    import jax
    a = jax.random.normal(jax.random.PRNGKey(0), (2048, 2048))
    f = jax.jit(lambda a: a @ a)
    jax.block_until_ready(f(a))
    t = time.perf_counter()
    for _ in range(10):
        out = f(a)
    jax.block_until_ready(out)
    return 10 * 2 * 2048 ** 3 / (time.perf_counter() - t)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args(argv)
    import jax
    import torch
    torch.set_num_threads(os.cpu_count())
    ours_s, flops = ours(args.steps)
    torch_s = pytorch(args.steps)
    peak = matmul_peak()
    print(f"jax {jax.__version__} / torch {torch.__version__}, {os.cpu_count()} CPU cores, "
          f"SimCLR step (default experiment, batch 256), mean of {args.steps} steps")
    print(f"  repr_jax: {ours_s * 1e3:.1f} ms/step ({256 / ours_s:,.0f} examples/s)")
    print(f"  PyTorch eager: {torch_s * 1e3:.1f} ms/step ({256 / torch_s:,.0f} examples/s)")
    print(f"  repr_jax / PyTorch throughput: {torch_s / ours_s:.2f}x")
    print(f"  repr_jax achieved {flops / ours_s / 1e9:.1f} GFLOP/s of a measured float32 matmul "
          f"peak {peak / 1e9:.1f} GFLOP/s ({flops / ours_s / peak:.1%}); XLA counts "
          f"{flops / 1e9:.2f} GFLOP per step")


if __name__ == "__main__":
    main()
