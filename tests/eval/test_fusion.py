"""Hybrid fusion: RRF and convex fusion by hand and against independent references, the
``fusion`` evaluator's rows and paired intervals, and the refusals."""

import warnings

import numpy as np
import pytest

from repr_jax.config import ConfigError
from repr_jax.eval import fusion as fu
from repr_jax.eval.stats import Estimate, paired_bootstrap


def R(name, ids, scores, queries=None):
    return fu.Ranking(name, np.asarray(ids), np.asarray(scores, np.float64), queries)


# ----------------------------------------------------------------------------- by hand

def test_rrf_by_hand_with_ties_and_missing_candidates():
    a = R("a", [[0, 1, 2]], [[3.0, 3.0, 1.0]])  # tied scores: ranks are the list's positions
    b = R("b", [[2, 0, -1]], [[9.0, 1.0, 0.0]])  # one slot empty
    c = R("c", [[3, -1, -1]], [[5.0, 0.0, 0.0]])  # one candidate only
    out = fu.rrf([a, b, c], k=60, top=4)
    want = {0: 1 / 61 + 1 / 62, 1: 1 / 62, 2: 1 / 63 + 1 / 61, 3: 1 / 61}
    # 0 and 2 tie (1/61 + 1/62 either way): the lower id first; 1 and 3 are single hits
    assert out.ids.tolist() == [[0, 2, 3, 1]]
    np.testing.assert_allclose(out.scores[0], [want[d] for d in (0, 2, 3, 1)], rtol=1e-12)
    assert out.name == "rrf(a+b+c)"
    # a width past the union pads with -1
    assert fu.rrf([b, c], top=4).ids.tolist() == [[2, 3, 0, -1]]


def _reference_rrf(lists, k):
    """RRF written from the paper: dicts, one query at a time, sorted (score down, id up)."""
    out = []
    for q in range(len(lists[0])):
        score = {}
        for ranking in lists:
            for rank, d in enumerate([d for d in ranking[q] if d >= 0], start=1):
                score[d] = score.get(d, 0.0) + 1.0 / (k + rank)
        out.append(sorted(score.items(), key=lambda t: (-t[1], t[0])))
    return out


def _random_rankings(rng, systems, q, n, depth):
    out = []
    for p in range(systems):
        ids = np.full((q, depth), -1)
        scores = np.zeros((q, depth))
        for i in range(q):
            m = rng.integers(0, depth + 1)  # some lists shorter, some empty
            ids[i, :m] = rng.choice(n, m, replace=False)
            scores[i, :m] = np.sort(rng.normal(size=m) * (p + 1) + 3 * p)[::-1]
        out.append(R(f"s{p}", ids, scores))
    return out


@pytest.mark.parametrize("systems", [2, 3])
def test_rrf_equals_an_independent_reference(systems):
    rng = np.random.default_rng(systems)
    rankings = _random_rankings(rng, systems, q=40, n=30, depth=8)
    out = fu.rrf(rankings, k=60, top=3 * 8)
    ref = _reference_rrf([r.ids.tolist() for r in rankings], 60)
    for i, want in enumerate(ref):
        got = [(d, s) for d, s in zip(out.ids[i], out.scores[i]) if d >= 0]
        assert [d for d, _ in got] == [d for d, _ in want], i
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-12)
        assert (out.ids[i, len(want):] == -1).all()


def test_convex_by_hand_minmax_and_zscore():
    a = R("a", [[0, 1, 2]], [[10.0, 6.0, 2.0]])  # min-max: 1, .5, 0
    b = R("b", [[3, 1, -1]], [[0.8, 0.2, 0.0]])  # min-max: 1, 0
    out = fu.convex([a, b], (0.25, 0.75), normalize="minmax", top=4)
    # 0: .25 * 1 + .75 * 0 (missing in b: its lowest, 0); 1: .25 * .5 + .75 * 0;
    # 2: 0 + 0; 3: .25 * 0 (missing in a) + .75 * 1
    assert out.ids.tolist() == [[3, 0, 1, 2]]
    np.testing.assert_allclose(out.scores[0], [0.75, 0.25, 0.125, 0.0])
    z = fu.convex([a, b], normalize="zscore")
    za = (np.asarray([10.0, 6.0, 2.0]) - 6.0) / np.std([10.0, 6.0, 2.0])  # +1.22, 0, -1.22
    zb = np.asarray([1.0, -1.0])  # two values: +-1
    want = {0: 0.5 * za[0] + 0.5 * zb[1], 1: 0.5 * za[1] + 0.5 * zb[1],
            2: 0.5 * za[2] + 0.5 * zb[1], 3: 0.5 * za[2] + 0.5 * zb[0]}
    order = sorted(want, key=lambda d: (-want[d], d))
    assert z.ids[0].tolist() == order[:3]
    np.testing.assert_allclose(z.scores[0], [want[d] for d in order[:3]])


