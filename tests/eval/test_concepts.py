"""Concept directions and Park et al.'s geometry tests against hand-computed toys, synthetic sets
whose answer is known by construction, and one run at N = 20,000, D = 256."""

import numpy as np
import pytest

from repr_jax.eval import concepts as C
from repr_jax.eval.linear_probe import linear_probe
from repr_jax.eval.stats import Estimate

RNG = np.random.default_rng(0)


def test_difference_of_means_by_hand():
    x = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    # class 0: (1, 0) - mean{(0,2), (2,2)} = (1, 0) - (1, 2) = (0, -2)
    # class 1: (0, 2) - mean{(0,0), (2,0), (2,2)} = (0, 2) - (4/3, 2/3) = (-4/3, 4/3)
    # class 2: (2, 2) - mean{(0,0), (2,0), (0,2)} = (2, 2) - (2/3, 2/3) = (4/3, 4/3)
    got = C.difference_of_means(x, np.array([0, 0, 1, 2]))
    np.testing.assert_allclose(got, [[0, -2], [-4 / 3, 4 / 3], [4 / 3, 4 / 3]], rtol=1e-6)
    with pytest.raises(ValueError, match="class counts"):
        C.difference_of_means(x, np.array([0, 0, 2, 2]))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_held_out_accuracy_by_hand(sign):
    # Train projections: positives 3, 5 (mean 4), negatives 0, 2 (mean 1): threshold 2.5.
    x_train = np.array([[3.0, 9.0], [5.0, -9.0], [0.0, 1.0], [2.0, 0.0]])
    y_train = np.array([1, 1, 0, 0])
    # Test at 2.4 (neg, right), 2.6 (pos, right), 10 (pos, right), -1 (pos, wrong): 3 of 4.
    x_test = np.array([[2.4, 0.0], [2.6, 5.0], [10.0, 0.0], [-1.0, 0.0]])
    y_test = np.array([0, 1, 1, 1])
    out = C.held_out_accuracy(np.array([sign, 0.0]), x_train, y_train, x_test, y_test,
                              bootstrap=0)
    assert out["threshold"] == pytest.approx(2.5 * sign) and out["sign"] == sign
    np.testing.assert_array_equal(out["correct"], [1, 1, 1, 0])
    np.testing.assert_array_equal(out["predicted"], [0, 1, 1, 0])
    assert float(out["accuracy"]) == 0.75
    e = C.held_out_accuracy(np.array([sign, 0.0]), x_train, y_train, x_test, y_test,
                            bootstrap=200)["accuracy"]
    assert isinstance(e, Estimate) and e.low <= 0.75 <= e.high


def _blobs(n, d, centres, rng, scale=1.0):
    labels = rng.integers(0, len(centres), n)
    x = np.asarray(centres)[labels] + scale * rng.normal(size=(n, d))
    return x.astype(np.float32), labels


def test_probe_directions_are_linear_probes_weights():
    d = 5
    centres = 3.0 * np.eye(3, d)
    x_train, y_train = _blobs(600, d, centres, RNG)
    x_test, y_test = _blobs(300, d, centres, RNG)
    out = C.probe_directions(x_train, y_train, x_test, y_test, l2=1e-3, bootstrap=0)
    assert out["directions_CxD"].shape == (3, d) and out["correct_CxM"].shape == (3, 300)
    for k in range(3):
        ref = linear_probe(x_train, (y_train == k).astype(int), x_test, (y_test == k).astype(int),
                           kind="logistic", l2=1e-3, num_classes=2, per_example=True)
        np.testing.assert_array_equal(out["correct_CxM"][k], np.asarray(ref["correct"]))
        assert float(out["accuracy"][k]) == pytest.approx(ref["accuracy"])
        # The raw-coordinate direction and bias reproduce the probe's decisions.
        decide = x_test @ out["directions_CxD"][k] + out["bias_C"][k] > 0
        agree = np.mean((decide == (y_test == k)) == out["correct_CxM"][k].astype(bool))
        assert agree > 0.99
        # Class k's centre is e_k: its weight vector points mostly along e_k.
        w = out["directions_CxD"][k]
        assert np.argmax(np.abs(w)) == k and w[k] > 0
    chosen = C.probe_directions(x_train, y_train, x_test, y_test, bootstrap=0)
    assert all(np.isclose(C.LOGISTIC_GRID, l2, rtol=1e-6).any() for l2 in chosen["l2_C"])
    assert min(map(float, chosen["accuracy"])) > 0.85


