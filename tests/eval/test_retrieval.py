"""Retrieval: exact chunked top-k, ranking metrics equal to pytrec_eval's (trec_eval), quantised
search."""

import importlib
import numpy as np
import pytest

from repr_jax import eval as E
from repr_jax.eval.quantization import (bytes_per_vector, dequantize_int8, int8_calibration,
                                        quantize_binary, quantize_int8, unpack_binary)
from repr_jax.eval.retrieval import topk_metrics

pytrec_eval = pytest.importorskip("pytrec_eval")

KS = (1, 3, 5, 10, 20)
# Our name -> trec_eval measure name; mrr@k is recip_rank on the top-k run.
TREC = {"recall": "recall_{}", "precision": "P_{}", "ndcg": "ndcg_cut_{}", "map": "map_cut_{}"}


def _trec(scores, qrels, ks, *, docids):
    """pytrec_eval on the same scores; documents named ``docids[j]``."""
    q_n = scores.shape[0]
    run = {f"q{i}": {docids[j]: float(scores[i, j]) for j in range(scores.shape[1])}
           for i in range(q_n)}
    rel = {f"q{i}": {docids[j]: int(qrels[i, j]) for j in range(scores.shape[1])}
           for i in range(q_n)}
    measures = {m.format(k) for m in TREC.values() for k in ks}
    out = pytrec_eval.RelevanceEvaluator(rel, measures).evaluate(run)
    mean = {f"{ours}@{k}": np.mean([out[q][trec.format(k)] for q in out])
            for ours, trec in TREC.items() for k in ks}
    for k in ks:  # reciprocal rank within the top k: trec_eval's recip_rank on the truncated run
        top = {q: dict(sorted(d.items(), key=lambda kv: (-kv[1], [-ord(c) for c in kv[0]]))[:k])
               for q, d in run.items()}
        rr = pytrec_eval.RelevanceEvaluator(rel, {"recip_rank"}).evaluate(top)
        mean[f"mrr@{k}"] = np.mean([rr[q]["recip_rank"] for q in rr])
    return mean


@pytest.mark.parametrize("graded", [False, True])
def test_metrics_equal_pytrec_eval_on_random_runs(graded):
    rng = np.random.default_rng(int(graded))
    q, n = 40, 60
    scores = rng.normal(size=(q, n)).astype(np.float32)
    qrels = rng.integers(0, 4 if graded else 2, size=(q, n)) * (rng.uniform(size=(q, n)) < 0.15)
    qrels[np.arange(q), rng.integers(0, n, q)] = 1  # every query has a relevant document
    ours = E.retrieval_metrics(scores, qrels, KS)
    ref = _trec(scores, qrels, KS, docids=[f"d{j:03d}" for j in range(n)])
    for key, value in ref.items():
        assert ours[key] == pytest.approx(value, abs=1e-5), key


def test_ties_are_broken_by_document_order():
    """Scores rounded to 3 levels: many ties. pytrec_eval breaks ties by *descending* doc id, ours by
    ascending index, so naming document j with a descending id makes the two orders identical."""
    rng = np.random.default_rng(2)
    q, n = 30, 40
    scores = np.round(rng.uniform(size=(q, n)) * 2).astype(np.float32)
    qrels = rng.integers(0, 3, size=(q, n)) * (rng.uniform(size=(q, n)) < 0.2)
    qrels[:, 0] = 1
    ours = E.retrieval_metrics(scores, qrels, KS)
    ref = _trec(scores, qrels, KS, docids=[f"d{n - j:03d}" for j in range(n)])
    for key, value in ref.items():
        assert ours[key] == pytest.approx(value, abs=1e-5), key


def test_unjudged_queries_are_excluded_and_all_zero_qrels_fail():
    scores = np.asarray([[0.9, 0.1], [0.5, 0.4]], np.float32)
    qrels = np.asarray([[0, 1], [0, 0]])
    per_q = E.retrieval_metrics(scores, qrels, (1, 2), per_query=True)
    assert per_q["mrr@2"].shape == (1,) and float(per_q["mrr@2"][0]) == 0.5
    with pytest.raises(ValueError, match="no query has a relevant"):
        E.retrieval_metrics(scores, np.zeros((2, 2)), (1,))
    with pytest.raises(ValueError, match=r"\[Q, N\]"):
        E.retrieval_metrics(scores, qrels[:1], (1,))


@pytest.fixture(params=["one matrix", "tiled"])
def search_path(request, monkeypatch):
    """Each search test runs both ways ``retrieve`` can take: small problems as one score matrix,
    large ones tiled with the two-stage search (forced here by a zero threshold)."""
    if request.param == "tiled":
        monkeypatch.setattr(importlib.import_module("repr_jax.eval.retrieval"), "BRUTE_FORCE", 0)
    return request.param


