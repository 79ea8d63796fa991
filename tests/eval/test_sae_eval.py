"""The ``sae`` evaluator on a tiny SAE whose every row is computed by hand, its intervals, and
representations without a reconstruction (no rows)."""

import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.eval import EVALUATORS, PROTOCOLS, Embedder, Estimate
from repr_jax.eval.sae import sae_statistics, variance_ratio
from repr_jax.objectives import sae as S

# A ReLU SAE with D = 2, L = 3: latent 0 reads x0, latent 1 reads x1 and decodes half of it,
# latent 2 never fires (its encoder column is zero).
PARAMS = {"W_enc": jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), "b_enc": jnp.zeros(3),
          "W_dec": jnp.array([[1.0, 0.0], [0.0, 0.5], [0.0, 0.0]]), "b_dec": jnp.zeros(2)}
X = np.array([[1.0, 0.0], [0.0, 2.0], [2.0, 0.0], [1.0, 1.0]], np.float32)
# z = [[1,0,0], [0,2,0], [2,0,0], [1,1,0]]; x_hat = [[1,0], [0,1], [2,0], [1,0.5]]
# ||x - x_hat||^2 = 0, 1, 0, 0.25 (sum 1.25); mean x = (1, 0.75);
# ||x - mean||^2 = 0.5625, 2.5625, 1.5625, 0.0625 (sum 4.75): FVU = 1.25 / 4.75
# L0 = 1, 1, 1, 2 (mean 1.25); firing rates 3/4, 1/2, 0: one dead latent of three, two dense.


def encode(variables, x):
    return S.encode(variables, x, activation="relu")


def reconstruct(variables, x):
    return S.decode(variables, encode(variables, x))


def embedder(**kw):
    labels = np.zeros(len(X), np.int32)
    splits = {s: {"x": X, "label": labels} for s in ("train", "validation", "test")}
    return Embedder(encode, splits, batch_size=3, **kw)  # 3: the last batch is padded


def run(embedder, **options):
    return dict(EVALUATORS["sae"](embedder, **options).run(PARAMS))


def test_every_row_by_hand():
    out = run(embedder(reconstruct_fn=reconstruct), bootstrap=0)
    assert list(out) == ["fvu", "l0", "dead_fraction", "dense_fraction"]
    np.testing.assert_allclose(out["fvu"], 1.25 / 4.75, rtol=1e-6)
    np.testing.assert_allclose(out["l0"], 1.25, rtol=1e-6)
    assert out["dead_fraction"] == pytest.approx(1 / 3)
    assert out["dense_fraction"] == pytest.approx(2 / 3)  # firing on > 10% of the inputs
    dense = run(embedder(reconstruct_fn=reconstruct), bootstrap=0, dense_threshold=0.6)
    assert dense["dense_fraction"] == pytest.approx(1 / 3)  # only latent 0 (3/4 > 0.6)
    # the set's FVU is the objective's
    x_hat = reconstruct(PARAMS, jnp.asarray(X))
    np.testing.assert_allclose(out["fvu"], S.fvu(jnp.asarray(X), x_hat), rtol=1e-6)


def test_per_example_statistics_and_their_intervals():
    s = sae_statistics(jnp.asarray(X), reconstruct(PARAMS, jnp.asarray(X)),
                       encode(PARAMS, jnp.asarray(X)))
    np.testing.assert_allclose(s["resid"], [0, 1, 0, 0.25], atol=1e-7)
    np.testing.assert_allclose(s["centred"], [0.5625, 2.5625, 1.5625, 0.0625], rtol=1e-6)
    np.testing.assert_allclose(s["l0"], [1, 1, 1, 2])
    np.testing.assert_array_equal(s["fired"], [3, 2, 0])
    np.testing.assert_allclose(variance_ratio(s["resid"], s["centred"]), 1.25 / 4.75, rtol=1e-6)
    out = run(embedder(reconstruct_fn=reconstruct), bootstrap=200)
    for name, point in (("fvu", 1.25 / 4.75), ("l0", 1.25)):
        assert isinstance(out[name], Estimate)
        np.testing.assert_allclose(float(out[name]), point, rtol=1e-6)
        assert out[name].low <= point <= out[name].high and out[name].low < out[name].high
    assert 1.0 <= out["l0"].low and out["l0"].high <= 2.0  # resampled means of 1s and 2s
    assert not isinstance(out["dead_fraction"], Estimate)  # a set statistic: no interval


def test_no_reconstruction_no_rows():
    """Raw inputs and every other method's representation: the evaluator has nothing to say
    (the evaluation then prints why, once); it is not a per-layer or per-prefix protocol."""
    assert run(embedder()) == {}
    assert "sae" in EVALUATORS and "sae" not in PROTOCOLS


def test_its_budget_follows_its_order():
    """``repr-jax eval --dry-run``: O(N·D·L) for the two passes, linear in each."""
    from repr_jax.eval import budget

    def flops(n, d, latents):
        return budget.estimate("sae", budget.Shape(n_train=1, n_test=n, dim=latents,
                                                   input_dim=d), {})[0]
    assert flops(2000, 64, 512) == pytest.approx(2 * flops(1000, 64, 512))
    assert flops(1000, 128, 512) == pytest.approx(2 * flops(1000, 64, 512))
    assert flops(1000, 64, 1024) == pytest.approx(2 * flops(1000, 64, 512))


def test_batches_give_the_whole_sets_numbers_and_padding_fires_nothing():
    """The evaluator reads the split a batch at a time (3 rows: the last batch is padded with a
    zero row). A latent that fires only on the zero vector stays dead: padding is not counted;
    and the per-example numbers are those of the whole set at once."""
    params = dict(PARAMS, W_enc=PARAMS["W_enc"].at[:, 2].set(-10.0),
                  b_enc=jnp.array([0.0, 0.0, 1.0]))
    out = dict(EVALUATORS["sae"](embedder(reconstruct_fn=reconstruct), bootstrap=0).run(params))
    assert out["dead_fraction"] == pytest.approx(1 / 3)
    whole = sae_statistics(jnp.asarray(X), reconstruct(params, jnp.asarray(X)),
                           encode(params, jnp.asarray(X)))
    np.testing.assert_allclose(out["fvu"], float(jnp.sum(whole["resid"]) /
                                                 jnp.sum(whole["centred"])), rtol=1e-6)
    assert float(encode(params, jnp.zeros((1, 2)))[0, 2]) == 1.0  # it does fire on padding