def test_a_balanced_probe_is_sklearns_class_weighted_logistic_regression():
    """balanced=True: scikit-learn's class_weight="balanced" on the same standardised features
    (C = 1 / (l2 N)); on 1-in-20 positives with a weak signal it finds the rare class, where
    the unweighted probe's balanced accuracy stays near 0.5."""
    from sklearn.linear_model import LogisticRegression
    rng = np.random.default_rng(5)
    d, n, l2 = 6, 4000, 1e-3
    y = (rng.random(2 * n) < 0.05).astype(np.int32)
    x = (rng.normal(size=(2 * n, d)) + 1.2 * y[:, None] * np.eye(d)[0]).astype(np.float32)
    out = C.probe_directions(x[:n], y[:n], x[n:], y[n:], l2=l2, num_classes=2, bootstrap=0,
                             balanced=True)
    mu, sd = x[:n].mean(0), x[:n].std(0) + 1e-6
    ref = LogisticRegression(C=1 / (l2 * n), class_weight="balanced", tol=1e-8,
                             max_iter=10_000).fit((x[:n] - mu) / sd, y[:n])
    ours = out["directions_CxD"][1] * sd
    cos = ours @ ref.coef_[0] / np.linalg.norm(ours) / np.linalg.norm(ref.coef_[0])
    assert cos > 0.999
    np.testing.assert_allclose(np.linalg.norm(ours), np.linalg.norm(ref.coef_[0]), rtol=1e-2)
    decide = x[n:] @ out["directions_CxD"][1] + out["bias_C"][1] > 0
    assert np.mean(decide == ref.predict((x[n:] - mu) / sd).astype(bool)) > 0.995

    def balanced(correct, truth):
        return np.mean([correct[truth == t].mean() for t in (0, 1)])
    plain = C.probe_directions(x[:n], y[:n], x[n:], y[n:], num_classes=2, bootstrap=0)
    chosen = C.probe_directions(x[:n], y[:n], x[n:], y[n:], num_classes=2, bootstrap=0,
                                balanced=True)
    assert balanced(plain["correct_CxM"][1], y[n:]) < 0.6
    assert balanced(chosen["correct_CxM"][1], y[n:]) > 0.65


def test_shuffled_labels_sit_at_chance_and_real_ones_do_not():
    d = 8
    x_train, y_train = _blobs(2000, d, [np.zeros(d), 2.5 * np.eye(d)[0]], RNG)
    x_test, y_test = _blobs(2000, d, [np.zeros(d), 2.5 * np.eye(d)[0]], RNG)
    direction = C.difference_of_means(x_train, y_train)[1]
    real = C.held_out_accuracy(direction, x_train, y_train, x_test, y_test, bootstrap=200)
    assert real["accuracy"].low > 0.85
    ctrl = C.shuffled_accuracy(x_train, y_train, x_test, y_test, seed=3, bootstrap=200)
    assert abs(ctrl["chance"] - 0.5) < 0.05
    assert ctrl["accuracy"].low < ctrl["chance"] + 0.02 and ctrl["accuracy"].high > 0.45
    assert float(ctrl["accuracy"]) < 0.56
    again = C.shuffled_accuracy(x_train, y_train, x_test, y_test, seed=3, bootstrap=200)
    assert repr(again["accuracy"]) == repr(ctrl["accuracy"])  # deterministic given the seed
    # An imbalanced concept (20% positive) under the probe: chance is the majority rate.
    y_train_i, y_test_i = (RNG.random(2000) < 0.2), (RNG.random(2000) < 0.2)
    probe = C.shuffled_accuracy(x_train, y_train_i, x_test, y_test_i, method="probe", seed=1,
                                bootstrap=0)
    assert abs(float(probe["accuracy"]) - probe["chance"]) < 0.05
    with pytest.raises(ValueError, match="choose from"):
        C.shuffled_accuracy(x_train, y_train, x_test, y_test, method="lda")


def test_causal_transform_by_hand_and_whitening():
    # Rows (+-2, 0), (0, +-1) around (1, 1): Cov = diag(2, 0.5) (divisor V),
    # A = diag(2^-1/2, 2^1/2).
    base = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    mean, a = C.causal_transform(base + 1.0)
    np.testing.assert_allclose(mean, [1.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(a, np.diag([2 ** -0.5, 2 ** 0.5]), atol=1e-12)
    # Rotated: A = R diag(...) R^T, symmetric.
    t = 0.3
    r = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    _, a_rot = C.causal_transform(base @ r.T)
    np.testing.assert_allclose(a_rot, r @ np.diag([2 ** -0.5, 2 ** 0.5]) @ r.T, atol=1e-12)
    # A correlated vocabulary: Cov(g) = I, A symmetric, A Cov A = I.
    gamma = (RNG.normal(size=(5000, 8)) @ RNG.normal(size=(8, 8)) + 3.0).astype(np.float32)
    mean, a = C.causal_transform(gamma, chunk=1000)
    g = C.causal_coordinates(gamma, mean, a)
    np.testing.assert_allclose(a, a.T, atol=1e-12)
    np.testing.assert_allclose(np.cov(g.T.astype(np.float64), bias=True), np.eye(8), atol=1e-5)
    np.testing.assert_allclose(g.mean(0), 0.0, atol=1e-5)


def test_causal_transform_of_a_rank_deficient_vocabulary_adds_a_ridge():
    gamma = RNG.normal(size=(500, 3)) @ RNG.normal(size=(3, 6))  # rank 3 in D = 6
    with pytest.warns(UserWarning, match="rank-deficient"):
        mean, a = C.causal_transform(gamma)
    assert np.all(np.isfinite(a))
    cov_g = np.cov(C.causal_coordinates(gamma, mean, a).T.astype(np.float64), bias=True)
    # The identity on the covariance's (3-dim) range, ~0 off it.
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(cov_g))[-3:], 1.0, atol=1e-4)
    with pytest.raises(ValueError, match="singular"):
        C.causal_transform(gamma, ridge=0.0)


