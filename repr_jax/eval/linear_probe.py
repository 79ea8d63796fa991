"""Linear probe on frozen features: closed-form ridge, or multinomial logistic regression (L-BFGS)."""

from __future__ import annotations

import functools
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu

from repr_jax.config import config, static
from repr_jax.encoders import precision
from repr_jax.eval.base import Embedder, Evaluator
from repr_jax.eval.stats import with_ci

RIDGE_GRID = tuple(10.0 ** np.arange(-6, 3.5, 0.5))  # relative to the mean eigenvalue of X^T X
LOGISTIC_GRID = tuple(10.0 ** np.arange(-6.0, 0.5, 1.0))  # on the mean cross-entropy
KINDS = ("ridge", "logistic")
STALLS = 5
FAST_GRAM_FLOPS = 2 ** 28  # a logistic probe's Gram from bfloat16 copies from this size up


@jax.jit
def standardize(train_x, *others):
    mu = train_x.mean(0, keepdims=True)
    sd = train_x.std(0, keepdims=True) + 1e-6
    return [(x - mu) / sd for x in (train_x, *others)]


@jax.jit
def _ridge_weights(x_NxD, y_NxC, lambdas_L):
    """Ridge solutions for every lambda from one eigendecomposition of ``X^T X``: ``[L, D, C]``.
    Time ``O(N D^2 + D^3)``, memory ``O(N D + D^2)``: the primal form, for ``N >= D``."""
    evals_D, evecs_DxD = jnp.linalg.eigh(x_NxD.T @ x_NxD)
    proj_DxC = evecs_DxD.T @ (x_NxD.T @ y_NxC)
    scale = jnp.maximum(evals_D.mean(), 1e-12)
    inv_LxD = 1.0 / (jnp.maximum(evals_D, 0.0)[None, :] + scale * lambdas_L[:, None])
    return jnp.einsum("ij,lj,jc->lic", evecs_DxD, inv_LxD, proj_DxC)


@jax.jit
def _ridge_weights_dual(x_NxD, y_NxC, lambdas_L):
    """The same solutions from one eigendecomposition of the kernel ``X X^T``:
    ``W = X^T (X X^T + mu I)^-1 Y`` = ``(X^T X + mu I)^-1 X^T Y`` (the push-through identity; the
    penalty's scale, the mean eigenvalue of ``X^T X``, is ``trace(X X^T) / D``). Time
    ``O(N^2 D + N^3)``, memory ``O(N D + N^2 + L D C)``: the dual form, for ``N < D``
    (scikit-learn's ``_solve_cholesky_kernel``). Zero rows of ``x`` and ``y`` change nothing, so
    callers pad N to a few sizes and compile once per size."""
    evals_N, evecs_NxN = jnp.linalg.eigh(x_NxD @ x_NxD.T)
    scale = jnp.maximum(jnp.sum(evals_N) / x_NxD.shape[1], 1e-12)
    inv_LxN = 1.0 / (jnp.maximum(evals_N, 0.0)[None, :] + scale * lambdas_L[:, None])
    alpha_LxNxC = jnp.einsum("ij,lj,jc->lic", evecs_NxN, inv_LxN, evecs_NxN.T @ y_NxC)
    return jnp.einsum("nd,lnc->ldc", x_NxD, alpha_LxNxC)


