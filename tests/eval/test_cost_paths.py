"""Each evaluator takes the cheaper side of N and D: the dual ridge, Gram-form CKA, Sylvester's
coding rate, blockwise uniformity, streamed bootstrap indices, a tiled kNN bank, bincount
contingency and a vectorised expected mutual information. Each cheap path is checked against the
direct formula (float64 numpy, or the path it replaces) at a small size, and run at a size where
the old path would need D x D, N x N or R x N memory."""

import functools
import importlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import eval as E

lp = importlib.import_module("repr_jax.eval.linear_probe")
geometry = importlib.import_module("repr_jax.eval.geometry")
stats = importlib.import_module("repr_jax.eval.stats")
knn = importlib.import_module("repr_jax.eval.knn")

RNG = np.random.default_rng(0)


def _ridge_reference(x, y, lambdas):
    """(X^T X + s lambda I)^-1 X^T Y in float64, s = mean eigenvalue of X^T X = trace / D."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    d = x.shape[1]
    s = np.trace(x.T @ x) / d
    return np.stack([np.linalg.solve(x.T @ x + s * lam * np.eye(d), x.T @ y) for lam in lambdas])


@pytest.mark.parametrize("n, d", [(40, 300), (300, 40), (100, 2048)])
def test_ridge_weights_equal_the_float64_solution_on_either_side(n, d):
    x = RNG.normal(size=(n, d)).astype(np.float32)
    y = RNG.normal(size=(n, 3)).astype(np.float32)
    lambdas = np.asarray(lp.RIDGE_GRID, np.float32)
    got = np.asarray(lp.ridge_weights(jnp.asarray(x), jnp.asarray(y), jnp.asarray(lambdas)))
    want = _ridge_reference(x, y, lambdas)
    # Every penalty, the smallest (1e-6) too: where N < D the primal is off by up to 12x there.
    rel = np.abs(got - want).max(axis=(1, 2)) / np.abs(want).max(axis=(1, 2))
    assert rel.max() < 2e-3 if n >= d else rel.max() < 1e-4, rel


def test_dual_ridge_pads_rows_without_changing_the_solution():
    x = jnp.asarray(RNG.normal(size=(37, 500)), jnp.float32)
    y = jnp.asarray(RNG.normal(size=(37, 4)), jnp.float32)
    lam = jnp.asarray([1e-3, 1.0], jnp.float32)
    padded = lp._ridge_weights_dual(jnp.pad(x, ((0, 27), (0, 0))), jnp.pad(y, ((0, 27), (0, 0))),
                                    lam)
    chex.assert_trees_all_close(padded, lp._ridge_weights_dual(x, y, lam), rtol=1e-4, atol=1e-6)
    assert [lp._bucket(n) for n in (1, 8, 9, 250, 256, 257, 9000)] == [8, 8, 16, 256, 256, 320,
                                                                         9024]


def test_fewshot_at_large_width_is_the_dual_and_compiles_once_per_bucket():
    """D = 16,384 (a D x D Gram would be 1 GiB): few-shot ridge on <= 64 examples."""
    d, c = 16_384, 4
    means = RNG.normal(size=(c, d)).astype(np.float32)
    y = np.repeat(np.arange(c), 60)
    x = means[y] + 0.5 * RNG.normal(size=(len(y), d)).astype(np.float32)
    lp._ridge_weights_dual.clear_cache()
    out = E.fewshot(x[:200], y[:200], x[200:], y[200:], shots=(1, 2, 5, 8), seeds=2)
    assert out["5shot"] == 1.0 and out["1shot"] > 0.9
    if hasattr(lp._ridge_weights_dual, "_cache_size"):  # N = 4, 8, 20, 32: buckets 8 and 32
        assert lp._ridge_weights_dual._cache_size() == 2


def test_linear_cka_gram_form_equals_the_feature_form():
    n = 50
    x = RNG.normal(size=(n, 200)).astype(np.float32)
    y = (x[:, :30] @ RNG.normal(size=(30, 20)) + 0.3 * RNG.normal(size=(n, 20))).astype(np.float32)
    xc, yc = x - x.mean(0), y - y.mean(0)
    want = (np.linalg.norm(yc.T.astype(np.float64) @ xc) ** 2
            / (np.linalg.norm(xc.T.astype(np.float64) @ xc)
               * np.linalg.norm(yc.T.astype(np.float64) @ yc)))
    assert float(E.linear_cka(x, y)) == pytest.approx(want, rel=1e-4)  # D > N: the Gram form
    assert float(geometry._linear_cka_features(jnp.asarray(x), jnp.asarray(y))) == pytest.approx(
        want, rel=1e-4)
    chex.assert_trees_all_close(geometry.gram(x, block=7), jnp.asarray(x) @ jnp.asarray(x).T,
                                rtol=1e-5, atol=1e-3)


def test_coding_rate_by_sylvester_equals_the_direct_logdet():
    eps = 0.5
    for n, d in [(30, 200), (200, 30)]:
        z = RNG.normal(size=(n, d)).astype(np.float32) / np.sqrt(d)
        want = 0.5 * np.linalg.slogdet(np.eye(d) + d / (n * eps ** 2)
                                       * z.T.astype(np.float64) @ z)[1]
        assert float(E.coding_rate(z, eps)) == pytest.approx(want, rel=1e-4)


def test_blockwise_uniformity_equals_the_exact_one(monkeypatch):
    z = RNG.normal(size=(203, 8)).astype(np.float32)
    exact = float(E.uniformity(z))
    monkeypatch.setattr(geometry, "UNIFORMITY_BLOCK", 16)  # 203 > 4 * 16: blocks, padded rows
    assert float(E.uniformity(z)) == pytest.approx(exact, rel=1e-5)


def test_streamed_bootstrap_draws_chunks_and_keeps_the_interval(monkeypatch):
    x = jnp.asarray((RNG.random(5000) < 0.3).astype(np.float32))
    at_once = E.bootstrap_ci(x, num_resamples=400)
    monkeypatch.setattr(stats, "STREAM_ABOVE", 5000 * 7)  # 7 resamples per chunk, 58 chunks
    streamed = E.bootstrap_ci(x, num_resamples=400)
    assert float(streamed) == float(at_once)
    width = at_once.high - at_once.low
    assert abs((streamed.high - streamed.low) - width) < 0.25 * width
    assert streamed.low < float(x.mean()) < streamed.high
    again = E.bootstrap_ci(x, num_resamples=400)
    assert (again.low, again.high) == (streamed.low, streamed.high)  # a pure function of the seed


def test_knn_through_the_tiled_search_gives_the_same_predictions(monkeypatch):
    train = RNG.normal(size=(700, 16)).astype(np.float32)
    ytr = RNG.integers(0, 5, 700)
    test = RNG.normal(size=(90, 16)).astype(np.float32)
    yte = RNG.integers(0, 5, 90)
    for similarity in ("cosine", "dot", "l2"):
        whole = E.knn_classifier(train, ytr, test, yte, k=7, similarity=similarity,
                                 per_example=True)
        monkeypatch.setattr(knn, "TILE", 100)  # every chunk too big: through retrieve
        tiled = E.knn_classifier(train, ytr, test, yte, k=7, similarity=similarity,
                                 per_example=True)
        monkeypatch.undo()
        np.testing.assert_array_equal(np.asarray(tiled["correct"]), np.asarray(whole["correct"]))


def test_clustering_scores_equal_sklearn_with_many_clusters():
    from sklearn import metrics
    t = RNG.integers(0, 300, 20_000)
    p = (t * 7 + RNG.integers(0, 20, 20_000)) % 250
    assert E.ami(t, p) == pytest.approx(metrics.adjusted_mutual_info_score(t, p), abs=1e-9)
    assert E.nmi(t, p) == pytest.approx(metrics.normalized_mutual_info_score(t, p), abs=1e-9)
    np.testing.assert_array_equal(
        E.clustering.contingency([2, 2, 5, 9], [1, 0, 0, 0]), [[1, 1], [1, 0], [1, 0]])


def test_count_sketch_keeps_norms_and_names_the_reduced_raw_row():
    from repr_jax import data
    from repr_jax.train.evaluation import RAW, count_sketch, raw_reference
    x = RNG.normal(size=(20, 30_000)).astype(np.float32)
    sketch = count_sketch(30_000, 4096)
    z = np.asarray(jax.jit(sketch)(None, jnp.asarray(x)))
    assert z.shape == (20, 4096)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1) / np.linalg.norm(x, axis=1), 1.0,
                               atol=0.1)
    np.testing.assert_array_equal(z, np.asarray(count_sketch(30_000, 4096)(None, jnp.asarray(x))))
    digits = data.load("digits")  # 8 x 8: 64 dimensions
    assert raw_reference(digits, 4096)[0] == RAW
    assert raw_reference(digits, 32)[0] == "raw inputs (random projection to 32)"
    assert raw_reference(digits, 0)[0] == RAW


def test_budget_follows_the_stated_orders():
    from repr_jax.eval import budget

    def flops(name, n, d, **options):
        return budget.estimate(name, budget.Shape(n_train=n, n_test=1000, dim=d), options)[0]
    # Ridge: N D min(N, D); linear in D once D > N (the dual), cubic in D below N.
    assert flops("linear_probe", 100, 16_384) / flops("linear_probe", 100, 8192) < 2.1
    assert flops("linear_probe", 100_000, 1024) / flops("linear_probe", 100_000, 512) > 3.5
    assert flops("knn", 20_000, 64) == pytest.approx(2 * flops("knn", 10_000, 64), rel=1e-3)
    mem = budget.estimate("linear_probe", budget.Shape(100, 1000, 150_528), {})[1]
    assert mem < 4 * (3 * 100 * 150_528 + 100 ** 2 + 19 * 150_528 * 10)  # never D x D
    with pytest.raises(ValueError, match="no cost model"):
        flops("nope", 10, 10)


@pytest.mark.parametrize("n", [512, 4096])
def test_logistic_probe_preconditioned_by_a_bfloat16_gram_reaches_the_same_solution(n, monkeypatch):
    """From ``FAST_GRAM_FLOPS`` up the probe's preconditioner comes from a bfloat16 Gram matrix
    where the backend has fast bfloat16 dots: the same minimum (the solve is float32, only its
    conditioning moves) as with the float32 Gram's, at a small and a large size."""
    d, c, lam = 256, 4, 1e-3
    y = np.arange(n) % c
    x = (RNG.normal(size=(c, d))[y] * 0.5 + RNG.normal(size=(n, d))).astype(np.float32)
    x = jnp.asarray((x - x.mean(0)) / x.std(0))
    solve = functools.partial(lp.logistic_weights, x, jax.nn.one_hot(y, c), jnp.asarray([lam]),
                              max_iters=500, tol=1e-5)
    monkeypatch.setattr(lp.precision, "bfloat16_is_fast", lambda: True)
    monkeypatch.setattr(lp, "FAST_GRAM_FLOPS", 0)
    fast = solve()
    monkeypatch.setattr(lp, "FAST_GRAM_FLOPS", 2 ** 62)
    exact = solve()

    def objective(w, b):  # in float64: mean cross-entropy + lam / 2 ||W||^2
        logits = np.asarray(x, np.float64) @ np.asarray(w[0], np.float64) + np.asarray(b[0])
        lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
        return (lse - logits[np.arange(n), y]).mean() + lam / 2 * np.sum(np.asarray(w[0]) ** 2)
    assert objective(*fast) == pytest.approx(objective(*exact), rel=1e-4)
    scale = float(jnp.abs(exact[0]).max())
    np.testing.assert_allclose(fast[0], exact[0], atol=1e-2 * scale)