def _reference_lda(g):
    """Park et al.'s estimator written out in numpy (float64, numpy's pinv)."""
    m = g.mean(0)
    u = np.linalg.pinv(np.cov(g.T)) @ m
    u /= np.linalg.norm(u)
    return (u @ m) * u


def test_lda_direction_by_hand_and_against_pinv():
    # Mean (1, 1), Cov ~ [[2, 1], [1, 1]]: Cov^-1 (1, 1) ~ (0, 1), l = ((0, 1) . (1, 1)) (0, 1).
    g = np.array([[2.0, 2.0], [0.0, 0.0], [2.0, 1.0], [0.0, 1.0]])
    np.testing.assert_allclose(C.lda_direction(g), [0.0, 1.0], atol=1e-6)
    # Words mu + (+-s_i e_i): zero-mean noise with mu an eigenvector of Cov, so l = mu exactly
    # (the projection length is |mu| = 3).
    mu = np.array([3.0, 0.0, 0.0, 0.0])
    noise = np.concatenate([s * np.eye(4) * sign for s, sign in [(1, 1), (1, -1)]])
    noise = noise * np.array([1.0, 2.0, 2.0, 2.0])[None, :]
    l_w = C.lda_direction(mu + noise)
    np.testing.assert_allclose(l_w, mu, atol=1e-5)
    # Both branches (W > D: the D x D covariance; W <= D: the W x W Gram) match numpy's pinv.
    for w, d in [(50, 6), (6, 50)]:
        g = RNG.normal(size=(w, d)) + RNG.normal(size=d)
        np.testing.assert_allclose(C.lda_direction(g), _reference_lda(g), rtol=2e-3, atol=2e-4)
    # Isotropic noise around mu, many words: l ~ mu (Cov's sampling error turns g_tilde by
    # ~sqrt(D / W) = 3%).
    mu = 2.0 * RNG.normal(size=16)
    l_w = C.lda_direction(mu + 0.5 * RNG.normal(size=(16_000, 16)))
    assert np.linalg.norm(l_w - mu) < 0.05 * np.linalg.norm(mu)


def _words(mean, n, rng, scale=0.5):
    return (mean + scale * rng.normal(size=(n, len(mean)))).astype(np.float32)


def test_hierarchy_cosine_is_zero_when_orthogonal_and_not_otherwise():
    d = 16
    e = np.eye(d)
    parent_mean, delta = 3.0 * e[0], 3.0 * e[1]  # delta orthogonal to the parent's vector
    vocab = RNG.normal(size=(3000, d)).astype(np.float32)
    # Enough words that the estimator's finite-sample pull towards -l_parent (|l_z| shrinks as
    # its direction's error grows; -0.1 with 400 words in D = 16) stays well inside 0.05.
    parent = _words(parent_mean, 2000, RNG)
    ortho = C.hierarchy_cosine(parent, _words(parent_mean + delta, 1500, RNG), vocab,
                               bootstrap=200)
    assert abs(float(ortho["cosine"])) < 0.05
    assert ortho["cosine"].low < 0.0 < ortho["cosine"].high
    # A child whose difference leans along the parent: cos = 1.5 / sqrt(1.5^2 + 3^2) = 0.447.
    lean = C.hierarchy_cosine(parent, _words(parent_mean + 0.5 * parent_mean + delta, 1500, RNG),
                              vocab, bootstrap=200)
    assert float(lean["cosine"]) == pytest.approx(1 / np.sqrt(5), abs=0.05)
    assert lean["cosine"].low > 0.3
    # The control (a random vocabulary set): l_random ~ 0, so l_random - l_parent ~ -l_parent.
    assert ortho["control"].high < -0.8 and isinstance(ortho["control"], Estimate)
    again = C.hierarchy_cosine(parent, _words(parent_mean + delta, 300,
                                              np.random.default_rng(5)), vocab, bootstrap=50)
    twice = C.hierarchy_cosine(parent, _words(parent_mean + delta, 300,
                                              np.random.default_rng(5)), vocab, bootstrap=50)
    assert repr(again) == repr(twice)


