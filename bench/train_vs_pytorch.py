"""Training throughput: repr_jax's SimCLR step vs. the same step in PyTorch (CPU, eager; float32,
or both sides in bfloat16 with ``--dtype bfloat16``).

    python bench/train_vs_pytorch.py                 # both models
    python bench/train_vs_pytorch.py --model cnn --steps 50
    python bench/train_vs_pytorch.py --dtype bfloat16

``cnn``: both sides train the default experiment's model on MNIST-1D: two augmented views per signal (shift
up to 6 with zero fill, amplitude x U(0.7, 1.3), Gaussian noise 0.1, one zeroed 20% segment), the 1-D
CNN 32-64-128 (kernel 5, BatchNorm without conv bias, ReLU, 2x max pool between blocks, mean pool),
the projector 128 -> 256 -> ReLU -> 64, NT-Xent at temperature 0.2 over the 512 views, AdamW (lr 2e-3,
weight decay 1e-4), batch 256.

``vit``: ViT-Ti (width 192, 12 pre-LN blocks, 3 heads, MLP 768, tanh GELU, learned positions, CLS
token, final LayerNorm) with patch size 2 on scikit-learn's 8x8 digits (16 patches + CLS), the
projector 192 -> 256 -> ReLU -> 64, views = Gaussian noise 0.05, NT-Xent at temperature 0.2 over
256 views, AdamW; batch 128. PyTorch's attention is ``nn.MultiheadAttention`` (its fused path).

Each side is timed over ``--steps`` steps after a warm-up (ours after
compilation), one after the other: ours in this process, PyTorch's in a fresh one with glibc's
default malloc (see ``torch_time``). Also prints the achieved FLOP/s of our step
(XLA's FLOP count of the step / its time) against this machine's float32 matmul peak, measured here
with a 2048 x 2048 matmul.

``--dtype bfloat16``: our step with ``train.compute_dtype=bfloat16`` (the ViT on the
mixed-precision policy, bfloat16 GEMM inputs with float32 results; the CNN, not on it, on bfloat16
copies of its parameters and inputs: the printed ``precision:`` line says which), PyTorch's
forward pass and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (backward follows
their dtypes). The FLOP/s line still compares against the float32 matmul peak.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from vit_block_halves import torch_side

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine, autocast  # noqa: E402


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


CNN_BATCH, VIT_BATCH = 256, 128


def vit_config():
    from repr_jax.config import load, override
    return override(load("simclr_digits"), [
        "encoder.name=vit", "encoder.variant=Ti", "encoder.patch_size=2", "method.proj_hidden=256",
        "method.proj_dim=64", "data.views.crop_pad=0", "data.views.scale=0.0",
        "data.views.noise=0.05", f"train.batch_size={VIT_BATCH}"])


def ours(cfg, steps: int, batch_size: int) -> tuple[float, float]:
    """(seconds per step, FLOPs per step) of repr_jax's compiled step for ``cfg``."""
    from repr_jax.config import override
    from repr_jax.scaling.sweep import timed_step
    seconds, costs = timed_step(override(cfg, [f"train.batch_size={batch_size}"]), steps, warmup=3)
    return seconds, costs["flops_per_step"]


def _nt_xent(z, temperature=0.2):
    import torch
    import torch.nn.functional as F
    z = F.normalize(z, dim=1)
    n = z.shape[0] // 2
    logits = (z @ z.T / temperature).masked_fill(torch.eye(2 * n, dtype=torch.bool),
                                                 float("-inf"))
    return F.cross_entropy(logits, torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]))


def _time_torch(step, xs) -> float:
    for x in xs[:3]:
        step(x)
    t = time.perf_counter()
    for x in xs[3:]:
        loss = step(x)
    float(loss.detach())
    return (time.perf_counter() - t) / (len(xs) - 3)