def test_logistic_probe_wider_than_tall_solves_in_the_row_space():
    """N < D: the penalised optimum lies in the row space, so the N-dim solve is the same model;
    checked against sklearn's LogisticRegression on the same objective (C = 1 / (l2 N))."""
    from sklearn.linear_model import LogisticRegression
    n, d, l2 = 60, 400, 1e-2
    y = np.arange(n) % 3
    x = (RNG.normal(size=(3, d))[y] + RNG.normal(size=(n, d))).astype(np.float32)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    w, b = lp.logistic_weights(jnp.asarray(x), jax.nn.one_hot(y, 3), jnp.asarray([l2]),
                                max_iters=500, tol=1e-6)
    ref = LogisticRegression(C=1 / (l2 * n), tol=1e-10, max_iter=10_000).fit(x, y)
    # both solvers stop at their own tolerance, not at one exact point
    np.testing.assert_allclose(np.asarray(w[0]).T - np.asarray(w[0]).T.mean(0),
                               ref.coef_ - ref.coef_.mean(0), atol=3e-4)


def test_effective_rank_through_a_qr_equals_the_svd(monkeypatch):
    """Low rank on purpose: the QR route keeps the small singular values (a Gram matrix's
    eigenvalues would not), and it holds no N x N workspace for a long side."""
    z = (RNG.normal(size=(300, 40)) @ RNG.normal(size=(40, 120))).astype(np.float32)
    by_svd = float(E.effective_rank(z))
    monkeypatch.setattr(geometry, "QR_ABOVE", 10)
    assert float(E.effective_rank(z)) == pytest.approx(by_svd, rel=1e-4)
    assert float(E.effective_rank(z.T)) == pytest.approx(by_svd, rel=1e-4)
    monkeypatch.undo()
    tall = RNG.normal(size=(100_000, 16)).astype(np.float32)  # an SVD would want 40 GB
    assert 15.5 < float(E.effective_rank(tall)) <= 16
    assert abs(float(E.anisotropy(tall))) < 1e-3  # N (N - 1) = 1e10 passed int32 before
