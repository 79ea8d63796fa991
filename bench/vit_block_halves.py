"""One ViT-Ti block's two halves, forward + backward: repr_jax's modules vs PyTorch eager, side by side.

    python bench/vit_block_halves.py            # [256, 17, 192]: the ViT bench's batch of tokens

Attention half: LayerNorm + multi-head attention (3 heads) + residual; MLP half: LayerNorm + Dense
768 + tanh GELU + Dense 192 + residual. Each is differentiated with respect to its parameters and
its input, as every block is in a training step (``--params-only``: the input as data, which drops
the input-gradient work and lets independent dots overlap). Prints ms per call (best of 3 rounds
of ``--calls``) and PyTorch's time over ours; PyTorch runs in a fresh process with glibc's default
malloc and all cores, as ``train_vs_pytorch.py`` runs it (our host-memory setting slows it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def best_ms(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls)
    return min(times) * 1e3


def torch_side(script: str, *args: str) -> str:
    """The last line ``script --torch-only args`` prints in a fresh process with glibc's default
    malloc: the PyTorch side, as PyTorch ships (our host-memory setting slows it)."""
    out = subprocess.run([sys.executable, script, "--torch-only", *args],
                         env=dict(os.environ, REPR_JAX_KEEP_HOST_MEMORY="0"),
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[-1]


def ours(shape, calls: int, input_grad: bool = True) -> dict[str, float]:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from repr_jax.encoders.vit import EncoderBlock, SelfAttention

    class AttentionHalf(nn.Module):  # as in EncoderBlock
        @nn.compact
        def __call__(self, x):
            return x + SelfAttention(3, name="attn")(nn.LayerNorm(1e-6, name="ln1")(x))

    class MlpHalf(nn.Module):  # as in EncoderBlock: tokens as one [B * N, D] matrix
        @nn.compact
        def __call__(self, x):
            y = nn.LayerNorm(1e-6, name="ln2")(x).reshape(-1, x.shape[-1])
            y = nn.Dense(x.shape[-1], name="mlp_out")(nn.gelu(nn.Dense(768, name="mlp_in")(y)))
            return x + y.reshape(x.shape)

    x = jax.random.normal(jax.random.PRNGKey(0), shape)
    out = {}
    for name, module in (("attention half", AttentionHalf()), ("MLP half", MlpHalf()),
                         ("whole block", EncoderBlock(3, 768))):
        params = module.init(jax.random.PRNGKey(1), x)
        grad = jax.jit(jax.grad(lambda p, x: jnp.sum(module.apply(p, x) ** 2),
                                argnums=(0, 1) if input_grad else 0))
        out[name] = best_ms(lambda: jax.block_until_ready(grad(params, x)), calls)
    return out


def pytorch(shape, calls: int, input_grad: bool = True) -> dict[str, float]:
    import torch
    from torch import nn
    torch.set_num_threads(os.cpu_count())
    width = shape[-1]

    class AttentionHalf(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(width, eps=1e-6)
            self.attn = nn.MultiheadAttention(width, 3, batch_first=True)

        def forward(self, x):
            y = self.ln(x)
            return x + self.attn(y, y, y, need_weights=False)[0]

    class MlpHalf(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc1 = nn.LayerNorm(width, eps=1e-6), nn.Linear(width, 768)
            self.fc2 = nn.Linear(768, width)

        def forward(self, x):
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x)), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.m = AttentionHalf(), MlpHalf()

        def forward(self, x):
            return self.m(self.a(x))

    x = torch.randn(*shape, requires_grad=input_grad)
    out = {}
    for name, module in (("attention half", AttentionHalf()), ("MLP half", MlpHalf()),
                         ("whole block", Block())):
        def step(module=module):
            module.zero_grad(set_to_none=True)
            x.grad = None
            (module(x) ** 2).sum().backward()
        out[name] = best_ms(step, calls)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--tokens", type=int, default=17)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--params-only", action="store_true",
                   help="differentiate with respect to the parameters only (the input as data)")
    p.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shape = (args.batch, args.tokens, 192)
    if args.torch_only:  # the child process below
        print(json.dumps(pytorch(shape, args.calls, not args.params_only)))
        return
    from repr_jax.host_memory import keep_host_memory
    keep_host_memory()  # as the CLI: before JAX starts
    a = ours(shape, args.calls, not args.params_only)
    b = json.loads(torch_side(__file__, "--calls", str(args.calls), "--tokens", str(args.tokens),
                              "--batch", str(args.batch),
                              *(["--params-only"] if args.params_only else [])))
    wrt = "parameters" if args.params_only else "parameters and input"
    print(f"ViT-Ti block on {list(shape)}, forward + backward ({wrt}), best of 3 x "
          f"{args.calls} calls, {os.cpu_count()} CPUs")
    print(f"{'':16} {'repr_jax':>10} {'PyTorch':>10} {'PyTorch/ours':>13}")
    for name in a:
        print(f"{name:16} {a[name]:8.1f}ms {b[name]:8.1f}ms {b[name] / a[name]:12.2f}x")


if __name__ == "__main__":
    main()