def test_a_constant_score_list_divides_by_nothing_and_adds_nothing():
    a = R("a", [[0, 1, 2], [2, 1, 0]], [[3.0, 2.0, 1.0], [1.0, 1.0, 1.0]])
    flat = R("flat", [[2, 1, 0], [0, 1, -1]], [[5.0, 5.0, 5.0], [7.0, 7.0, 0.0]])
    single = R("single", [[1, -1, -1], [-1, -1, -1]], [[4.0, 0, 0], [0, 0, 0]])
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        for how in fu.NORMALIZATIONS:
            s, low = fu.normalize_scores(flat, how)
            assert (s == 0).all() and (low == 0).all()
            s, low = fu.normalize_scores(single, how)
            assert (s == 0).all() and (low == 0).all()
            out = fu.convex([a, flat, single], normalize=how)
            assert np.isfinite(out.scores).all()
            # only a's own order is left (its second list is flat too: ties to the lower id)
            assert out.ids.tolist() == [[0, 1, 2], [0, 1, 2]]


def _reference_convex(rankings, weights, how):
    """Convex fusion written out: per query dicts, missing = the list's lowest normalised."""
    out = []
    for q in range(len(rankings[0].ids)):
        norm = []
        for r in rankings:
            listed = {int(d): float(s) for d, s in zip(r.ids[q], r.scores[q]) if d >= 0}
            v = np.asarray(list(listed.values()))
            if how == "minmax":
                spread = v.max() - v.min() if len(v) else 0.0
                n = {d: (s - v.min()) / spread if spread > 0 else 0.0 for d, s in listed.items()}
            else:
                sd = v.std() if len(v) else 0.0
                n = {d: (s - v.mean()) / sd if sd > 0 else 0.0 for d, s in listed.items()}
            norm.append((n, min(n.values()) if n else 0.0))
        docs = set().union(*(n for n, _ in norm))
        score = {d: sum(w * n.get(d, low) for w, (n, low) in zip(weights, norm)) for d in docs}
        out.append(sorted(score.items(), key=lambda t: (-t[1], t[0])))
    return out


@pytest.mark.parametrize("how", fu.NORMALIZATIONS)
def test_convex_equals_an_independent_reference(how):
    rng = np.random.default_rng(7)
    rankings = _random_rankings(rng, 3, q=30, n=25, depth=6)
    weights = (0.2, 0.5, 0.3)
    out = fu.convex(rankings, weights, normalize=how, top=18)
    for i, want in enumerate(_reference_convex(rankings, weights, how)):
        got = [(d, s) for d, s in zip(out.ids[i], out.scores[i]) if d >= 0]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-12)
        assert [d for d, _ in got] == [d for d, _ in want], i


def test_fusing_a_system_with_itself_keeps_its_ranking():
    rng = np.random.default_rng(3)
    ids = np.stack([rng.permutation(50)[:10] for _ in range(20)])
    scores = -np.sort(-rng.normal(size=(20, 10)), axis=1)
    r = R("a", ids, scores)
    assert (fu.rrf([r, r]).ids == ids).all()
    assert (fu.rrf([r, r, r], k=1).ids == ids).all()
    for how in fu.NORMALIZATIONS:
        assert (fu.convex([r, r], normalize=how).ids == ids).all()
        assert (fu.convex([r, r], (3.0, 1.0), normalize=how).ids == ids).all()


# ----------------------------------------------------------------------------- refusals

def test_rankings_over_different_query_sets_are_refused_in_one_line():
    a = R("dense", [[0, 1], [1, 0]], [[1, 0], [1, 0]], queries=("q1", "q2"))
    b = R("bm25", [[0, 1], [1, 0]], [[1, 0], [1, 0]], queries=("q1", "q3"))
    c = R("sparse", [[0, 1]], [[1, 0]])
    for fuse in (fu.rrf, fu.convex):
        with pytest.raises(ValueError, match=r"^fusion of runs over different query sets: dense "
                                             r"and bm25 differ at 1 of 2 queries \(first at row "
                                             r"1: 'q2' vs 'q3'\)$"):
            fuse([a, b])
        with pytest.raises(ValueError, match=r"^fusion of runs over different query sets: "
                                             r"dense answers 2 queries, sparse 1$"):
            fuse([a, c])
    with pytest.raises(ValueError, match="^fusion needs two or three rankings; got 1$"):
        fu.rrf([a])
    with pytest.raises(ValueError, match=r"^convex: weights must be 2 non-negative"):
        fu.convex([a, a], (1.0, -1.0))


