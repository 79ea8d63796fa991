"""Reranking: the pairs are scored as a direct loop scores them, a top-k is reordered without
losing or adding a document, and bad depths are one line."""

import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.data import beir, eval_sets
from repr_jax.eval.rerank import (Rerank, first_stage_candidates, reorder,
                                  score_candidates)


def _overlap(variables, q, d):
    """A real pair score: how many of the query's tokens the document holds, weighted."""
    hit = (q[:, :, None] == d[:, None, :]) & (q[:, :, None] > 1)
    return variables["w"] * hit.any(axis=2).sum(axis=1) - 1e-3 * (d > 0).sum(axis=1)


def test_scores_equal_a_direct_loop_and_batches_do_not_matter():
    rng = np.random.default_rng(0)
    queries = np.zeros((7, 20), np.int32)
    corpus = np.zeros((40, 50), np.int32)
    for row in queries:
        n = rng.integers(2, 20)
        row[:n] = rng.integers(2, 30, n)
    for row in corpus:
        n = rng.integers(2, 50)
        row[:n] = rng.integers(2, 30, n)
    cand = np.stack([rng.permutation(40)[:9] for _ in range(7)])
    variables = {"w": jnp.float32(2.0)}
    got = score_candidates(_overlap, variables, queries, corpus, cand, pad_id=0, batch_size=5)
    for i in range(7):
        for j in range(9):
            expect = _overlap(variables, jnp.asarray(queries[i:i + 1]),
                              jnp.asarray(corpus[cand[i, j]][None]))[0]
            np.testing.assert_allclose(got[i, j], expect, rtol=1e-6)
    other = score_candidates(_overlap, variables, queries, corpus, cand, pad_id=0, batch_size=64)
    np.testing.assert_allclose(got, other)


def test_reorder_keeps_exactly_the_candidates():
    rng = np.random.default_rng(1)
    for _ in range(20):
        cand = np.stack([rng.permutation(100)[:15] for _ in range(6)])
        scores = rng.integers(0, 4, cand.shape).astype(float)  # many ties
        out = reorder(cand, scores)
        for c, o, s in zip(cand, out, scores):
            assert sorted(c) == sorted(o)
            assert (np.diff(s[[list(c).index(x) for x in o]]) <= 0).all()


def _set(tmp_path):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=60, num_queries=12,
                                     num_train=8, seed=3)
    return eval_sets.beir(root, tokenizer="", max_len=32, data_dir=str(tmp_path / "tfds"))


def test_a_depth_larger_than_the_corpus_is_one_line(tmp_path):
    s = _set(tmp_path)
    with pytest.raises(ValueError, match=r"depth=61 is larger than beir_coll's corpus of 60") as e:
        first_stage_candidates("bm25", s, 61)
    assert "\n" not in str(e.value)
    cand = first_stage_candidates("bm25", s, 20)
    assert cand.shape == (len(s.queries), 20)
    with pytest.raises(ValueError, match="deeper than eval.rerank.depth=5"):
        Rerank(None, depth=5, metrics=("ndcg@10",))


def test_reranking_by_the_qrels_never_lowers_a_query(tmp_path):
    """Candidates sorted by their true grades: every query's nDCG@10 is at least the first
    stage's, and recall@depth is unchanged (the same documents)."""
    from repr_jax.eval.retrieval import topk_metrics
    s = _set(tmp_path)
    cand = first_stage_candidates("bm25", s, 20)
    grades = s.qrels.gains(cand)
    before = topk_metrics(cand, s.qrels, (10, 20), per_query=True)
    after = topk_metrics(reorder(cand, grades), s.qrels, (10, 20), per_query=True)
    assert (np.asarray(after["ndcg@10"]) >= np.asarray(before["ndcg@10"]) - 1e-6).all()
    np.testing.assert_allclose(after["recall@20"], before["recall@20"])


def test_the_evaluator_reports_before_after_and_their_difference(tmp_path):
    from repr_jax.eval import Embedder
    s = _set(tmp_path)
    embedder = Embedder(lambda v, x: x, {}, eval_sets=[s], pad_id=0, score_fn=_overlap)
    rows = dict(Rerank(embedder, depth=20, metrics=("ndcg@10", "mrr@10"), bootstrap=0,
                       batch_size=16).run({"w": jnp.float32(1.0)}))
    assert set(rows) == {f"beir_coll/{stage}/{m}" for stage in ("first_stage", "reranked", "gain")
                         for m in ("ndcg@10", "mrr@10")}
    for m in ("ndcg@10", "mrr@10"):
        np.testing.assert_allclose(rows[f"beir_coll/gain/{m}"], rows[f"beir_coll/reranked/{m}"]
                                   - rows[f"beir_coll/first_stage/{m}"], atol=1e-6)
    assert rows["beir_coll/reranked/ndcg@10"] > 0.2  # overlap with the query is a real signal
    without = Embedder(lambda v, x: x, {}, eval_sets=[s], pad_id=0)
    assert list(Rerank(without, depth=20).run({})) == []  # no scorer: no rows
