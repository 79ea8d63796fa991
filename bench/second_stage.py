"""The second stage at size: cross-encoder rerank throughput, ColBERT's exact MaxSim search over a
100,000-document corpus against single-vector search, and BM25 over the same number of documents.

* Rerank: all-MiniLM-L6-v2 as a cross-encoder (its weights, a fixed head) scoring query/document
  pairs of stdlib prose (queries <= 32 tokens, documents <= 128), batched as ``eval.rerank`` does
  (:func:`repr_jax.eval.rerank.score_pairs`): pairs/s after compilation.
* ColBERT: a corpus of ``--docs`` documents of 8-56 tokens (mean 32), each token a 128-d unit
  vector drawn from a fixed table (the index is what is measured, not an encoder), written by
  :func:`repr_jax.eval.late_interaction.build_index` as float16 and as int8, then ``--queries``
  queries of 32 tokens searched exactly (:func:`search`, top 10). Beside it: one 128-d float32
  vector a document (the tokens' mean) searched exactly by
  :func:`repr_jax.eval.retrieval.retrieve`. Seconds, bytes a document, the process's peak RSS
  (each side in a fresh process).
* ColBERT pair scores (``--parts colbert_pairs``): MiniLM with a random 128-d projection as a
  ColBERT, ``--pairs`` pairs of ``--queries`` queries each with the same number of candidates
  drawn from ``--docs / 100`` documents; each pair through the encoder (``rerank.score_pairs``
  with the method's pair score) against each distinct text through it once
  (``late_interaction.score_pairs``), in one process, the same pairs.
* BM25: bm25s indexing ``--docs`` documents of generated words and retrieving the top 100 for
  1,000 queries.

    python bench/second_stage.py [--docs 100000] [--queries 100] [--pairs 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine  # noqa: E402

PROBE = textwrap.dedent("""
    import json, resource, sys, tempfile, time
    from pathlib import Path
    import numpy as np
    kind, docs, queries, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    out = {}
    if kind == "rerank":
        import inspect, json as js
        import jax.numpy as jnp
        from repr_jax.data.tokenizer import minilm_dir
        from repr_jax.encoders.pretrained import load_sentence_transformer
        from repr_jax.eval.rerank import score_pairs
        from repr_jax.methods.cross_encoder import CrossEncoder
        loaded = load_sentence_transformer(minilm_dir())
        words = inspect.getsource(inspect).split()
        texts = [" ".join(words[(i + j) % len(words)] for j in range(90))
                 for i in range(0, 90 * 2 * pairs, 90)]
        tok = loaded.tokenizer
        q = tok.encode([t[:120] for t in texts[:pairs]], max_len=32, pad_to=32).ids
        d = tok.encode(texts[pairs:], max_len=128, pad_to=128).ids
        model = CrossEncoder(loaded.module.clone(max_len=159), 0)
        rng = np.random.default_rng(0)
        variables = {"params": {"encoder": dict(loaded.params, position_embeddings=
                                                loaded.params["position_embeddings"][:159]),
                                "head": {"kernel": rng.normal(0, 0.1, (384, 1)).astype("f4"),
                                         "bias": np.zeros(1, "f4")}}}
        def score(v, a, b):
            return model.apply(v, a, b, method=CrossEncoder.score)
        idx = np.arange(pairs)
        score_pairs(score, variables, q, d, idx[:128], idx[:128], pad_id=0)  # compile
        t = time.perf_counter()
        s = score_pairs(score, variables, q, d, idx, idx, pad_id=0, batch_size=64)
        out["seconds"] = time.perf_counter() - t
        out["pairs_per_s"] = pairs / out["seconds"]
        out["tokens_per_pair"] = float(((q != 0).sum() + (d != 0).sum() - pairs) / pairs)
    elif kind == "colbert_pairs":
        import inspect
        import jax
        from repr_jax.data.tokenizer import minilm_dir
        from repr_jax.encoders.pretrained import load_sentence_transformer
        from repr_jax.eval import late_interaction as li
        from repr_jax.eval.rerank import score_pairs
        from repr_jax.methods.colbert import ColBERT
        loaded = load_sentence_transformer(minilm_dir())
        words = inspect.getsource(inspect).split()
        pool = docs // 100  # candidates drawn from a shared pool, as a first stage's repeat
        texts = [" ".join(words[(i + j) % len(words)] for j in range(90))
                 for i in range(0, 90 * (queries + pool), 90)]
        tok = loaded.tokenizer
        q = tok.encode([t[:120] for t in texts[:queries]], max_len=32, pad_to=32).ids
        d = tok.encode(texts[queries:], max_len=128, pad_to=128).ids
        model = ColBERT(loaded.module, 128, 0)
        rng = np.random.default_rng(0)
        variables = {"params": {"encoder": loaded.params, "project": {
            "kernel": rng.normal(0, 0.05, (384, 128)).astype("f4")}}}
        per_query = pairs // queries
        q_of = np.repeat(np.arange(queries), per_query)
        d_of = np.concatenate([rng.choice(pool, per_query, replace=False)
                               for _ in range(queries)])
        def score(v, a, b):
            return model.apply(v, a, b, method=ColBERT.score)
        def tokens_query(v, x):  # one function a side: compiled once, reused when warm
            return model.apply(v, x, "query", method=ColBERT.tokens)
        def tokens_doc(v, x):
            return model.apply(v, x, "doc", method=ColBERT.tokens)
        both = {"pair passes (rerank.score_pairs)": lambda: score_pairs(
                    score, variables, q, d, q_of, d_of, pad_id=0, batch_size=64),
                "each text once (late_interaction.score_pairs)": lambda: li.score_pairs(
                    tokens_query, tokens_doc, variables, q, d, q_of, d_of, pad_id=0,
                    batch_size=64)}
        got = {}
        for name, fn in both.items():
            fn()  # compile (and warm)
            t = time.perf_counter()
            got[name] = fn()
            out[name] = time.perf_counter() - t
        a, b = got.values()
        out["max_rel_diff"] = float(np.abs(a - b).max() / np.abs(a).max())
        out["distinct_docs"] = int(len(np.unique(d_of)))
    elif kind in ("float16", "int8", "single"):
        import jax, jax.numpy as jnp
        from repr_jax.eval.late_interaction import build_index, search
        from repr_jax.eval.retrieval import retrieve
        rng = np.random.default_rng(0)
        table = rng.normal(size=(30000, 128)).astype("f4")
        table /= np.linalg.norm(table, axis=1, keepdims=True)
        lengths = rng.integers(8, 57, docs)
        corpus = np.zeros((docs, 56), np.int32)
        for row, n in zip(corpus, lengths):
            row[:n] = rng.integers(1, 30000, n)
        qids = rng.integers(1, 30000, (queries, 32)).astype(np.int32)
        if kind == "single":
            emb = np.stack([table[r[r > 0]].mean(0) for r in corpus])
            qv = table[qids].mean(1)
            retrieve(jnp.asarray(qv[:2]), jnp.asarray(emb), k=10)  # compile
            t = time.perf_counter()
            jax.block_until_ready(retrieve(jnp.asarray(qv), jnp.asarray(emb), k=10))
            out["search_s"] = time.perf_counter() - t
            out["bytes_per_doc"] = emb.nbytes / docs
        else:
            def fn(v, ids):
                return jnp.asarray(table)[ids], ids != 0
            with tempfile.TemporaryDirectory() as tmp:
                t = time.perf_counter()
                index = build_index(fn, None, corpus, Path(tmp) / "i", storage=kind,
                                    batch_size=1024)
                out["build_s"] = time.perf_counter() - t
                out["bytes_per_doc"] = index.nbytes / docs
                search(index, table[qids[:2]], qids[:2] > 0, k=10)  # compile every tile width
                t = time.perf_counter()
                search(index, table[qids], qids > 0, k=10)
                out["search_s"] = time.perf_counter() - t
        out["flop"] = 2.0 * queries * 32 * int(lengths.sum()) * 128
    elif kind == "bm25":
        from repr_jax.eval.bm25 import BM25
        rng = np.random.default_rng(0)
        vocab = [f"w{i}" for i in range(50000)]
        zipf = np.minimum(rng.zipf(1.2, (docs, 30)), 50000) - 1
        texts = [" ".join(vocab[j] for j in row) for row in zipf]
        qs = [" ".join(vocab[j] for j in row[:4]) for row in zipf[:1000]]
        t = time.perf_counter()
        index = BM25(texts)
        out["build_s"] = time.perf_counter() - t
        t = time.perf_counter()
        index.topk(qs, 100)
        out["search_s"] = time.perf_counter() - t
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))
""")


def _run(kind: str, args) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, kind, str(args.docs), str(args.queries),
                           str(args.pairs)], capture_output=True, text=True,
                          env={**os.environ, "TQDM_DISABLE": "1"})
    if done.returncode:
        raise SystemExit(f"{kind} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--pairs", type=int, default=2048)
    p.add_argument("--parts", default="rerank,colbert,colbert_pairs,bm25",
                   help="which measurements, comma-separated (default all)")
    args = p.parse_args()
    parts = args.parts.split(",")
    print(Machine.now().line())
    if "rerank" in parts:
        r = _run("rerank", args)
        print(f"cross-encoder rerank (MiniLM, {r['tokens_per_pair']:.0f} tokens a pair, batch 64): "
              f"{r['pairs_per_s']:.0f} pairs/s ({args.pairs} pairs in {r['seconds']:.1f} s), "
              f"peak RSS {r['peak_rss_mb']:.0f} MB")
    if "colbert" in parts:
        _colbert(args)
    if "colbert_pairs" in parts:
        r = _run("colbert_pairs", args)
        names = [k for k in r if "score_pairs" in k]
        print(f"\nColBERT pair scores (MiniLM, 128-d, {args.pairs:,} pairs of {args.queries} "
              f"queries x 32 tokens and {r['distinct_docs']:,} distinct documents x 128, "
              f"batch 64; largest difference {r['max_rel_diff']:.1e} of the largest score):")
        for k in names:
            print(f"  {k}: {r[k]:.1f} s, {args.pairs / r[k]:.0f} pairs/s")
        print(f"  ratio {r[names[0]] / r[names[1]]:.2f}x")
    if "bm25" in parts:
        r = _run("bm25", args)
        print(f"\nBM25 (bm25s): index {args.docs:,} documents of 30 words {r['build_s']:.1f} s, "
              f"1,000 queries top 100 {r['search_s']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB")
    print(f"load {os.getloadavg()[0]:.2f} after")


def _colbert(args) -> None:
    print(f"\n| {args.docs:,} documents, {args.queries} queries x 32 tokens, top 10 | search s | "
          f"GFLOP/s | bytes/doc | build s | peak RSS MB |\n| --- | --- | --- | --- | --- | --- |")
    for kind in ("float16", "int8", "single"):
        r = _run(kind, args)
        rate = f"{r['flop'] / r['search_s'] / 1e9:.0f}" if kind != "single" else "-"
        name = {"single": "single vector (float32, exact)"}.get(kind, f"ColBERT MaxSim ({kind})")
        print(f"| {name} | {r['search_s']:.2f} | {rate} | {r['bytes_per_doc']:,.0f} | "
              f"{r.get('build_s', 0):.1f} | {r['peak_rss_mb']:,.0f} |")


if __name__ == "__main__":
    main()
