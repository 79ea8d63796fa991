"""Sparse search through the inverted index equals scoring every document densely (the same ids
and scores, ties included), touches exactly the postings of the query's terms, and FLOPS is the
SPLADE paper's sum; a saved index comes back equal, and a tampered file is refused by name."""

import numpy as np
import pytest
import scipy.sparse

from repr_jax.eval import sparse_retrieval as sr


def random_weights(rng, rows, vocab, nnz, *, dyadic, zipf=True):
    """``[rows, vocab]`` CSR with about ``nnz`` non-zeros a row, term ids skewed as in text
    (Zipf, so some postings are long); ``dyadic``: weights ``j / 8``, ``j`` in 1..16, whose
    float32 sums are exact in any order (so many scores tie)."""
    p = 1.0 / np.arange(1, vocab + 1) ** 0.8 if zipf else np.ones(vocab)
    terms = np.sort(rng.choice(vocab, size=(rows, nnz), p=p / p.sum()), axis=1)
    keep = np.ones(terms.shape, bool)
    keep[:, 1:] = terms[:, 1:] != terms[:, :-1]  # each term once a row
    indices = terms[keep]
    indptr = np.concatenate([[0], np.cumsum(keep.sum(1))])
    data = (rng.integers(1, 17, len(indices)) / 8 if dyadic
            else rng.uniform(0.01, 3.0, len(indices))).astype(np.float32)
    return scipy.sparse.csr_matrix((data, indices, indptr), shape=(rows, vocab))


def dense_scores(queries, docs, chunk=2000):
    """``[Q, N]`` float64 scores of every document, computed document by document from the
    forward (row) representation, never through posting lists."""
    q_dense = queries.toarray().astype(np.float64)
    out = np.zeros((queries.shape[0], docs.shape[0]))
    for s in range(0, docs.shape[0], chunk):
        block = docs[s:s + chunk]
        contrib = q_dense[:, block.indices] * block.data.astype(np.float64)
        starts = block.indptr[:-1]
        sums = np.add.reduceat(np.pad(contrib, ((0, 0), (0, 1))), np.minimum(starts, block.nnz),
                               axis=1)
        sums[:, np.diff(block.indptr) == 0] = 0  # reduceat reads one element for an empty row
        out[:, s:s + chunk] = sums
    return out


def brute_topk(scores_QxN, k):
    """Every document ranked by (-score, id): the first ``min(k, N)``."""
    order = np.lexsort((np.broadcast_to(np.arange(scores_QxN.shape[1]), scores_QxN.shape),
                        -scores_QxN), axis=-1)[:, :k]
    return order, np.take_along_axis(scores_QxN, order, axis=1)


@pytest.mark.parametrize("n, vocab, doc_nnz, q_nnz, num_q, k", [
    (200, 1000, 30, 8, 60, 10),
    (20_000, 30_522, 100, 20, 40, 100),
])
def test_search_equals_dense_brute_force_with_ties(n, vocab, doc_nnz, q_nnz, num_q, k):
    rng = np.random.default_rng(n)
    docs = random_weights(rng, n, vocab, doc_nnz, dyadic=True)
    queries = random_weights(rng, num_q, vocab, q_nnz, dyadic=True)
    queries = scipy.sparse.vstack([  # a query with no terms; one whose only term no doc has
        queries, scipy.sparse.csr_matrix((1, vocab), dtype=np.float32),
        scipy.sparse.csr_matrix((np.float32([1.0]), ([0], [vocab - 1])), shape=(1, vocab))]).tocsr()
    docs.data[docs.indices == vocab - 1] = 0  # no document has the last term
    docs.eliminate_zeros()
    index = sr.build_index(docs)
    out = sr.search(index, queries, k, block=16)
    want_ids, want_scores = brute_topk(dense_scores(queries, docs), k)
    np.testing.assert_array_equal(out.scores, want_scores.astype(np.float32))
    np.testing.assert_array_equal(out.ids, want_ids)
    assert len(np.unique(out.scores[:-2])) < out.scores[:-2].size  # ties were exercised
    np.testing.assert_array_equal(out.ids[-2:], np.tile(np.arange(k), (2, 1)))
    assert (out.scores[-2:] == 0).all() and (out.touched[-2:] == 0).all()


