"""Retrieval: exact chunked top-k, ranking metrics equal to pytrec_eval's (trec_eval), quantised
search."""

import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import eval as E
from repr_jax.eval.quantization import (bytes_per_vector, dequantize_int8, int8_calibration,
                                        quantize_binary, quantize_int8, unpack_binary)
from repr_jax.eval import retrieval as R
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


@pytest.fixture(params=["one matrix", "tiled float32", "tiled bfloat16"])
def search_path(request, monkeypatch):
    """Each search test runs every way ``retrieve`` can take: small problems as one score matrix,
    large ones tiled with the two-stage search (forced here by a zero threshold), its scan in
    float32 or in bfloat16 (``scan_dtype="auto"`` told the CPU is or is not fast at it)."""
    if request.param != "one matrix":
        monkeypatch.setattr(R, "BRUTE_FORCE", 0)
        monkeypatch.setattr(R, "bfloat16_is_fast", lambda: request.param.endswith("bfloat16"))
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


def test_bfloat16_rounding_bound_holds_and_is_nearly_reached():
    """The scan's bound ``rho |q| |c|`` against float64: entries just under a bfloat16 rounding
    midpoint (each rounds down by ~u = 2^-8 of itself) make the error 97% of it; random vectors of
    mixed scales stay under it."""
    d = 128
    rho = R._bound_factor(d)
    x = np.full((1, d), 1 + 0.99 * 2.0 ** -8, np.float32)
    got = float(R._scan_scores(jnp.asarray(x), jnp.asarray(x), "dot", True)[0, 0])
    err, bound = abs(got - float(x[0].astype(np.float64) @ x[0])), rho * float(x[0] @ x[0])
    assert 0.95 * bound < err <= bound
    rng = np.random.default_rng(0)
    q = (rng.normal(size=(20, d)) * np.exp(rng.normal(size=(20, d)))).astype(np.float32)
    c = (rng.normal(size=(300, d)) * np.exp(rng.normal(size=(300, d)))).astype(np.float32)
    got = np.asarray(R._scan_scores(jnp.asarray(q), jnp.asarray(c), "dot", True), np.float64)
    exact = q.astype(np.float64) @ c.astype(np.float64).T
    bound = rho * np.linalg.norm(q, axis=1)[:, None] * np.linalg.norm(c, axis=1)[None, :]
    assert (np.abs(got - exact) <= bound).all()


SPREAD = {"dot": 1e-3, "l2": 1e-2, "cosine": 5e-2}  # cosine and l2 differ at second order


def _clusters(rng, n, q, d=16, spread=1e-3):
    """Queries and documents around 8 centres, ``spread`` apart: near-ties far inside bfloat16's
    rounding bound (~0.008 of |q| |c|) yet far above float32's, so float64 fixes the order."""
    centres = rng.normal(size=(8, d))
    def draw(m):  # in cluster order, so a cluster fills whole blocks
        return (centres[np.sort(rng.integers(0, 8, m))] + spread * rng.normal(size=(m, d))).astype(
            np.float32)
    return rng.permutation(draw(q)), draw(n)


def _assert_true_top_k(idx, queries, corpus, similarity):
    """``idx`` holds the top-k under float64 scores, up to float32 rounding (near-ties inside it
    may swap)."""
    q, c = queries.astype(np.float64), corpus.astype(np.float64)
    if similarity == "cosine":
        q, c = q / np.linalg.norm(q, axis=1, keepdims=True), c / np.linalg.norm(c, axis=1, keepdims=True)
    full = -((q[:, None] - c[None]) ** 2).sum(-1) if similarity == "l2" else q @ c.T
    best = -np.sort(-full, axis=1)[:, :idx.shape[1]]
    np.testing.assert_allclose(np.take_along_axis(full, np.asarray(idx), 1), best, rtol=1e-6,
                               atol=1e-5)


