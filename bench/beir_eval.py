"""A BEIR-format collection at real size: 200,000 documents and 1,000 queries, evaluated with sparse
qrels and a tiled search, its metrics checked against pytrec_eval on the same run.

Writes (once) a generated collection (:func:`repr_jax.data.beir.synthetic_collection`), then, in a
fresh process: tokenises it (once, memory-mapped), embeds queries and corpus (a bag of words
through a fixed random map to 128 dims: real signal, no tied scores) through the evaluators'
:class:`~repr_jax.eval.Embedder`, runs the :class:`~repr_jax.eval.retrieval.Retrieval` evaluator (nDCG@10, Recall@100, MRR@10) and
reports its peak RSS (VmHWM) beside the corpus embeddings' size and what dense qrels would take.
The same top-100 run is then scored by pytrec_eval (trec_eval) and the largest difference printed.

    python bench/beir_eval.py [--dir DIR] [--docs N] [--queries Q]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

EVAL = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    from repr_jax.data import eval_sets
    from repr_jax.eval import Embedder
    from repr_jax.eval.retrieval import Retrieval, retrieve, topk_metrics

    root, data_dir, vocab, out = sys.argv[1:]
    # A bag of words through a fixed Gaussian map to 128 dims: signal, and no tied scores.
    projection = jax.random.normal(jax.random.PRNGKey(0), (4096, 128))

    def embed(variables, ids):
        counts = jnp.sum(jax.nn.one_hot(ids % 4096, 4096) * (ids > 4)[..., None], axis=1)
        return counts @ variables

    variables = projection
    s = eval_sets.beir(root, tokenizer=vocab, max_len=32, data_dir=data_dir)
    t1 = time.perf_counter()
    status = open("/proc/self/status").read()
    before_mb = int(status.split("VmHWM:")[1].split()[0]) / 1024  # imports, tokens, the set
    embedder = Embedder(embed, {}, batch_size=128, eval_sets=[s])
    rows = dict(Retrieval(embedder, metrics=("ndcg@10", "recall@100", "mrr@10"),
                          bootstrap=1000).run(variables))
    t2 = time.perf_counter()
    q = embedder.embed(variables, s.queries, "query")
    c = embedder.embed(variables, s.corpus, "pos")
    scores, idx = retrieve(q, c, k=100)
    ours = topk_metrics(idx, s.qrels, (10, 100))
    np.savez(out, scores=np.asarray(scores), idx=np.asarray(idx))
    status = open("/proc/self/status").read()
    print(json.dumps(dict(
        peak_mb=int(status.split("VmHWM:")[1].split()[0]) / 1024, before_eval_mb=before_mb,
        evaluator={k: float(v) for k, v in rows.items()}, ours=ours,
        corpus_embeddings_mb=c.size * 4 / 2**20, dims=int(c.shape[1]),
        tokens_mb=s.corpus.size * 4 / 2**20, judgements=len(s.qrels.grade),
        dense_qrels_mb=s.qrels.shape[0] * s.qrels.shape[1] / 2**20,
        setup_s=t1 - t0, evaluate_s=t2 - t1)))
""")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "repr_jax_bench_beir"))
    p.add_argument("--docs", type=int, default=200_000)
    p.add_argument("--queries", type=int, default=1000)
    args = p.parse_args()
    import numpy as np
    import pytrec_eval

    from repr_jax.data import beir
    root = Path(args.dir) / f"synthetic_{args.docs}_{args.queries}"
    if not (root / "qrels" / "test.tsv").exists():
        t0 = time.perf_counter()
        beir.synthetic_collection(root, num_docs=args.docs, num_queries=args.queries,
                                  num_train=2000)
        print(f"wrote {root} in {time.perf_counter() - t0:.0f} s", flush=True)
    vocab = Path(args.dir) / "vocab.txt"  # the generator's words whole
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "topic"]
                               + [f"w{i}" for i in range(2000)] + [str(i) for i in range(20)]))
    run_file = Path(args.dir) / "run.npz"
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", EVAL, str(root), str(Path(args.dir) / "tfds"),
                        str(vocab), str(run_file)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    result = json.loads(r.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    # pytrec_eval on the same top-100 run; qrels as written in the file
    qrels: dict[str, dict[str, int]] = {}
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, grade = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(grade)
    qids = sorted(qrels, key=lambda k: int(k[1:]))
    run = np.load(run_file)
    trec = {qid: {f"d{int(j)}": float(v) for j, v in zip(run["idx"][i], run["scores"][i])}
            for i, qid in enumerate(qids)}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100"}).evaluate(trec)
    top10 = {q: dict(sorted(d.items(), key=lambda kv: -kv[1])[:10]) for q, d in trec.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    reference = {"ndcg@10": np.mean([ref[q]["ndcg_cut_10"] for q in qids]),
                 "recall@100": np.mean([ref[q]["recall_100"] for q in qids]),
                 "mrr@10": np.mean([rr[q]["recip_rank"] for q in qids])}
    result["pytrec_eval"] = reference
    result["max_abs_difference"] = max(abs(result["ours"][k] - v) for k, v in reference.items())
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
