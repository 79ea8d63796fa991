"""BM25 (bm25s, Lucene's scoring) equals the formula written out, and its row joins a text run's
reference rows for every BEIR set."""

import math
from collections import Counter

import numpy as np
import pytest

from repr_jax.data import beir, eval_sets
from repr_jax.eval import bm25
from repr_jax.eval.retrieval import SparseQrels, topk_metrics


def direct_scores(queries, corpus, k1=bm25.K1, b=bm25.B):
    """``[Q, N]`` BM25 scores from the formula, term by term."""
    docs = [Counter(d) for d in bm25.words(corpus)]
    lengths = np.asarray([sum(d.values()) for d in docs], float)
    avgdl, n = lengths.mean(), len(docs)
    df = Counter(t for d in docs for t in d)
    out = np.zeros((len(queries), n))
    for i, q in enumerate(bm25.words(queries)):
        for t in q:  # a repeated query word counts again, as in Lucene's sum over query terms
            if t not in df:
                continue
            idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            for j, d in enumerate(docs):
                tf = d.get(t, 0)
                out[i, j] += idf * tf / (tf + k1 * (1 - b + b * lengths[j] / avgdl))
    return out


def _collection(tmp_path):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=300, num_queries=40,
                                     num_train=32, seed=2)
    return beir.read_collection(root), root


def test_bm25_scores_and_ndcg_equal_the_formula(tmp_path):
    c, _ = _collection(tmp_path)
    r = c.qrels[c.test_split]
    used = np.unique(r["query"])
    queries = [c.query_texts[i] for i in used]
    qrels = SparseQrels(np.searchsorted(used, r["query"]), r["doc"], r["grade"],
                        (len(used), len(c.doc_ids)))
    idx, scores = bm25.bm25_topk(queries, c.doc_texts, k=10)
    full = direct_scores(queries, c.doc_texts)
    np.testing.assert_allclose(scores, np.take_along_axis(full, idx, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scores[:, 0], full.max(axis=1), rtol=1e-5)  # nothing better missed
    direct = np.argsort(-full, axis=1, kind="stable")[:, :10]
    ours, theirs = (topk_metrics(i, qrels, (10,), per_query=True)["ndcg@10"]
                    for i in (idx, direct))
    np.testing.assert_allclose(np.mean(ours), np.mean(theirs), atol=1e-6)
    assert 0.3 < float(np.mean(ours)) <= 1.0  # queries share words with their source document


def test_a_beir_set_carries_its_texts_for_the_bm25_row(tmp_path):
    _, root = _collection(tmp_path)
    s = eval_sets.beir(root, tokenizer="", max_len=32, data_dir=str(tmp_path / "tfds"))
    rows = dict(bm25.bm25_metrics([s], ks=(1, 10), metrics=("ndcg@10", "recall@1"),
                                  bootstrap=0))
    assert set(rows) == {f"{s.name}/ndcg@10", f"{s.name}/recall@1"}
    assert 0.0 < rows[f"{s.name}/ndcg@10"] <= 1.0
    assert len(s.texts[0]) == len(s.queries) and len(s.texts[1]) == len(s.corpus)


@pytest.mark.slow
def test_a_text_run_has_a_bm25_reference_row_per_set(tmp_path):
    from repr_jax import config as C
    from repr_jax.train import train_and_evaluate
    _, root = _collection(tmp_path)
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=32, data_dir=str(tmp_path / "tfds")),
        encoder=C.EncoderConfig(name="text_transformer", width=32, depth=1, num_heads=2,
                                mlp_dim=64, pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce"),
        train=C.TrainConfig(batch_size=8, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), bootstrap=0, sets=(f"beir:{root}",)))
    rows = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)["eval_rows"]
    lexical = {r["metric"]: r["value"] for r in rows if r["representation"] == bm25.NAME}
    assert set(lexical) == {f"beir_coll/{m}" for m in cfg.eval.retrieval.metrics}
    trained = [r for r in rows if r["representation"] not in (bm25.NAME,)
               and r["metric"] == "beir_coll/ndcg@10"]
    assert trained and lexical["beir_coll/ndcg@10"] > 0.3


def test_indexing_logs_no_debug_line_once_the_root_logger_has_a_handler():
    """Issue 49: `repr-jax compare ... bm25` printed `DEBUG:bm25s:Building index from tokens`:
    bm25s sets its logger to DEBUG, and absl gives the root logger a handler the first time
    orbax logs. bm25s' records now follow the root logger's level."""
    import logging

    class Kept(logging.Handler):
        def __init__(self):
            super().__init__(logging.NOTSET)
            self.records = []

        def emit(self, record):
            self.records.append(record)

    root, kept = logging.getLogger(), Kept()
    level = root.level
    root.addHandler(kept)
    root.setLevel(logging.WARNING)  # the default an application that configured nothing has
    try:
        bm25.BM25(["a cat sat", "a dog ran", "the cat ran"]).topk(["cat"], 2)
    finally:
        root.removeHandler(kept)
        root.setLevel(level)
    assert not [r for r in kept.records if r.name.startswith("bm25s")], \
        [r.getMessage() for r in kept.records]