@pytest.mark.parametrize("similarity", ["cosine", "dot", "l2"])
@pytest.mark.parametrize("max_rescored", [1024, 0])
def test_bfloat16_scan_settles_near_ties_exactly(similarity, max_rescored, monkeypatch):
    """Clustered data leaves most queries unproven by the bfloat16 scan. They are settled by
    rescoring every block whose bound reaches their k-th score, or (no block budget) by a float32
    scan; both give the float32 scan's neighbours and scores, float64's up to its rounding."""
    monkeypatch.setattr(R, "MAX_RESCORED_BLOCKS", max_rescored)
    monkeypatch.setattr(R, "BRUTE_FORCE", 0)
    calls = []
    monkeypatch.setattr(R, "_rank_blocks_jit", lambda *a, **kw: calls.append(1) or
                        R._rank_blocks(*a, **kw))
    queries, corpus = _clusters(np.random.default_rng(1), 2000, 40, spread=SPREAD[similarity])
    k = 7
    q, c = jnp.asarray(queries), jnp.asarray(corpus)
    if similarity == "cosine":
        q, c = R.normalize_rows(q), R.normalize_rows(c)
    _, _, proven, _ = R._topk_blocks(q, c, k=k, similarity="dot" if similarity == "cosine"
                                     else similarity, corpus_chunk=256, block=8, low=True)
    assert np.mean(np.asarray(proven)) < 0.5
    s_bf, i_bf = E.retrieve(queries, corpus, k=k, similarity=similarity, corpus_chunk=256,
                            block=8, scan_dtype="bfloat16")
    s_32, i_32 = E.retrieve(queries, corpus, k=k, similarity=similarity, corpus_chunk=256,
                            block=8, scan_dtype="float32")
    _assert_true_top_k(i_bf, queries, corpus, similarity)
    np.testing.assert_array_equal(i_bf, i_32)
    np.testing.assert_allclose(s_bf, s_32, rtol=1e-6, atol=1e-6)
    assert bool(calls) == (max_rescored > 0)


def test_auto_scan_keeps_bfloat16_only_where_it_proves_most_queries(monkeypatch):
    """``scan_dtype="auto"`` on a CPU with fast bfloat16: the first ``AUTO_PROBE`` queries decide.
    Well-separated data keeps the bfloat16 scan for the rest; near-ties switch to float32."""
    monkeypatch.setattr(R, "BRUTE_FORCE", 0)
    monkeypatch.setattr(R, "AUTO_PROBE", 8)
    monkeypatch.setattr(R, "bfloat16_is_fast", lambda: True)
    scans = []
    search = R._topk_blocks
    monkeypatch.setattr(R, "_topk_blocks", lambda q, c, **kw: scans.append(
        (q.shape[0], kw.get("low", False))) or search(q, c, **kw))
    rng = np.random.default_rng(2)
    separated = rng.normal(size=(40, 16)).astype(np.float32), rng.normal(size=(2000, 16)).astype(
        np.float32)
    for (queries, corpus), rest_low in ((separated, True), (_clusters(rng, 2000, 40), False)):
        scans.clear()
        _, idx = E.retrieve(queries, corpus, k=5, similarity="dot", block=8, corpus_chunk=256)
        _assert_true_top_k(idx, queries, corpus, "dot")
        assert scans[0] == (8, True) and scans[1] == (32, rest_low)
    with pytest.raises(ValueError, match="scan_dtype"):
        E.retrieve(queries, corpus, scan_dtype="float16")


def test_retrieve_inside_jit_takes_the_float32_scan(monkeypatch):
    """Settling reads on the host which queries the bfloat16 scan proved, which a trace cannot:
    under ``jax.jit`` ``retrieve`` scans in float32, with the same neighbours."""
    import jax
    monkeypatch.setattr(R, "BRUTE_FORCE", 0)
    rng = np.random.default_rng(6)
    q, c = rng.normal(size=(20, 8)).astype(np.float32), rng.normal(size=(500, 8)).astype(np.float32)
    inside = jax.jit(lambda q, c: E.retrieve(q, c, k=3, scan_dtype="bfloat16")[1])(q, c)
    np.testing.assert_array_equal(inside, E.retrieve(q, c, k=3, scan_dtype="float32")[1])


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