@pytest.mark.parametrize("similarity", ["cosine", "dot", "l2"])
def test_chunked_retrieve_equals_brute_force(similarity, search_path):
    rng = np.random.default_rng(3)
    queries, corpus = rng.normal(size=(37, 8)), rng.normal(size=(301, 8))
    scores, idx = E.retrieve(queries, corpus, k=7, similarity=similarity, query_chunk=10,
                             corpus_chunk=64)
    if similarity == "cosine":
        full = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (
            corpus / np.linalg.norm(corpus, axis=1, keepdims=True)).T
    elif similarity == "dot":
        full = queries @ corpus.T
    else:
        full = -((queries[:, None] - corpus[None]) ** 2).sum(-1)
    expect = np.argsort(-full, axis=1, kind="stable")[:, :7]
    np.testing.assert_array_equal(idx, expect)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expect, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("block,corpus_chunk", [(1, 8), (3, 24), (8, 24), (64, 301), (5, 10)])
def test_two_stage_search_equals_brute_force_with_ties_and_a_padded_tail(block, corpus_chunk,
                                                                        search_path):
    """Block maxima, then the k best blocks rescored: the same neighbours, in the same order (ties
    to the lower index) as a stable sort of the full score matrix, whatever the block and chunk
    sizes, a corpus that is no multiple of either, and k above the number of blocks per chunk."""
    rng = np.random.default_rng(5)
    corpus = rng.integers(-2, 3, size=(301, 4)).astype(np.float32)  # small integers: many ties
    queries = rng.integers(-2, 3, size=(13, 4)).astype(np.float32)
    full = queries @ corpus.T
    for k in (1, 7, 40):
        scores, idx = E.retrieve(queries, corpus, k=k, similarity="dot", block=block,
                                 corpus_chunk=corpus_chunk, query_chunk=5)
        expect = np.argsort(-full, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(idx, expect)
        np.testing.assert_array_equal(scores, np.take_along_axis(full, expect, 1))


def test_retrieve_keeps_corpus_order_on_ties_across_chunks(search_path):
    corpus = np.ones((100, 4), np.float32)  # every document ties
    _, idx = E.retrieve(np.ones((2, 4)), corpus, k=5, corpus_chunk=16)
    assert idx.tolist() == [[0, 1, 2, 3, 4]] * 2


def test_topk_metrics_equal_full_matrix_metrics():
    rng = np.random.default_rng(4)
    q, c = rng.normal(size=(50, 6)), rng.normal(size=(200, 6))
    qrels = (rng.uniform(size=(50, 200)) < 0.05).astype(int) * rng.integers(1, 3, (50, 200))
    qrels[:, 0] += 1
    full = E.retrieval_metrics((q @ c.T).astype(np.float32), qrels, (1, 10))
    _, idx = E.retrieve(q, c, k=10, similarity="dot")
    chunked = topk_metrics(idx, qrels, (1, 10))
    for key in full:
        assert chunked[key] == pytest.approx(full[key], abs=1e-6), key


def test_quantisation_round_trips_and_memory():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(100, 20)).astype(np.float32)
    cal = int8_calibration(x)
    codes = quantize_int8(x, cal)
    assert codes.dtype == np.int8 and int(codes.min()) == -128 and int(codes.max()) == 127
    np.testing.assert_allclose(dequantize_int8(codes, cal), x, atol=float(cal[1].max()) / 2 + 1e-6)
    packed = quantize_binary(x)
    assert packed.shape == (100, 3) and packed.dtype == np.uint8
    np.testing.assert_array_equal(unpack_binary(packed, 20), np.where(x > 0, 1.0, -1.0))
    assert [bytes_per_vector(p, 384) for p in ("float32", "int8", "binary")] == [1536, 384, 48]


def test_quantised_search_quality_ordering_on_clustered_data():
    """Float >= rescored binary >= binary in recall of the exact neighbours; int8 ~ float."""
    rng = np.random.default_rng(6)
    corpus = rng.normal(size=(2000, 64)).astype(np.float32)
    queries = corpus[:200] + 0.3 * rng.normal(size=(200, 64)).astype(np.float32)
    qrels = np.zeros((200, 2000), int)
    qrels[np.arange(200), np.arange(200)] = 1
    recall = {}
    for name, kw in {"float32": dict(precision="float32"), "int8": dict(precision="int8"),
                     "binary": dict(precision="binary"),
                     "rescored": dict(precision="binary", rescore_multiplier=10)}.items():
        _, idx = E.quantized_search(queries, corpus, k=10, **kw)
        recall[name] = topk_metrics(idx, qrels, (1,))["recall@1"]
    assert recall["float32"] == 1.0 and recall["int8"] >= 0.99
    assert recall["rescored"] >= recall["binary"] and recall["rescored"] >= 0.95
    with pytest.raises(ValueError, match="unknown precision"):
        E.quantized_search(queries, corpus, precision="int4")
