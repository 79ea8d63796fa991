"""Exact top-k search: repr_jax's chunked ``retrieve`` vs faiss-cpu's flat inner-product index.

    python bench/retrieval_vs_faiss.py                 # 1,000,000 x 128 corpus, 1,000 queries, k=10
    python bench/retrieval_vs_faiss.py --corpus 100000 # smaller

Both search the same float32 vectors exactly (inner product); the script checks they return the same
neighbours and prints wall times (best of ``--repeats``, after one warm-up that includes compilation)
and their ratio from this one run. Needs ``pip install faiss-cpu`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine  # noqa: E402


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--corpus-chunk", type=int, default=8192)
    p.add_argument("--block", type=int, default=64)
    args = p.parse_args(argv)
    machine = Machine.now()  # before this bench's own work loads the cores
    print(machine.line())

    import faiss
    import jax

    from repr_jax.eval import retrieve

    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((args.corpus, args.dim), dtype=np.float32)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    print(f"corpus {args.corpus:,} x {args.dim} float32 ({corpus.nbytes / 2**20:,.0f} MiB), "
          f"{args.queries:,} queries, k={args.k}; jax {jax.__version__} on "
          f"{jax.devices()[0].platform}, faiss {faiss.__version__} with {faiss.omp_get_max_threads()} "
          f"threads, {os.cpu_count()} CPUs")

    index = faiss.IndexFlatIP(args.dim)
    index.add(corpus)
    corpus_dev = jax.device_put(corpus)
    queries_dev = jax.device_put(queries)

    def ours():
        s, i = retrieve(queries_dev, corpus_dev, k=args.k, similarity="dot",
                        corpus_chunk=args.corpus_chunk, block=args.block)
        return jax.block_until_ready((s, i))

    def theirs():
        return index.search(queries, args.k)

    (s_ours, i_ours), (s_faiss, i_faiss) = ours(), theirs()  # warm-up (compiles ours)
    same = np.mean([len(set(a) & set(b)) / args.k for a, b in zip(np.asarray(i_ours), i_faiss)])
    score_err = float(np.abs(np.asarray(s_ours) - s_faiss).max())
    t_ours, t_faiss = best_of(ours, args.repeats), best_of(theirs, args.repeats)
    print(f"same neighbours: {same:.4%} (max score difference {score_err:.2e})")
    print(f"repr_jax retrieve : {t_ours * 1e3:9.1f} ms  ({args.queries / t_ours:,.0f} queries/s)")
    print(f"faiss IndexFlatIP : {t_faiss * 1e3:9.1f} ms  ({args.queries / t_faiss:,.0f} queries/s)")
    print(machine.ratio("faiss / repr_jax time (above 1: repr_jax faster)", t_faiss / t_ours))


if __name__ == "__main__":
    main()
