"""Linear probe: a closed-form ridge classifier on frozen features."""

from __future__ import annotations

from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.eval.base import Embedder, Evaluator

RIDGE_GRID = tuple(10.0 ** np.arange(-6, 3.5, 0.5))  # relative to the mean eigenvalue of X^T X


def _standardize(train_x, *others):
    mu = train_x.mean(0, keepdims=True)
    sd = train_x.std(0, keepdims=True) + 1e-6
    return [(x - mu) / sd for x in (train_x, *others)]


@jax.jit
def _ridge_weights(x_NxD, y_NxC, lambdas_L):
    """Ridge solutions for every lambda from one eigendecomposition of ``X^T X``: ``[L, D, C]``."""
    evals_D, evecs_DxD = jnp.linalg.eigh(x_NxD.T @ x_NxD)
    proj_DxC = evecs_DxD.T @ (x_NxD.T @ y_NxC)
    scale = jnp.maximum(evals_D.mean(), 1e-12)
    inv_LxD = 1.0 / (jnp.maximum(evals_D, 0.0)[None, :] + scale * lambdas_L[:, None])
    return jnp.einsum("ij,lj,jc->lic", evecs_DxD, inv_LxD, proj_DxC)


def linear_probe(train_x, train_y, test_x, test_y, *, kind: str = "ridge", l2: float | None = None,
                 val_x=None, val_y=None, num_classes: int | None = None) -> dict[str, float]:
    """Test accuracy of a linear classifier fit on frozen features.

    ``kind="ridge"``: least squares onto centred one-hot targets with an L2 penalty
    ``l2 * mean_eig(X^T X)`` on standardised features (bias unpenalised); the class is the argmax.
    With ``l2=None`` the penalty is chosen from ``RIDGE_GRID`` by accuracy on ``(val_x, val_y)``
    (10% of train is held out when no validation split is given); the reported model is fit on train.

    Returns ``{"accuracy", "l2"}``.
    """
    if kind != "ridge":
        raise ValueError(f"linear_probe kind={kind!r} is not available; choose from: 'ridge'")
    train_x, test_x = jnp.asarray(train_x, jnp.float32), jnp.asarray(test_x, jnp.float32)
    train_y, test_y = jnp.asarray(train_y), jnp.asarray(test_y)
    if train_x.ndim != 2 or test_x.shape[1:] != train_x.shape[1:]:
        raise ValueError(f"linear_probe expects [N, D] features; got train {train_x.shape}, "
                         f"test {test_x.shape}")
    if val_x is None and l2 is None:
        perm = np.random.default_rng(0).permutation(len(train_y))
        n_val = max(1, len(perm) // 10)
        val_x, val_y = train_x[perm[:n_val]], train_y[perm[:n_val]]
        train_x, train_y = train_x[perm[n_val:]], train_y[perm[n_val:]]
    num_classes = num_classes or int(max(train_y.max(), test_y.max())) + 1
    others = (test_x,) if val_x is None else (test_x, jnp.asarray(val_x, jnp.float32))
    train_x, test_x, *rest = _standardize(train_x, *others)
    y = jax.nn.one_hot(train_y, num_classes)
    y_mean = y.mean(0, keepdims=True)
    lambdas = jnp.asarray(RIDGE_GRID if l2 is None else (l2,), jnp.float32)
    w_LxDxC = _ridge_weights(train_x, y - y_mean, lambdas)

    def accuracy(w, x, labels):
        return jnp.mean(jnp.argmax(x @ w + y_mean, -1) == labels)

    best = 0
    if l2 is None:
        val_acc = jax.vmap(accuracy, (0, None, None))(w_LxDxC, rest[0], jnp.asarray(val_y))
        best = int(jnp.argmax(val_acc))
    return {"accuracy": float(accuracy(w_LxDxC[best], test_x, test_y)),
            "l2": float(lambdas[best])}


class LinearProbe(Evaluator):
    """Ridge probe trained on ``train``, penalty chosen on ``validation``, scored on ``test``."""

    name = "linear_probe"

    def __init__(self, embedder: Embedder, **options: Any):
        super().__init__(embedder)
        self.options = options

    def run(self, variables) -> Iterator[tuple[str, float]]:
        f = self.embedder(variables)
        val = f.get("validation", (None, None))
        out = linear_probe(*f["train"], *f["test"], val_x=val[0], val_y=val[1], **self.options)
        yield "accuracy", out["accuracy"]