def pytorch_vit(steps: int, dtype: str = "float32") -> float:
    """Seconds per step of the ViT-Ti SimCLR step in eager PyTorch."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    from repr_jax.data import BatchStream
    from repr_jax.train import load_dataset
    torch.manual_seed(0)
    stream = BatchStream(load_dataset(vit_config()).splits["train"], batch_size=VIT_BATCH, seed=0)
    d, heads, mlp, depth = 192, 3, 768, 12

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.fc1, self.fc2 = nn.Linear(d, mlp), nn.Linear(mlp, d)

        def forward(self, x):
            y = self.ln1(x)
            x = x + self.attn(y, y, y, need_weights=False)[0]
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(1, d, 2, stride=2)
            self.pos = nn.Parameter(0.02 * torch.randn(1, 16, d))
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm = nn.LayerNorm(d, eps=1e-6)

        def forward(self, x):  # [B, 1, 8, 8]
            x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
            return self.norm(self.blocks(x))[:, 0]

    model = nn.Sequential(ViT(), nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)

    def step(x):
        views = torch.cat([x + 0.05 * torch.randn_like(x), x + 0.05 * torch.randn_like(x)])
        with autocast(dtype):  # the forward pass and loss; backward follows their dtypes
            loss = _nt_xent(model(views))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    xs = [torch.from_numpy(np.asarray(stream.batch(i)["x"])).permute(0, 3, 1, 2).contiguous()
          for i in range(steps + 3)]
    return _time_torch(step, xs)


def pytorch_cnn(steps: int, dtype: str = "float32") -> float:
    """Seconds per step of the default experiment's SimCLR step in eager PyTorch."""
    import numpy as np
    import torch
    from torch import nn

    from repr_jax.config import load
    from repr_jax.data import BatchStream
    from repr_jax.train import load_dataset
    torch.manual_seed(0)
    dataset = load_dataset(load("simclr_mnist1d"))
    stream = BatchStream(dataset.splits["train"], batch_size=CNN_BATCH, seed=0)

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
        views = torch.cat([view(x), view(x)])[:, None, :]
        with autocast(dtype):  # the forward pass and loss; backward follows their dtypes
            h = encoder(views).mean(-1)  # [2B, 128]
            loss = _nt_xent(projector(h))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    xs = [torch.from_numpy(np.asarray(stream.batch(i)["x"])) for i in range(steps + 3)]
    return _time_torch(step, xs)


def matmul_peak() -> dict[str, float]:
    """FLOP/s of a 2048 x 2048 float32 matmul, best of 10, by XLA and by PyTorch's BLAS (oneDNN/MKL,
    all cores): the machine's peak is the better of the two."""
    import jax
    import torch
    a = jax.random.normal(jax.random.PRNGKey(0), (2048, 2048))
    f = jax.jit(lambda a: a @ a)
    jax.block_until_ready(f(a))
    at = torch.randn(2048, 2048)
    at @ at

    def best(fn):
        times = []
        for _ in range(10):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return 2 * 2048 ** 3 / min(times)
    return {"XLA": best(lambda: jax.block_until_ready(f(a))), "PyTorch": best(lambda: at @ at)}


def profile(cfg, batch_size: int, top: int = 25) -> None:
    """Per-op time of our step (jax.profiler over 3 steps), grouped by forward/backward and the
    op's module path (block index folded), the largest ``top`` groups."""
    import collections
    import gzip
    import json
    import re
    import tempfile
    from pathlib import Path

    import jax
    from repr_jax.config import override
    from repr_jax.train.run import single_device_step
    step, state, batches, hp, _ = single_device_step(
        override(cfg, [f"train.batch_size={batch_size}"]), 6)
    for b in batches[:3]:
        state, m = step(state, b, hp)
    jax.block_until_ready(m)
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            for b in batches[3:]:
                state, m = step(state, b, hp)
            jax.block_until_ready(m)
        trace = next(Path(d).rglob("*.trace.json.gz"))
        events = json.load(gzip.open(trace))["traceEvents"]
    op_of = dict(re.findall(r'%([\w.\-]+) = [^\n]*?metadata=\{op_name="([^"]+)"', step.as_text()))
    groups = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("name") in op_of:
            op = op_of[e["name"]]
            parts = [q for q in op.split("/") if not q.startswith(("jit(", "jvp(", "transpose("))]
            path = re.sub(r"^.*?(block)\d+", r"\1N", "/".join(parts))
            groups[("bwd " if "transpose(" in op else "fwd ") + path] += e["dur"] / 3e3
    total = sum(groups.values())
    print(f"  per-op profile (ms/step over 3 steps, {total:.0f} ms attributed; blockN = all blocks):")
    for name, ms in groups.most_common(top):
        print(f"    {ms:8.1f}  {ms / total:5.1%}  {name}")