def _bucket(n: int) -> int:
    """``n`` rounded up to a power of two (at least 8) up to 256, above that to a multiple of 64:
    the row counts that compile (few, for few-shot's sizes; at most ~1.25x the rows, so at most
    ~2x the dual's ``N^3``, for larger N)."""
    return max(8, 1 << (n - 1).bit_length()) if n <= 256 else -(-n // 64) * 64


def ridge_weights(x_NxD, y_NxC, lambdas_L):
    """Ridge weights ``[L, D, C]`` on the cheaper side: the dual when ``N < D`` (rows padded to a
    few sizes, :func:`_bucket`, where that stays below D, so a new N rarely compiles), else the
    primal. For ``N < D`` the dual is also the accurate one: the primal's ``D - N`` null
    eigenvalues, divided by a small penalty in float32, blow rounding up (12x the weights at
    ``l2 = 1e-6``, N = 100, D = 2,048; the dual: 1e-6)."""
    n, d = x_NxD.shape
    if n >= d:
        return _ridge_weights(x_NxD, y_NxC, lambdas_L)
    pad = _bucket(n) - n if _bucket(n) < d else 0
    return _ridge_weights_dual(jnp.pad(x_NxD, ((0, pad), (0, 0))),
                               jnp.pad(y_NxC, ((0, pad), (0, 0))), lambdas_L)


@functools.partial(jax.jit, static_argnames=("fast_gram",))
def _eigenbasis(x_NxD, *, fast_gram: bool):
    """``(x^T, V, ev)`` with ``x^T x / N ~ V diag(ev) V^T``: the probe's preconditioner, and the
    features stored transposed (``[D, N]``) so that the logits ``W^T x^T`` and the weight gradient
    ``x^T G^T`` are both plain GEMMs over one copy (XLA:CPU runs ``x.T @ g`` on ``[N, D]`` rows
    several times slower). ``fast_gram``: the Gram matrix from bfloat16 copies (float32 sums),
    where the backend has fast bfloat16 dot products; only the preconditioning depends on it, not
    the solution (``V`` is orthonormal either way, and the solve is float32). Time
    ``O(N D^2 + D^3)``, memory ``O(N D + D^2)``."""
    xt_DxN = x_NxD.T
    if fast_gram:
        gram = precision.mixed_dot_general(x_NxD, x_NxD, (((0,), (0,)), ((), ())))
    else:
        gram = xt_DxN @ xt_DxN.T  # the transposed copy's GEMM: faster than x.T @ x here
    ev_D, v_DxD = jnp.linalg.eigh(gram / x_NxD.shape[0])
    return xt_DxN, v_DxD, jnp.maximum(ev_D, 0.0)


@functools.partial(jax.jit, static_argnames=("max_iters",))
def _logistic_weights_preconditioned(xt_DxN, v_DxD, ev_D, y_NxC, lambdas_L, *, max_iters: int,
                                     tol):
    """The solves of :func:`logistic_weights` in preconditioned coordinates ``W = V diag(s) U``,
    ``s_d = (ev_d + C lambda)^-1/2``: the Hessian ``~ (x^T x / N) / C + lambda I`` (softmax
    curvature ``1 / C`` at uniform predictions) becomes ``~ I / C``. ``W`` is formed from ``U``
    (``O(D^2 C)`` an evaluation) rather than the features rotated (``O(N D^2)`` once); the penalty
    is ``lambda / 2 ||s U||^2`` (= ``||W||^2``) and the stopping gradient is mapped back
    (``g_W = V (g_U / s)``). Logits are computed class-major, ``[C, N]``. Time
    ``O(iterations N D C)`` per penalty (two GEMMs an iteration), memory ``O(N (D + C))``."""
    d, c = xt_DxN.shape[0], y_NxC.shape[1]
    y_CxN = y_NxC.T
    opt = optax.lbfgs(linesearch=optax.scale_by_backtracking_linesearch(
        max_backtracking_steps=20, store_grad=True))

    def fit(u0, lam):  # ``u0`` = {"w": V^T W, "b"}: the previous penalty's optimum
        s_Dx1 = jax.lax.rsqrt(ev_D + c * lam + 1e-12)[:, None]

        def loss(p):
            u = s_Dx1 * p["w"]
            logits_CxN = (v_DxD @ u).T @ xt_DxN + p["b"][:, None]
            return (jnp.mean(optax.softmax_cross_entropy(logits_CxN, y_CxN, axis=0))
                    + 0.5 * lam * jnp.sum(u ** 2))
        value_and_grad = optax.value_and_grad_from_state(loss)

        def step(carry):
            p, state, stalls = carry
            value, grad = value_and_grad(p, state=state)
            updates, state = opt.update(grad, state, p, value=value, grad=grad, value_fn=loss)
            new = otu.tree_get(state, "value")
            tiny = value - new <= 4 * jnp.finfo(new.dtype).eps * jnp.abs(new)
            return optax.apply_updates(p, updates), state, jnp.where(tiny, stalls + 1, 0)

        def running(carry):
            _, state, stalls = carry
            it, g = otu.tree_get(state, "count"), otu.tree_get(state, "grad")
            # The largest gradient component in the original basis (scikit-learn's lbfgs ``gtol``
            # on the same objective): g_W = V (g_U / s).
            norm = jnp.maximum(jnp.abs(v_DxD @ (g["w"] / s_Dx1)).max(), jnp.abs(g["b"]).max())
            # Steps that lower the objective by less than its rounding, STALLS in a row, end the
            # solve: float32 cannot resolve more progress (large penalties stall just above tol).
            return (it == 0) | ((it < max_iters) & (norm > tol) & (stalls < STALLS))

        p0 = {"w": u0["w"] / s_Dx1, "b": u0["b"]}
        p, _, _ = jax.lax.while_loop(running, step, (p0, opt.init(p0), 0))
        u = s_Dx1 * p["w"]
        return {"w": u, "b": p["b"]}, (v_DxD @ u, p["b"])

    order = jnp.argsort(-lambdas_L)
    p0 = {"w": jnp.zeros((d, c), xt_DxN.dtype), "b": jnp.zeros((c,), xt_DxN.dtype)}
    _, (w_LxDxC, b_LxC) = jax.lax.scan(fit, p0, lambdas_L[order])
    back = jnp.argsort(order)
    return w_LxDxC[back], b_LxC[back]


@jax.jit
def _row_space(x_NxD):
    """``(x V, V)`` with ``V [D, N]`` orthonormal columns spanning ``x``'s row space (from the
    eigendecomposition of ``x x^T``; directions of null singular values are zero columns). The
    penalised solution lies in that span, so a probe fit on ``x V`` (N features) and mapped back
    by ``V`` is the probe on ``x``: time ``O(N^2 D + N^3)``, memory ``O(N D + N^2)``."""
    ev_N, u_NxN = jnp.linalg.eigh(x_NxD @ x_NxD.T)
    s_N = jnp.sqrt(jnp.maximum(ev_N, 0.0))
    inv_s = jnp.where(s_N > 1e-6 * s_N.max(), 1.0 / jnp.maximum(s_N, 1e-30), 0.0)
    v_DxN = x_NxD.T @ (u_NxN * inv_s[None, :])
    return u_NxN * (s_N * inv_s * s_N)[None, :], v_DxN


def logistic_weights(x_NxD, y_NxC, lambdas_L, *, max_iters: int, tol):
    """Multinomial logistic regression for every lambda: ``([L, D, C], [L, C])``.

    Minimises ``mean_i CE(x_i W + b, y_i) + lambda / 2 ||W||^2`` (bias unpenalised), which is
    scikit-learn's ``LogisticRegression(C=1 / (lambda * N))`` objective divided by ``C N``, until
    no gradient component exceeds ``tol`` (scikit-learn's lbfgs ``gtol`` on this objective) or
    ``max_iters``: L-BFGS with a backtracking (Armijo) line search, which takes the unit step
    almost always (one evaluation per iteration), preconditioned by the features' eigenbasis
    (:func:`_logistic_weights_preconditioned`); the penalties from the largest down, each
    warm-started from the previous solution, in one ``lax.scan``. A solve also ends after
    ``STALLS`` steps in a row that lower the objective by no more than its float32 rounding.
    Time ``O(N D min(N, D) + min(N, D)^3 + iters N min(N, D) C)``, memory ``O(N D + min(N, D)^2)``:
    when ``N < D`` the solve runs in the row space (:func:`_row_space`), never ``D x D``.
    """
    if x_NxD.shape[0] < x_NxD.shape[1]:  # wider than tall: solve in the N-dim row space
        z_NxN, v_DxN = _row_space(x_NxD)
        w_LxNxC, b_LxC = logistic_weights(z_NxN, y_NxC, lambdas_L, max_iters=max_iters, tol=tol)
        return jnp.einsum("dn,lnc->ldc", v_DxN, w_LxNxC), b_LxC
    n, d = x_NxD.shape
    fast = n * d * d >= FAST_GRAM_FLOPS and precision.bfloat16_is_fast()
    xt, v, ev = _eigenbasis(x_NxD, fast_gram=fast)
    return _logistic_weights_preconditioned(xt, v, ev, y_NxC, lambdas_L, max_iters=max_iters,
                                            tol=tol)


def linear_probe(train_x, train_y, test_x, test_y, *, kind: str = "ridge", l2: float | None = None,
                 val_x=None, val_y=None, num_classes: int | None = None, max_iters: int = 500,
                 per_example: bool = False) -> dict[str, Any]:
    """Test accuracy of a linear classifier fit on frozen, standardised features.

    ``kind="ridge"``: least squares onto centred one-hot targets with an L2 penalty
    ``l2 * mean_eig(X^T X)`` (bias unpenalised); the class is the argmax. Closed form: one
    eigendecomposition serves every penalty, of ``X^T X`` or, when ``N < D``, of ``X X^T``
    (:func:`ridge_weights`): time ``O(N D min(N, D))``, memory
    ``O(N D + min(N, D)^2)``.
    ``kind="logistic"``: multinomial logistic regression, ``mean CE + l2 / 2 ||W||^2`` (bias
    unpenalised; sklearn's ``C = 1 / (l2 * N_train)``), fit with optax's L-BFGS until no gradient
    component exceeds 1e-4 (sklearn's default ``tol``) or ``max_iters`` per penalty (preconditioned L-BFGS; the penalties from the largest down, each
    warm-started).

    With ``l2=None`` the penalty is chosen from ``RIDGE_GRID`` / ``LOGISTIC_GRID`` by accuracy on
    ``(val_x, val_y)`` (10% of train is held out when no validation split is given); the reported
    model is fit on the rest of train. ``per_example=True`` adds ``"correct"`` (``[N_test]`` 0/1) for
    bootstrap intervals.

    Returns ``{"accuracy", "l2"}`` (and ``"correct"``).
    """
    if kind not in KINDS:
        raise ValueError(f"linear_probe kind={kind!r} is not available; choose from {KINDS}")
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
    train_x, test_x, *rest = standardize(train_x, *others)
    y = jax.nn.one_hot(train_y, num_classes)
    grid = RIDGE_GRID if kind == "ridge" else LOGISTIC_GRID
    lambdas = jnp.asarray(grid if l2 is None else (l2,), jnp.float32)
    if kind == "ridge":
        y_mean = y.mean(0, keepdims=True)
        w_LxDxC = ridge_weights(train_x, y - y_mean, lambdas)
        b_LxC = jnp.broadcast_to(y_mean, (len(lambdas), num_classes))
    else:
        w_LxDxC, b_LxC = logistic_weights(train_x, y, lambdas, max_iters=max_iters, tol=1e-4)

    def correct(w, b, x, labels):
        return (jnp.argmax(x @ w + b[None, :], -1) == labels).astype(jnp.float32)

    best = 0
    if l2 is None:
        val_acc = jax.vmap(lambda w, b: correct(w, b, rest[0], jnp.asarray(val_y)).mean())(
            w_LxDxC, b_LxC)
        best = int(jnp.argmax(val_acc))
    hits = correct(w_LxDxC[best], b_LxC[best], test_x, test_y)
    out = {"accuracy": float(hits.mean()), "l2": float(lambdas[best])}
    if per_example:
        out["correct"] = hits
    return out


@config
class LinearProbeOptions:
    """``eval.linear_probe.*``: the options of :class:`LinearProbe` (its keyword arguments)."""
    kind: str = static("ridge", ("ridge", "logistic"), "closed-form ridge (penalty chosen on "
                       "validation) or multinomial logistic regression")


class LinearProbe(Evaluator):
    """Linear probe trained on ``train``, penalty chosen on ``validation``, scored on ``test`` (with a
    bootstrap interval over test examples); then on every classification evaluation set.

    Cost (N train rows, D dims, C classes): ridge time ``O(N D min(N, D) + min(N, D)^3)``, memory
    ``O(N D + min(N, D)^2)``; logistic adds ``O(iters N min(N, D) C)`` time (:func:`linear_probe`).
    """

    name = "linear_probe"
    options = LinearProbeOptions

    def __init__(self, embedder: Embedder, *, kind: str = "ridge", bootstrap: int = 1000,
                 **options: Any):
        super().__init__(embedder)
        self.kind, self.bootstrap, self.options = kind, bootstrap, options

    def _probe(self, train, test, val=(None, None), prefix=""):
        out = linear_probe(*train, *test, val_x=val[0], val_y=val[1], kind=self.kind,
                           per_example=True, **self.options)
        yield prefix + "accuracy", with_ci(out["correct"], bootstrap=self.bootstrap)

    def run(self, variables) -> Iterator[tuple[str, float]]:
        f = self.embedder(variables)
        yield from self._probe(f["train"], f["test"], f.get("validation", (None, None)))
        for s in self.embedder.sets("classification"):
            split = {k: (self.embedder.embed(variables, v["x"]), jnp.asarray(v["label"]))
                     for k, v in s.splits.items()}
            yield from self._probe(split["train"], split["test"], prefix=f"{s.name}/")
