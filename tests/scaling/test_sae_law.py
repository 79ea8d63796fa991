"""Gao et al. 2024's joint law of a TopK SAE's normalised MSE in latents n and sparsity k
(``sae_topk``): recovered from noisy synthetic points drawn from it, with bootstrap intervals
that cover the truth. Cost: ~30 s on 2 CPU cores (729 starts screened, 300 Newton refits)."""

import numpy as np
import pytest

from repr_jax.scaling import LAWS, bootstrap, fit_law

# Shaped like a small SAE study: loss 0.02-0.3, the irreducible term a fifth to a half of it at
# the largest n.
TRUTH = dict(alpha=1.0, beta_k=0.1, beta_n=-0.3, gamma=-0.02, zeta=-3.0, eta=-0.4)


def sae_loss(n, k, p=TRUTH):
    """The law in numpy, written out (not through the Law), so a wrong form would not agree."""
    ln, lk = np.log(n), np.log(k)
    return (np.exp(p["alpha"] + p["beta_k"] * lk + p["beta_n"] * ln + p["gamma"] * lk * ln)
            + np.exp(p["zeta"] + p["eta"] * lk))


def _grid(rel_noise: float, seed: int = 0):
    n_NxK, k_NxK = np.meshgrid(2.0 ** np.arange(9, 21, 2), 2.0 ** np.arange(3, 9), indexing="ij")
    n, k = n_NxK.ravel(), k_NxK.ravel()  # 6 x 6 = 36 points, n 512 ... 524,288, k 8 ... 256
    y = sae_loss(n, k) * np.exp(rel_noise * np.random.default_rng(seed).normal(size=n.shape))
    return {"n": n, "k": k}, y


def test_the_law_is_registered_and_predicts_its_formula():
    law = LAWS["sae_topk"]
    assert law.inputs == ("n", "k") and len(law.params) == 6
    assert "Gao et al. 2024" in law.source
    inputs, y = _grid(0.0)
    theta = np.asarray([TRUTH[p] for p in law.params], np.float32)
    np.testing.assert_allclose(np.asarray(law.predict(theta, inputs)), y, rtol=1e-4)
    assert law.public(theta)["gamma"] == pytest.approx(-0.02)


@pytest.mark.xla_optimized
def test_known_parameters_are_recovered_and_the_bootstrap_covers_them():
    inputs, y = _grid(0.01)
    f = fit_law("sae_topk", inputs, y)
    assert f.num_starts == 3 ** 6 and f.starts_in_best_basin >= 1
    assert np.abs(f.residuals).max() < 0.04  # 1% noise: residuals of a few %
    for k, tol in dict(beta_n=0.03, gamma=0.006, eta=0.1, beta_k=0.1).items():
        assert f.params[k] == pytest.approx(TRUTH[k], abs=tol), (k, f.params)
    # The prediction, not only the parameters: within the noise everywhere on the grid.
    assert np.abs(np.log(f.predict(inputs)) - np.log(sae_loss(inputs["n"], inputs["k"]))
                  ).max() < 0.02
    # Huber(1e-3) on 1%-noisy points is nearly L1: a few refits need past 50 Newton steps.
    b = bootstrap("sae_topk", inputs, y, n=300, seed=0, start=f, max_iters=200)
    assert b.failed == 0
    for k, v in TRUTH.items():
        assert b.low[k] <= v <= b.high[k], (k, b.low[k], v, b.high[k])
        assert b.low[k] <= f.params[k] <= b.high[k]
