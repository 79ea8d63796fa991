"""Every metric against its named reference on random inputs (scikit-learn, scipy, and numpy
transcriptions of the papers' code); references are imported here only, never at run time."""

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics as skm

from repr_jax import eval as E
from repr_jax.eval.stats import Estimate

RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------------ linear probe

def test_logistic_probe_within_one_point_of_sklearn():
    """Same standardised features, same objective (sklearn's C = 1 / (l2 * N)): accuracy within 1
    point on sklearn's digits (tolerance from the issue)."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    from repr_jax.eval.linear_probe import standardize
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(y))
    tr, te = perm[:1200], perm[1200:]
    xs_tr, xs_te = (np.asarray(a) for a in standardize(x[tr], x[te]))
    for l2 in (1e-4, 1e-2):
        ours = E.linear_probe(x[tr], y[tr], x[te], y[te], kind="logistic", l2=l2)["accuracy"]
        ref = LogisticRegression(C=1 / (l2 * len(tr)), max_iter=5000).fit(xs_tr, y[tr]).score(
            xs_te, y[te])
        assert abs(ours - ref) <= 0.01, (l2, ours, ref)


def test_logistic_solver_reaches_sklearns_optimum_and_the_warm_started_path_equals_single_solves():
    """The whitened, warm-started solver minimises ``mean CE + l2/2 ||W||^2`` in the original
    coordinates: its objective is no worse than at sklearn's (tight-tolerance) optimum, and solving a
    grid of penalties in one call equals solving each alone."""
    import jax
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    from repr_jax.eval.linear_probe import logistic_weights, standardize
    x, y = load_digits(return_X_y=True)
    xs = np.asarray(standardize(x[:1000].astype(np.float32))[0])
    onehot = np.eye(10)[y[:1000]]

    def objective(w, b, l2):
        logits = xs.astype(np.float64) @ w + b
        logz = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
        return np.mean(logz - logits[np.arange(1000), y[:1000]]) + 0.5 * l2 * np.sum(w ** 2)

    grid = np.float32([1e-4, 1e-1, 1e-2])  # not sorted: the path sorts, results come back in order
    w_grid, b_grid = logistic_weights(xs, onehot, grid, max_iters=2000, tol=1e-6)
    for i, l2 in enumerate(grid):
        ref = LogisticRegression(C=1 / (l2 * 1000), tol=1e-10, max_iter=20000).fit(xs, y[:1000])
        ours = objective(np.asarray(w_grid[i], np.float64), np.asarray(b_grid[i], np.float64), l2)
        theirs = objective(ref.coef_.T, ref.intercept_, l2)
        assert ours <= theirs * (1 + 1e-4), (l2, ours, theirs)
        w1, b1 = logistic_weights(xs, onehot, grid[i:i + 1], max_iters=2000, tol=1e-6)
        alone = objective(np.asarray(w1[0], np.float64), np.asarray(b1[0], np.float64), l2)
        assert alone == pytest.approx(ours, rel=1e-4)
    assert jax.tree.leaves(w_grid)[0].shape == (3, 64, 10)


def test_logistic_probe_chooses_penalty_on_validation_and_returns_per_example():
    x, y = RNG.normal(size=(300, 6)).astype(np.float32), RNG.integers(0, 3, 300)
    out = E.linear_probe(x[:200], y[:200], x[200:], y[200:], kind="logistic", per_example=True)
    from repr_jax.eval.linear_probe import LOGISTIC_GRID
    assert min(abs(out["l2"] - g) / g for g in LOGISTIC_GRID) < 1e-5
    assert out["correct"].shape == (100,)
    assert out["accuracy"] == pytest.approx(float(out["correct"].mean()))


def test_knn_similarity_options_match_brute_force():
    x, tx = RNG.normal(size=(80, 4)), RNG.normal(size=(30, 4))
    y, ty = RNG.integers(0, 3, 80), RNG.integers(0, 3, 30)
    for similarity, score in (("dot", lambda a, b: a @ b.T),
                              ("l2", lambda a, b: -((a[:, None] - b[None]) ** 2).sum(-1))):
        sim = score(tx, x)
        preds = []
        for row in sim:
            top = np.argsort(-row, kind="stable")[:5]
            votes = np.zeros(3)
            np.add.at(votes, y[top], np.exp(row[top] / 1.0))
            preds.append(votes.argmax())
        got = E.knn_classifier(x, y, tx, ty, k=5, temperature=1.0, similarity=similarity)
        assert got["accuracy"] == pytest.approx(np.mean(np.array(preds) == ty)), similarity


def test_fewshot_reports_mean_and_spread_per_shot():
    centers = RNG.normal(size=(4, 8)) * 3
    y, ty = RNG.integers(0, 4, 400), RNG.integers(0, 4, 200)
    x = centers[y] + RNG.normal(size=(400, 8))
    tx = centers[ty] + RNG.normal(size=(200, 8))
    out = E.fewshot(x, y, tx, ty, shots=(1, 10), seeds=4)
    assert set(out) == {"1shot", "1shot_std", "10shot", "10shot_std"}
    assert out["10shot"] > out["1shot"] - 0.02 and out["10shot"] > 0.8
    assert out["1shot_std"] > 0  # different draws differ


# ------------------------------------------------------------------------------------------- STS

@pytest.mark.parametrize("similarity", ["cosine", "dot", "l2"])
def test_sts_correlation_equals_scipy(similarity):
    a, b = RNG.normal(size=(200, 16)), RNG.normal(size=(200, 16))
    gold = np.round(RNG.uniform(0, 5, 200), 1)  # rounded: ties, as in human ratings
    out = E.sts_correlation(a, b, gold, similarity=similarity)
    if similarity == "cosine":
        sim = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    elif similarity == "dot":
        sim = (a * b).sum(1)
    else:
        sim = -np.linalg.norm(a - b, axis=1)
    assert out["spearman"] == pytest.approx(scipy.stats.spearmanr(sim, gold).statistic, abs=1e-5)
    assert out["pearson"] == pytest.approx(scipy.stats.pearsonr(sim, gold).statistic, abs=1e-5)


def test_rankdata_averages_ties_like_scipy():
    from repr_jax.eval.sts import rankdata
    x = RNG.integers(0, 10, 300).astype(np.float32)
    np.testing.assert_allclose(rankdata(x), scipy.stats.rankdata(x), rtol=0, atol=1e-4)


# ------------------------------------------------------------------------------------ clustering

@pytest.mark.parametrize("n,kt,kp", [(500, 5, 7), (1000, 10, 10), (60, 3, 1), (2000, 2, 30)])
def test_nmi_ami_v_measure_equal_sklearn(n, kt, kp):
    t, p = RNG.integers(0, kt, n), RNG.integers(0, kp, n)
    p[: n // 3] = t[: n // 3] % kp  # partly informative
    assert E.nmi(t, p) == pytest.approx(skm.normalized_mutual_info_score(t, p), abs=1e-6)
    assert E.ami(t, p) == pytest.approx(skm.adjusted_mutual_info_score(t, p), abs=1e-6)
    assert E.v_measure(t, p) == pytest.approx(skm.v_measure_score(t, p), abs=1e-6)


def test_clustering_scores_of_identical_and_relabelled_labelings():
    t = RNG.integers(0, 6, 300)
    perm = RNG.permutation(6)
    for fn in (E.nmi, E.ami, E.v_measure):
        assert fn(t, perm[t]) == pytest.approx(1.0, abs=1e-9)  # invariant to renaming clusters


def test_kmeans_recovers_separated_clusters_and_matches_sklearn_inertia():
    from sklearn.cluster import KMeans
    centers = RNG.normal(size=(5, 6)) * 10
    y = RNG.integers(0, 5, 500)
    x = (centers[y] + RNG.normal(size=(500, 6))).astype(np.float32)
    out = E.kmeans(x, 5, seed=0)
    assert E.ami(y, out["labels"]) == pytest.approx(1.0, abs=1e-9)
    ref = KMeans(5, n_init=3, random_state=0).fit(x).inertia_
    assert float(out["inertia"]) == pytest.approx(ref, rel=1e-3)
    with pytest.raises(ValueError, match="0 < k <= N"):
        E.kmeans(x[:3], 5)


# -------------------------------------------------------------------------------------- geometry

def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_alignment_and_uniformity_equal_wang_isola_reference():
    """Wang & Isola's code: (x - y).norm(dim=1).pow(alpha).mean() and
    torch.pdist(x).pow(2).mul(-t).exp().mean().log(), on normalised features."""
    x, y = _unit(RNG.normal(size=(300, 8))), _unit(RNG.normal(size=(300, 8)))
    align = (np.linalg.norm(x - y, axis=1) ** 2).mean()
    iu = np.triu_indices(300, k=1)
    pd2 = ((x[:, None] - x[None]) ** 2).sum(-1)[iu]
    unif = np.log(np.exp(-2 * pd2).mean())
    assert float(E.alignment(x, y)) == pytest.approx(align, rel=1e-5)
    assert float(E.uniformity(x)) == pytest.approx(unif, rel=1e-4)
    assert float(E.alignment(x, x)) == pytest.approx(0.0, abs=1e-6)


def test_effective_rank_equals_rankme_and_counts_dimensions():
    z = RNG.normal(size=(500, 32))
    s = np.linalg.svd(z, compute_uv=False)
    p = s / s.sum() + 1e-7
    assert float(E.effective_rank(z)) == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-4)
    low = RNG.normal(size=(500, 3)) @ RNG.normal(size=(3, 32))  # rank 3
    assert 1.0 <= float(E.effective_rank(low)) <= 3.0 + 1e-3
    equal = np.eye(8)  # 8 equal singular values
    assert float(E.effective_rank(equal)) == pytest.approx(8.0, rel=1e-5)


def test_anisotropy_is_mean_cosine_of_distinct_pairs():
    z = RNG.normal(size=(120, 10)) + 0.5
    u = _unit(z)
    cos = u @ u.T
    expect = cos[~np.eye(120, dtype=bool)].mean()
    assert float(E.anisotropy(z)) == pytest.approx(expect, rel=1e-4)
    assert float(E.anisotropy(np.ones((10, 4)))) == pytest.approx(1.0, abs=1e-5)


def test_linear_cka_equals_kornblith_and_its_invariances():
    """Kornblith et al. 2019 (their colab's feature-space form): centred X, Y;
    ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F); equals the HSIC form with linear kernels."""
    x, y = RNG.normal(size=(100, 12)), RNG.normal(size=(100, 7))
    xc, yc = x - x.mean(0), y - y.mean(0)
    gram_x, gram_y = xc @ xc.T, yc @ yc.T
    hsic = lambda a, b: (a * b).sum()  # noqa: E731 - centred grams
    expect = hsic(gram_x, gram_y) / np.sqrt(hsic(gram_x, gram_x) * hsic(gram_y, gram_y))
    assert float(E.linear_cka(x, y)) == pytest.approx(expect, rel=1e-4)
    q, _ = np.linalg.qr(RNG.normal(size=(12, 12)))
    assert float(E.linear_cka(x, 3.0 * x @ q + 1.0)) == pytest.approx(1.0, abs=1e-5)


def test_coding_rate_equals_mcr2_formula():
    z = _unit(RNG.normal(size=(200, 16)))
    eps = 0.5
    expect = 0.5 * np.linalg.slogdet(np.eye(16) + 16 / (200 * eps ** 2) * z.T @ z)[1]
    assert float(E.coding_rate(z, eps)) == pytest.approx(expect, rel=1e-4)


def test_feature_std_detects_collapse():
    assert float(E.feature_std(np.ones((50, 8)))) == pytest.approx(0.0, abs=1e-6)
    assert float(E.feature_std(RNG.normal(size=(5000, 16)))) == pytest.approx(0.25, abs=0.01)


# ----------------------------------------------------------------------------------------- stats

def test_bootstrap_ci_agrees_with_scipy_percentile_bootstrap():
    x = RNG.normal(size=2000)
    ours = E.bootstrap_ci(x, num_resamples=2000)
    ref = scipy.stats.bootstrap((x,), np.mean, method="percentile", n_resamples=2000,
                                random_state=0).confidence_interval
    assert isinstance(ours, Estimate) and float(ours) == pytest.approx(x.mean(), abs=1e-6)
    se = x.std() / np.sqrt(len(x))  # resampling noise of the interval ends: a few % of 4 se
    assert ours.low == pytest.approx(ref.low, abs=0.15 * se)
    assert ours.high == pytest.approx(ref.high, abs=0.15 * se)
    assert ours.high - ours.low == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_bootstrap_ci_of_a_correlation_and_its_coverage():
    from repr_jax.eval.sts import spearman
    a = RNG.normal(size=400)
    b = a + RNG.normal(size=400)
    e = E.bootstrap_ci((a, b), spearman, num_resamples=500)
    assert e.low < float(e) < e.high and e.high - e.low < 0.2
    # Coverage: the 95% interval of a Bernoulli(0.7) mean holds 0.7 in about 95% of 200 samples
    # (binomial sd of the count ~3: the band is about +-2.5 sd).
    hits = 0
    for s in range(200):
        v = (np.random.default_rng(s).uniform(size=300) < 0.7).astype(np.float32)
        ci = E.bootstrap_ci(v, num_resamples=400, seed=s)
        hits += ci.low <= 0.7 <= ci.high
    assert 0.88 <= hits / 200 <= 0.99


def test_paired_bootstrap_detects_a_real_difference_only():
    base = RNG.uniform(size=1000)
    same = E.paired_bootstrap(base, base)
    assert same["difference"] == 0.0 and same["p_value"] == 1.0
    better = E.paired_bootstrap(base + 0.05 + 0.01 * RNG.normal(size=1000), base)
    assert better["p_value"] < 0.01 and better["low"] > 0
    noise = E.paired_bootstrap(base + 0.1 * RNG.normal(size=1000), base, seed=1)
    assert noise["p_value"] > 0.01 and noise["low"] < 0 < noise["high"]
    with pytest.raises(ValueError, match="same examples"):
        E.paired_bootstrap(base, base[:10])
