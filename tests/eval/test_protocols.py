"""Evaluators on features whose answer is known by construction, and against references."""

import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.eval import KNN, Embedder, LinearProbe, knn_classifier, linear_probe
from repr_jax.eval.linear_probe import _ridge_weights


def clustered(n, num_classes=5, dim=16, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_classes, dim))
    y = rng.integers(0, num_classes, n)
    return (centers[y] + noise * rng.normal(size=(n, dim))).astype(np.float32), y


def test_separable_features_score_perfectly():
    x, y = clustered(600)
    tx, ty = clustered(200, seed=0)  # same centers (same seed) -> same classes
    assert linear_probe(x, y, tx, ty)["accuracy"] == 1.0
    assert knn_classifier(x, y, tx, ty)["accuracy"] == 1.0


def test_random_features_score_at_chance():
    rng = np.random.default_rng(1)
    x, tx = rng.normal(size=(2000, 8)), rng.normal(size=(2000, 8))
    y, ty = rng.integers(0, 4, 2000), rng.integers(0, 4, 2000)
    # Chance is 0.25; 2000 test points give a standard error of about 0.01.
    assert abs(linear_probe(x, y, tx, ty)["accuracy"] - 0.25) < 0.05
    assert abs(knn_classifier(x, y, tx, ty)["accuracy"] - 0.25) < 0.05


def test_ridge_weights_equal_the_normal_equations():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(50, 6)).astype(np.float32)
    y = rng.normal(size=(50, 3)).astype(np.float32)
    lam = np.float32(0.3)
    w = _ridge_weights(jnp.asarray(x), jnp.asarray(y), jnp.asarray([lam]))[0]
    scale = np.linalg.eigvalsh(x.T @ x).mean()
    expect = np.linalg.solve(x.T.astype(np.float64) @ x + lam * scale * np.eye(6), x.T @ y)
    np.testing.assert_allclose(w, expect, rtol=1e-3, atol=1e-4)


def test_ridge_probe_matches_sklearn_ridge_classifier():
    from sklearn.linear_model import RidgeClassifier
    from sklearn.preprocessing import StandardScaler
    x, y = clustered(400, noise=1.5, seed=3)
    tx, ty = clustered(300, noise=1.5, seed=3)
    ours = linear_probe(x, y, tx, ty, l2=1e-2)
    sc = StandardScaler().fit(x)
    xs = sc.transform(x)
    alpha = 1e-2 * np.linalg.eigvalsh(xs.T @ xs).mean()
    ref = RidgeClassifier(alpha=alpha).fit(xs, y).score(sc.transform(tx), ty)
    assert ours["accuracy"] == pytest.approx(ref, abs=0.01)


def test_knn_matches_brute_force_numpy():
    rng = np.random.default_rng(4)
    x, tx = rng.normal(size=(100, 5)), rng.normal(size=(40, 5))
    y, ty = rng.integers(0, 3, 100), rng.integers(0, 3, 40)
    k, t = 7, 0.07
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    tn = tx / np.linalg.norm(tx, axis=1, keepdims=True)
    sim = tn @ xn.T
    preds = []
    for row in sim:
        top = np.argsort(-row)[:k]
        votes = np.zeros(3)
        np.add.at(votes, y[top], np.exp(row[top] / t))
        preds.append(votes.argmax())
    expect = np.mean(np.array(preds) == ty)
    assert knn_classifier(x, y, tx, ty, k=k, temperature=t, chunk_size=16)["accuracy"] == \
        pytest.approx(expect)


def test_evaluators_share_one_feature_pass():
    x, y = clustered(300)
    splits = {"train": {"x": x, "label": y}, "validation": {"x": x[:50], "label": y[:50]},
              "test": {"x": x[:100], "label": y[:100]}}
    calls = []

    def predict_fn(variables, xb):
        calls.append(xb.shape)  # traced once per distinct shape
        return xb * variables["scale"]

    emb = Embedder(predict_fn, splits, batch_size=128)
    variables = {"scale": jnp.float32(2.0)}
    probe = dict(LinearProbe(emb).run(variables))
    knn = dict(KNN(emb, k=5).run(variables))
    assert probe["accuracy"] == 1.0 and knn["accuracy"] == 1.0
    assert len(calls) == 1  # every split padded to one batch shape: one trace
    f = emb(variables)
    np.testing.assert_allclose(f["train"][0], 2 * x, rtol=1e-6)


def test_bad_inputs():
    with pytest.raises(ValueError, match="choose from"):
        linear_probe(np.zeros((4, 2)), np.zeros(4, int), np.zeros((4, 2)), np.zeros(4, int),
                     kind="svm")
    with pytest.raises(ValueError, match=r"\[N, D\] features"):
        linear_probe(np.zeros((4, 2)), np.zeros(4, int), np.zeros((4, 3)), np.zeros(4, int))
