"""The spread-out (global orthogonal) regulariser: its two moments equal a numpy computation of
sentence-transformers' ``GlobalOrthogonalRegularizationLoss``, orthonormal rows give 0 and
identical rows 1, its gradient is finite, and a batch of one is refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import objectives as O


def _by_hand(x):
    """(mean_term, second_moment) in float64: cosines, diagonal zeroed, n = B (B - 1) pairs."""
    x = np.asarray(x, np.float64)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    s = u @ u.T
    np.fill_diagonal(s, 0.0)
    n = len(x) * (len(x) - 1)
    return (s.sum() / n) ** 2, (s ** 2).sum() / n


@pytest.mark.parametrize("shape", [(2, 3), (7, 5), (16, 32)])
def test_equals_the_hand_computation(shape):
    x = np.random.default_rng(shape[0]).normal(size=shape).astype(np.float32)
    x[0] += 2.0  # a nonzero mean cosine
    mean_term, second_moment = O.spread_out(jnp.asarray(x))
    assert mean_term.dtype == second_moment.dtype == jnp.float32
    assert mean_term.shape == second_moment.shape == ()
    np.testing.assert_allclose((mean_term, second_moment), _by_hand(x), rtol=1e-5, atol=1e-7)
    # cosines: the rows' lengths do not matter; bfloat16 inputs are computed in float32
    np.testing.assert_allclose(O.spread_out(x * np.arange(1, shape[0] + 1)[:, None]),
                               _by_hand(x), rtol=1e-5, atol=1e-7)
    assert O.spread_out(jnp.asarray(x, jnp.bfloat16))[1].dtype == jnp.float32


def test_orthonormal_rows_give_zero_and_identical_rows_give_one():
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(6, 6)))
    np.testing.assert_allclose(O.spread_out(jnp.asarray(q.T[:4], jnp.float32)), (0.0, 0.0),
                               atol=1e-6)
    np.testing.assert_allclose(O.spread_out(jnp.tile(jnp.array([[0.3, -1.2, 2.0]]), (5, 1))),
                               (1.0, 1.0), rtol=1e-6)
    # two antipodal rows: cosine -1, so the mean term is 1 and the second moment 1
    np.testing.assert_allclose(O.spread_out(jnp.array([[1.0, 0.0], [-1.0, 0.0]])), (1.0, 1.0),
                               rtol=1e-6)


def test_gradient_is_finite_and_jit_equals_eager():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(8, 4)), jnp.float32)
    grad = jax.grad(lambda x: sum(O.spread_out(x)))(x)
    assert grad.shape == x.shape and bool(jnp.all(jnp.isfinite(grad)))
    assert float(jnp.abs(grad).max()) > 0
    np.testing.assert_allclose(jax.jit(O.spread_out)(x), O.spread_out(x), rtol=1e-6)


def test_refuses_a_batch_of_one_and_other_ranks():
    with pytest.raises(ValueError, match=r"batch of at least 2.*\(1, 4\)"):
        O.spread_out(jnp.ones((1, 4)))
    with pytest.raises(ValueError, match=r"\[B, D\].*\(2, 3, 4\)"):
        O.spread_out(jnp.ones((2, 3, 4)))