def test_simplex_ratio_by_construction():
    # Exact vertices: words mu_i + (+-1 e_j), so l_i = mu_i exactly; mu_i = 3 e_i is an
    # equilateral triangle: differences' Gram 9 [[2, 1], [1, 2]], s = 3 sqrt(3), 3: ratio 1/sqrt 3.
    d = 6
    plus_minus = np.concatenate([np.eye(d), -np.eye(d)])
    exact = [3.0 * np.eye(d)[i] + plus_minus for i in range(3)]
    out = C.simplex_test(exact, bootstrap=0)
    assert float(out["ratio"]) == pytest.approx(1 / np.sqrt(3), abs=1e-4)
    assert float(out["spread"]) == pytest.approx(3 * np.sqrt(3) / 3, abs=1e-4)
    # Noisy words: a simplex vs collapsed (collinear) categories, with their controls.
    e, u = np.eye(d), np.ones(d) / np.sqrt(d)
    simplex = C.simplex_test([_words(3.0 * e[i], 3000, RNG) for i in range(3)], bootstrap=200)
    collinear = C.simplex_test([_words(k * 3.0 * u, 3000, RNG) for k in (1, 2, 3)], bootstrap=200)
    # (A smallest singular value is biased up under resampling: near 0 the percentile interval
    # sits above the point, so the collapsed case is read from its upper end.)
    assert simplex["ratio"].low > 0.45
    assert float(collinear["ratio"]) < 0.05 and collinear["ratio"].high < 0.1
    assert simplex["control_spread"].high < 0.3 < simplex["spread"].low
    with pytest.raises(ValueError, match="3 <= k"):
        C.simplex_test(exact[:2])


def test_large_inputs_run_in_memory_linear_in_n():
    """N = 20,000, D = 256: every function runs and gives finite numbers (no N x N matrix; an
    N x N float32 would be 1.6 GB)."""
    n, d = 20_000, 256
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, d)).astype(np.float32)
    labels = rng.integers(0, 4, n)
    x[np.arange(n), labels] += 2.0
    means = C.difference_of_means(x, labels)
    assert means.shape == (4, d) and np.all(np.isfinite(means))
    y = labels == 1
    acc = C.held_out_accuracy(means[1], x[:15_000], y[:15_000], x[15_000:], y[15_000:])
    assert np.isfinite(acc["accuracy"].low) and float(acc["accuracy"]) > 0.8
    probe = C.probe_directions(x[:15_000], labels[:15_000], x[15_000:], labels[15_000:],
                               l2=1e-3, max_iters=50, bootstrap=100)
    assert np.all(np.isfinite(probe["directions_CxD"])) and min(map(float, probe["accuracy"])) > 0.8
    ctrl = C.shuffled_accuracy(x[:15_000], y[:15_000], x[15_000:], y[15_000:], bootstrap=100)
    assert np.isfinite(float(ctrl["accuracy"]))
    mean, a = C.causal_transform(x)
    g = C.causal_coordinates(x, mean, a)
    assert np.all(np.isfinite(g))
    assert np.all(np.isfinite(C.lda_direction(g)))
    h = C.hierarchy_cosine(g[labels <= 1], g[labels == 1], g, bootstrap=10)
    assert all(np.isfinite([float(v), v.low, v.high]).all() for v in h.values())
    s = C.simplex_test([g[labels == k] for k in range(3)], bootstrap=10)
    assert all(np.isfinite([float(v), v.low, v.high]).all() for v in s.values())


def test_the_normal_interval_is_centred_on_the_point_with_the_resamples_spread():
    """Resamples shifted c above the point (as duplicated words shift whitened statistics):
    the interval stays on the point, point -+ 1.96 sd, where the percentile one misses it."""
    from repr_jax.eval.stats import normal_interval, percentile_interval
    rng = np.random.default_rng(0)
    point, c, sd = 1.0, 0.5, 0.1
    shifted = point + c + sd * rng.standard_normal(100_000)
    lo, hi = normal_interval(shifted, point, 0.95)
    assert lo == pytest.approx(point - 1.95996 * sd, abs=1e-3)
    assert hi == pytest.approx(point + 1.95996 * sd, abs=1e-3)
    assert percentile_interval(shifted, 0.95)[0] > point  # the percentile interval misses the point
    assert all(np.isnan(normal_interval([np.nan, 1.0], 0.0)))
    with pytest.raises(ValueError, match="level"):
        normal_interval(shifted, point, 1.0)