def test_search_float_weights_and_k_past_n():
    rng = np.random.default_rng(1)
    docs = random_weights(rng, 50, 300, 10, dyadic=False)
    queries = random_weights(rng, 30, 300, 5, dyadic=False)
    index = sr.build_index(docs.toarray())  # dense input, chunked
    for k in (7, 50, 80):
        out = sr.search(index, queries, k)
        want_ids, want_scores = brute_topk(dense_scores(queries, docs), k)
        assert out.ids.shape == (30, min(k, 50))
        np.testing.assert_allclose(out.scores, want_scores, rtol=1e-6)
        np.testing.assert_array_equal(out.ids, want_ids)
        # scored documents come before every unscored one
        scored = (dense_scores(queries, docs) > 0).sum(1)
        for r in range(30):
            assert (out.scores[r, :min(scored[r], k)] > 0).all()
            assert (out.scores[r, scored[r]:] == 0).all()


def test_inputs_in_three_forms_give_one_index():
    rng = np.random.default_rng(2)
    docs = random_weights(rng, 40, 100, 6, dyadic=True)
    pairs = [(docs[i].indices, docs[i].data) for i in range(40)]
    a, b, c = (sr.build_index(docs), sr.build_index(docs.toarray(), chunk=7),
               sr.build_index(pairs, vocab=100))
    for other in (b, c):
        for name in ("offsets", "doc_ids", "weights"):
            np.testing.assert_array_equal(getattr(a, name), getattr(other, name))
    assert a.doc_ids.dtype == np.int32 and a.weights.dtype == np.float32
    # zero weights are dropped: postings hold only non-zeros
    with_zero = [(np.asarray([3, 5]), np.asarray([0.0, 1.0]))]
    assert sr.build_index(with_zero, vocab=10).nnz == 1


@pytest.mark.parametrize("bad, match", [
    ([(np.asarray([1]), np.asarray([-1.0]))], "non-negative"),
    ([(np.asarray([1]), np.asarray([np.nan]))], "finite"),
    ([(np.asarray([2, 2]), np.asarray([1.0, 1.0]))], "row 0 lists term 2 twice"),
    ([(np.asarray([12]), np.asarray([1.0]))], r"\[0, 10\)"),
])
def test_bad_weights_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        sr.build_index(bad, vocab=10)


@pytest.mark.parametrize("n, vocab, doc_nnz", [(200, 1000, 30), (20_000, 30_522, 100)])
def test_cost_is_the_postings_of_the_query_terms(n, vocab, doc_nnz):
    rng = np.random.default_rng(3)
    docs = random_weights(rng, n, vocab, doc_nnz, dyadic=False)
    queries = random_weights(rng, 25, vocab, 20, dyadic=False)
    index = sr.build_index(docs)
    out = sr.search(index, queries, 10)
    lengths = index.posting_lengths()
    by_term = [lengths[queries[i].indices].sum() for i in range(25)]
    np.testing.assert_array_equal(out.touched, by_term)
    # counted independently: (query, document, term) triples with both weights non-zero, the
    # multiply-adds of a dense score restricted to non-zeros
    q01, d01 = (queries > 0).astype(np.int64), (docs > 0).astype(np.int64)
    np.testing.assert_array_equal(out.touched, np.asarray((q01 @ d01.T).sum(1)).ravel())
    assert out.touched.sum() < 25 * index.nnz  # a fraction of the index is read
    # FLOPS over the same queries and documents is the postings touched per query and document
    assert sr.flops(queries, index) == pytest.approx(out.touched.sum() / (25 * n), rel=1e-12)


def test_flops_by_hand():
    # 3 queries, 4 terms: p_q = [2/3, 1/3, 0, 1/3]; 2 documents: p_d = [1/2, 1, 1/2, 0]
    q = np.asarray([[1, 0, 0, 2], [3, 1, 0, 0], [0, 0, 0, 0]], np.float32)
    d = np.asarray([[0.5, 1, 0, 0], [0, 2, 4, 0]], np.float32)
    want = 2 / 3 * 1 / 2 + 1 / 3 * 1 + 0 * 1 / 2 + 1 / 3 * 0
    assert sr.flops(q, d) == pytest.approx(want)
    assert sr.flops(q, sr.build_index(d)) == pytest.approx(want)
    s = sr.stats(sr.build_index(d), q)
    assert s["query_nnz"] == pytest.approx(4 / 3) and s["doc_nnz"] == 2.0
    # 4 postings of int32 id + float32 weight, 5 int32 offsets, over 2 documents
    assert s["bytes_per_doc"] == (4 * 8 + 5 * 4) / 2
    assert s["flops"] == pytest.approx(want)