@pytest.mark.parametrize("options, message", [
    (dict(parts=("dense",)), r"^eval.fusion.parts: \('dense',\): give two or three different"),
    (dict(parts=("dense", "dense")), r"^eval.fusion.parts: .*two or three different"),
    (dict(parts=("dense", "colbert")), r"^eval.fusion.parts: .*dense, sparse, bm25$"),
    (dict(methods=("borda",)), r"^eval.fusion.methods: 'borda'; choose from rrf, convex$"),
    (dict(weights=(1.0,)), r"^eval.fusion.weights: \(1.0,\): one non-negative weight per part"),
    (dict(metrics=("ndcg@200",)), r"^eval.fusion.metrics: a cut-off of 200 is deeper than "
                                  r"eval.fusion.depth=100"),
])
def test_bad_options_are_refused_in_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as e:
        fu.FusionOptions(**options)
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- as an evaluator

WORDS = ["apple", "river", "stone", "cloud", "music", "garden", "engine", "paper", "window",
         "forest", "silver", "candle"]


def _text_set(exclude=None):
    """24 documents of two words each; query i names a word of its document i, so BM25 finds
    it, and the dense vectors are noisy copies of the documents'."""
    from repr_jax.data.eval_sets import RetrievalSet
    rng = np.random.default_rng(0)
    n, q = 24, 16
    docs = [f"{WORDS[i % 12]} {WORDS[(i * 5 + 1) % 12]}" for i in range(n)]
    queries = [WORDS[i % 12] for i in range(q)]
    c = rng.normal(size=(n, 8)).astype(np.float32)
    qv = (c[:q] + 0.9 * rng.normal(size=(q, 8))).astype(np.float32)
    qrels = np.zeros((q, n), np.int8)
    qrels[np.arange(q), np.arange(q)] = 1
    return RetrievalSet("set", qv, c, qrels, exclude=exclude, texts=(queries, docs))


def _embedder(s):
    from repr_jax.eval import Embedder
    x = np.zeros((4, 8), np.float32)
    splits = {k: {"x": x, "label": np.zeros(4, np.int64)} for k in ("train", "test")}
    return Embedder(lambda v, x: x, splits, eval_sets=[s])


def test_evaluator_rows_and_the_paired_interval_against_the_best_part():
    from repr_jax.eval import EVALUATORS, PROTOCOLS
    from repr_jax.eval.retrieval import retrieve, topk_metrics
    s = _text_set()
    emb = _embedder(s)
    assert "fusion" in EVALUATORS and "fusion" not in PROTOCOLS
    metrics = ("ndcg@10", "mrr@10")
    rows = dict(EVALUATORS["fusion"](emb, metrics=metrics, depth=20, bootstrap=0).run(None))
    assert set(rows) == {f"set/{name}/{m}" for name in ("dense", "bm25", "rrf", "rrf_gain",
                                                        "convex", "convex_gain")
                         for m in metrics}
    # each part misses what the other finds (noisy vectors; one-word queries): fusion wins
    for method in ("rrf", "convex"):
        assert rows[f"set/{method}/ndcg@10"] > max(rows["set/dense/ndcg@10"],
                                                   rows["set/bm25/ndcg@10"]) + 0.05
    # the dense part is the retrieval evaluator's ranking
    dense = topk_metrics(retrieve(s.queries, s.corpus, k=10)[1], s.qrels, (10,), per_query=True)
    assert rows["set/dense/ndcg@10"] == pytest.approx(float(np.mean(dense["ndcg@10"])))
    for method in ("rrf", "convex"):
        best = max(rows["set/dense/ndcg@10"], rows["set/bm25/ndcg@10"])
        assert rows[f"set/{method}_gain/ndcg@10"] == pytest.approx(
            rows[f"set/{method}/ndcg@10"] - best, abs=1e-6)
    # with intervals: each row an Estimate; the gain row is paired_bootstrap's over the queries
    ev = EVALUATORS["fusion"](emb, metrics=("ndcg@10",), depth=20, bootstrap=200)
    rows = dict(ev.run(None))
    for name in ("dense", "bm25", "rrf", "convex"):
        e = rows[f"set/{name}/ndcg@10"]
        assert isinstance(e, Estimate) and e.low <= float(e) <= e.high
    rankings = [fu._part_ranking(p, s.queries, s.corpus, s, 20, 0, "cosine")
                for p in ("dense", "bm25")]
    parts = [fu.ranking_metrics(r.ids, s.qrels, (10,))["ndcg@10"] for r in rankings]
    fused = fu.ranking_metrics(fu.rrf(rankings, top=20).ids, s.qrels, (10,))["ndcg@10"]
    test = paired_bootstrap(fused, max(parts, key=np.mean), num_resamples=200)
    gain = rows["set/rrf_gain/ndcg@10"]
    assert isinstance(gain, Estimate)
    assert (float(gain), gain.low, gain.high) == pytest.approx(
        (test["difference"], test["low"], test["high"]))
    assert gain.low <= float(gain) <= gain.high


