"""NT-Xent: hand-computed values, the lightly NTXentLoss convention, invariances, jit/vmap/grad."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.objectives import nt_xent


def lightly_ntxent_reference(z1, z2, temperature):
    """lightly.loss.NTXentLoss (no memory bank), re-expressed in numpy: for each view's batch, the
    logits against the other view (positive on the diagonal) and against its own view with the
    diagonal removed, cross-entropy with label i, mean over all 2B rows."""
    def norm(x):
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    a, b = norm(np.asarray(z1, np.float64)), norm(np.asarray(z2, np.float64))
    n = len(a)
    off = ~np.eye(n, dtype=bool)
    l00, l01, l10, l11 = (x @ y.T / temperature for x, y in ((a, a), (a, b), (b, a), (b, b)))
    rows0 = np.concatenate([l01, l00[off].reshape(n, n - 1)], axis=1)
    rows1 = np.concatenate([l10, l11[off].reshape(n, n - 1)], axis=1)
    logits = np.concatenate([rows0, rows1])
    labels = np.concatenate([np.arange(n), np.arange(n)])
    logz = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    return float(np.mean(logz - logits[np.arange(2 * n), labels]))


def test_hand_computed_orthogonal_case():
    # z1 = z2 = I_2: each anchor has sims {1 (positive), 0, 0} to the others -> log(e + 2) - 1.
    assert float(nt_xent(jnp.eye(2), jnp.eye(2), 1.0)) == pytest.approx(np.log(np.e + 2) - 1, 1e-6)
    # B = 1: the positive is the only candidate, so the loss is exactly 0.
    assert float(nt_xent(jnp.ones((1, 3)), -jnp.ones((1, 3)), 0.1)) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("temperature", [0.07, 0.5, 2.0])
def test_matches_lightly_convention(temperature):
    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(size=(2, 16, 8)).astype(np.float32)
    np.testing.assert_allclose(nt_xent(z1, z2, temperature),
                               lightly_ntxent_reference(z1, z2, temperature), rtol=1e-5)


def test_invariances():
    rng = np.random.default_rng(1)
    z1, z2 = jnp.asarray(rng.normal(size=(2, 12, 6)), jnp.float32)
    base = nt_xent(z1, z2, 0.3)
    perm = rng.permutation(12)
    chex.assert_trees_all_close(nt_xent(z1[perm], z2[perm], 0.3), base, rtol=1e-6)  # batch order
    chex.assert_trees_all_close(nt_xent(z2, z1, 0.3), base, rtol=1e-6)  # view symmetry
    chex.assert_trees_all_close(nt_xent(3.0 * z1, 0.5 * z2, 0.3), base, rtol=1e-5)  # scale-free
    # Temperature scaling: tau and the similarity scale enter only as their ratio.
    chex.assert_trees_all_close(nt_xent(z1, z2, 0.3), nt_xent(z1, z2, jnp.float32(0.3)))


class NtXentVariantsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_jit_eager_grad_vmap(self):
        z1, z2 = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 4))
        fn = self.variant(nt_xent)
        chex.assert_trees_all_close(fn(z1, z2, 0.5), nt_xent(z1, z2, 0.5), rtol=1e-6)
        grads = jax.grad(lambda a, b: fn(a, b, 0.5), argnums=(0, 1))(z1, z2)
        chex.assert_tree_all_finite(grads)
        stacked = jax.vmap(lambda a, b: nt_xent(a, b, 0.5))(jnp.stack([z1, z2]), jnp.stack([z2, z1]))
        chex.assert_trees_all_close(stacked, jnp.stack([nt_xent(z1, z2, 0.5)] * 2), rtol=1e-6)


def test_shape_errors_quote_shapes():
    with pytest.raises(ValueError, match=r"\(4, 3\) and \(4, 2\)"):
        nt_xent(jnp.zeros((4, 3)), jnp.zeros((4, 2)))