def torch_time(model: str, steps: int, dtype: str = "float32") -> float:
    """Seconds per step of PyTorch's side, in a fresh process with glibc's default malloc —
    PyTorch as it ships (the top pad slows it: bench/README.md)."""
    return float(torch_side(__file__, "--model", model, "--steps", str(steps),
                            "--dtype", dtype).split()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("cnn", "vit", "both"), default="both")
    p.add_argument("--steps", type=int, default=0, help="timed steps (default 30 cnn, 8 vit)")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc as it is on our side too (the CLI keeps freed "
                        "host memory: repr_jax/host_memory.py)")
    p.add_argument("--profile", action="store_true", help="also print our step's per-op profile")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="bfloat16: our train.compute_dtype=bfloat16 against torch's CPU autocast")
    p.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from repr_jax.host_memory import keep_host_memory
    kept = False if args.default_malloc else keep_host_memory()  # as the CLI: before JAX starts
    import jax
    import torch

    from repr_jax.config import load, override
    from repr_jax.train.step import precision_line
    torch.set_num_threads(os.cpu_count())
    runs = {"cnn": ("default experiment's CNN on MNIST-1D", CNN_BATCH, 30,
                    lambda: load("simclr_mnist1d"), pytorch_cnn),
            "vit": ("ViT-Ti (patch 2) on 8x8 digits", VIT_BATCH, 8, vit_config, pytorch_vit)}
    if args.torch_only:  # the child process of torch_time()
        print(runs[args.model][4](args.steps, args.dtype))
        return
    machine = Machine.now()  # before this bench's own work loads the cores
    print(machine.line())
    peaks = matmul_peak()
    peak = max(peaks.values())
    print(f"jax {jax.__version__} / torch {torch.__version__}, {os.cpu_count()} CPU cores; "
          f"float32 matmul (2048^2): " + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in peaks.items())
          + f" GFLOP/s, peak {peak / 1e9:.1f}; our host memory "
          f"{'kept' if kept else 'as glibc defaults'}, PyTorch's as glibc defaults")
    tag = "" if args.dtype == "float32" else f", {args.dtype}"  # float32 prints as it did
    for name in ("cnn", "vit") if args.model == "both" else (args.model,):
        what, batch, default_steps, cfg_fn, _ = runs[name]
        steps = args.steps or default_steps
        cfg = override(cfg_fn(), [f"train.compute_dtype={args.dtype}"])
        ours_s, flops = ours(cfg, steps, batch)
        torch_s = torch_time(name, steps, args.dtype)
        print(f"SimCLR step, {what}, batch {batch}, mean of {steps} steps{tag}")
        if (line := precision_line(cfg)) is not None:  # which bfloat16 path our encoder takes
            print(f"  {line}")
        print(f"  repr_jax: {ours_s * 1e3:.1f} ms/step ({batch / ours_s:,.0f} examples/s)")
        print(f"  PyTorch eager: {torch_s * 1e3:.1f} ms/step ({batch / torch_s:,.0f} examples/s)")
        print("  " + machine.ratio("repr_jax / PyTorch throughput", torch_s / ours_s))
        print(f"  repr_jax achieved {flops / ours_s / 1e9:.1f} GFLOP/s = {flops / ours_s / peak:.1%}"
              f" of the {'float32 ' if tag else ''}matmul peak; XLA counts {flops / 1e9:.2f} GFLOP "
              f"per step")
        if args.profile:
            profile(cfg, batch)

if __name__ == "__main__":
    main()