def test_evaluator_leaves_out_a_query_that_is_its_own_document():
    from repr_jax.eval import EVALUATORS
    from repr_jax.eval.retrieval import without
    exclude = np.full(16, -1)
    exclude[:4] = np.arange(4) + 16  # queries 0-3 are documents 16-19
    s = _text_set(exclude)
    ev = EVALUATORS["fusion"](_embedder(s), metrics=("ndcg@10",), depth=12, bootstrap=0)
    full = fu._part_ranking("dense", s.queries, s.corpus, s, 12, 1, "cosine")
    r = fu.leave_out(full, exclude)
    assert not (r.ids == exclude[:, None]).any()
    # the first 12 are the retrieval evaluator's (without's); -1 ends a list that lost one
    assert (r.ids[:, :12] == without(full.ids, exclude)).all()
    lost = (full.ids == exclude[:, None]).any(1)
    assert lost[:4].any() and (r.ids[:, 12] == -1).tolist() == lost.tolist()
    rows = dict(ev.run(None))
    assert all(np.isfinite(v) for v in rows.values())


def test_a_sparse_part_needs_term_weights():
    from repr_jax.eval import EVALUATORS
    ev = EVALUATORS["fusion"](_embedder(_text_set()), parts=("sparse", "bm25"), bootstrap=0,
                              depth=10)
    with pytest.raises(ValueError, match="^fusion's sparse part: documents: term weights must "
                                         "be non-negative.*sparse encoder's term weights$"):
        list(ev.run(None))


def test_a_sparse_run_fused_with_bm25_and_the_sparse_part_as_its_own_evaluator():
    from repr_jax.data.eval_sets import RetrievalSet
    from repr_jax.eval import EVALUATORS
    from repr_jax.eval.retrieval import topk_metrics
    t = _text_set()
    s = RetrievalSet("set", np.abs(t.queries), np.abs(t.corpus), t.qrels, texts=t.texts)
    emb = _embedder(s)
    rows = dict(EVALUATORS["fusion"](emb, parts=("sparse", "bm25"), depth=20,
                                     weights=(0.4, 0.6), metrics=("ndcg@10",),
                                     bootstrap=0).run(None))
    sparse = dict(EVALUATORS["sparse_retrieval"](emb, metrics=("ndcg@10",), bootstrap=0)
                  .run(None))
    assert rows["set/sparse/ndcg@10"] == pytest.approx(sparse["set/ndcg@10"], abs=1e-9)
    # exact sparse search over non-negative weights ranks as a dense dot product does
    dots = np.abs(t.queries) @ np.abs(t.corpus).T
    dense = topk_metrics(np.argsort(-dots, axis=1, kind="stable")[:, :10], t.qrels, [10])
    assert sparse["set/ndcg@10"] == pytest.approx(dense["ndcg@10"], abs=1e-6)
    assert {f"set/{n}/ndcg@10" for n in ("sparse", "bm25", "rrf", "rrf_gain",
                                         "convex", "convex_gain")} == set(rows)


def test_dense_and_sparse_are_not_parts_of_one_fusion():
    from repr_jax.eval.fusion import FusionOptions
    with pytest.raises(ConfigError, match=r"^eval.fusion.parts: 'dense' and 'sparse' are both "
                                          r"the run's own search .*rrf:bm25\+DENSE_RUN"):
        FusionOptions(parts=("dense", "sparse", "bm25"))
