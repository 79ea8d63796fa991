"""Exact top-k search: repr_jax's chunked ``retrieve`` vs faiss-cpu's flat inner-product index.

    python bench/retrieval_vs_faiss.py                 # 1,000,000 x 128 corpus, 1,000 queries, k=10
    python bench/retrieval_vs_faiss.py --corpus 100000 # smaller
    python bench/retrieval_vs_faiss.py --data clusters # tight clusters: near-ties in every top-k

Both search the same float32 vectors exactly (inner product); the script checks they return the same
neighbours and prints wall times (best of ``--repeats``, after one warm-up that includes compilation)
and their ratio from this one run, for ``retrieve``'s default ``scan_dtype="auto"`` (a bfloat16
scan made exact, where the CPU has bfloat16 dot products) and its float32 scan. ``--data clusters``
draws vectors around 1,000 centres (a decaying spectrum, 30% noise): most queries then have
neighbours within bfloat16's rounding bound, which is what ``auto``'s probe is for.
Needs ``pip install faiss-cpu`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine, take_turns  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--corpus-chunk", type=int, default=8192)
    p.add_argument("--block", type=int, default=None, help="default: retrieve's auto_block")
    p.add_argument("--data", choices=("gaussian", "clusters"), default="gaussian")
    args = p.parse_args(argv)
    machine = Machine.now()  # before this bench's own work loads the cores
    print(machine.line())

    import faiss
    import jax

    from repr_jax.eval import retrieve
    from repr_jax.eval.retrieval import bfloat16_is_fast

    rng = np.random.default_rng(0)
    if args.data == "gaussian":
        corpus = rng.standard_normal((args.corpus, args.dim), dtype=np.float32)
        queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    else:
        scale = np.arange(1, args.dim + 1, dtype=np.float32) ** -0.5
        centres = rng.standard_normal((1000, args.dim), dtype=np.float32) * scale

        def draw(n):
            return centres[rng.integers(0, 1000, n)] + 0.3 * scale * rng.standard_normal(
                (n, args.dim), dtype=np.float32)
        corpus, queries = draw(args.corpus), draw(args.queries)
    print(f"{args.data} corpus {args.corpus:,} x {args.dim} float32 "
          f"({corpus.nbytes / 2**20:,.0f} MiB), "
          f"{args.queries:,} queries, k={args.k}; jax {jax.__version__} on "
          f"{jax.devices()[0].platform}, faiss {faiss.__version__} with {faiss.omp_get_max_threads()} "
          f"threads, {os.cpu_count()} CPUs")

    index = faiss.IndexFlatIP(args.dim)
    index.add(corpus)
    corpus_dev = jax.device_put(corpus)
    queries_dev = jax.device_put(queries)

    def ours(scan_dtype):
        def run():
            s, i = retrieve(queries_dev, corpus_dev, k=args.k, similarity="dot",
                            corpus_chunk=args.corpus_chunk, block=args.block, scan_dtype=scan_dtype)
            return jax.block_until_ready((s, i))
        return run

    def theirs():
        return index.search(queries, args.k)

    s_faiss, i_faiss = theirs()
    print(f"bfloat16 dot products fast here: {bfloat16_is_fast()}")
    for scan_dtype in ("auto", "float32"):
        s_ours, i_ours = ours(scan_dtype)()  # warm-up (compiles)
        same = np.mean([len(set(a) & set(b)) / args.k for a, b in zip(np.asarray(i_ours), i_faiss)])
        score_err = float(np.abs(np.asarray(s_ours) - s_faiss).max())
        print(f"scan_dtype={scan_dtype}: same neighbours as faiss {same:.4%} "
              f"(max score difference {score_err:.2e})")
    times = take_turns({"auto": ours("auto"), "float32": ours("float32"), "faiss": theirs},
                    args.repeats)
    for name, t in times.items():
        label = "faiss IndexFlatIP" if name == "faiss" else f"repr_jax retrieve, {name}"
        print(f"{label:26s}: {t * 1e3:9.1f} ms  ({args.queries / t:,.0f} queries/s)")
    print(machine.ratio("faiss / repr_jax float32 scan time", times["faiss"] / times["float32"]))
    print(machine.ratio("faiss / repr_jax time (above 1: repr_jax faster)",
                        times["faiss"] / times["auto"]))


if __name__ == "__main__":
    main()