def test_save_load_round_trip_and_tampered_files_refused(tmp_path):
    rng = np.random.default_rng(4)
    docs = random_weights(rng, 100, 500, 20, dyadic=False)
    queries = random_weights(rng, 10, 500, 5, dyadic=False)
    index = sr.build_index(docs)
    sr.save_index(index, tmp_path / "idx")
    back = sr.load_index(tmp_path / "idx")
    assert back.num_docs == 100
    for name in ("offsets", "doc_ids", "weights"):
        np.testing.assert_array_equal(getattr(back, name), getattr(index, name))
    a, b = sr.search(index, queries, 5), sr.search(back, queries, 5)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)

    weights = tmp_path / "idx" / sr.WEIGHTS
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=f"^{weights}: .*not used") as e:
        sr.load_index(tmp_path / "idx")
    assert "\n" not in str(e.value)

    sr.save_index(index, tmp_path / "idx")
    ids = tmp_path / "idx" / sr.DOC_IDS
    ids.write_bytes(ids.read_bytes()[:-8])  # truncated
    with pytest.raises(ValueError, match=f"^{ids}: .*not used"):
        sr.load_index(tmp_path / "idx")

    sr.save_index(index, tmp_path / "idx")
    (tmp_path / "idx" / (sr.OFFSETS + ".blake2b")).unlink()
    with pytest.raises(ValueError, match=f"^{tmp_path / 'idx' / sr.OFFSETS}: no recorded digest"):
        sr.load_index(tmp_path / "idx")
    (tmp_path / "idx" / sr.META).unlink()
    with pytest.raises(ValueError, match=f"^{tmp_path / 'idx' / sr.META}: missing"):
        sr.load_index(tmp_path / "idx")


def test_k_below_one_and_wrong_vocab_refused():
    index = sr.build_index(np.eye(3, 5, dtype=np.float32))
    with pytest.raises(ValueError, match="k >= 1"):
        sr.search(index, np.ones((1, 5), np.float32), 0)
    with pytest.raises(ValueError, match="4 terms, but the index has 5"):
        sr.search(index, np.ones((1, 4), np.float32), 1)


# ----------------------------------------------------------------------------- as an evaluator

def _embedder(queries, corpus, qrels):
    from repr_jax.data.eval_sets import RetrievalSet
    from repr_jax.eval import Embedder
    x = np.abs(np.random.default_rng(0).normal(size=(20, corpus.shape[1]))).astype(np.float32)
    splits = {s: {"x": x, "label": np.zeros(20, np.int64)} for s in ("train", "test")}
    return Embedder(lambda v, x: x, splits,
                    eval_sets=[RetrievalSet("set", queries, corpus, qrels)])


def test_evaluator_ranks_as_the_dense_dot_product_retrieval():
    from repr_jax.eval import EVALUATORS
    rng = np.random.default_rng(5)
    corpus = random_weights(rng, 300, 200, 12, dyadic=True).toarray()
    relevant = rng.integers(0, 300, 80)  # each query: three terms of its relevant document
    keep = np.zeros_like(corpus, bool)
    for i, d in enumerate(relevant):
        keep[d, rng.choice(np.flatnonzero(corpus[d]), 3, replace=False)] = True
    queries = np.stack([np.where(keep[d], corpus[d], 0) for d in relevant])
    qrels = np.zeros((80, 300), np.int8)
    qrels[np.arange(80), relevant] = 1
    emb = _embedder(queries, corpus, qrels)
    metrics = ("recall@1", "recall@10", "mrr@10", "ndcg@10")
    dense = dict(EVALUATORS["retrieval"](emb, metrics=metrics, similarity="dot",
                                         bootstrap=0).run(None))
    sparse = dict(sr.SparseRetrieval(emb, metrics=metrics, bootstrap=0).run(None))
    for m in metrics:
        assert sparse[f"set/{m}"] == pytest.approx(float(dense[f"set/{m}"]), abs=1e-12), m
    assert sparse["set/flops"] == pytest.approx(sr.flops(queries, corpus))
    assert sparse["set/query_nnz"] == pytest.approx((queries > 0).sum(1).mean())
    assert sparse["set/doc_nnz"] == pytest.approx((corpus > 0).sum(1).mean())
    with_ci = dict(sr.SparseRetrieval(emb, metrics=("recall@10",), bootstrap=200).run(None))
    r10 = with_ci["set/recall@10"]
    assert r10.low <= float(sparse["set/recall@10"]) <= r10.high
    assert 0.3 < sparse["set/recall@1"] < 1  # a task neither trivial nor hopeless


def test_evaluator_refuses_a_dense_encoders_features():
    rng = np.random.default_rng(6)
    emb = _embedder(rng.normal(size=(10, 30)).astype(np.float32),
                    rng.normal(size=(40, 30)).astype(np.float32), np.eye(10, 40, dtype=np.int8))
    with pytest.raises(ValueError, match="^sparse_retrieval on set/: documents: term weights "
                                         "must be non-negative.*sparse encoder"):
        list(sr.SparseRetrieval(emb, bootstrap=0).run(None))
