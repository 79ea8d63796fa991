"""Robust scaling-law fits: Huber loss on (log-)residuals, many starts optimised at once, bootstrap.

The objective is the *sum* over points of ``Huber_delta(log y_hat - log y)`` (Hoffmann et al. 2022,
App. D.2; the sum, not the mean, as Besiroglu et al. 2024 showed the mean stops L-BFGS early). Every
start of the initialisation grid runs optax's L-BFGS at once (``vmap`` over starts); the best final
objective wins and is polished by Newton steps in float64. The bootstrap refits ``n`` resamples of
the points, each from the point estimate (as Besiroglu et al.'s bootstrap starts every resample
from one fixed point), by damped Newton steps on the exact P x P Hessian, vmapped, in float64:
thousands of tiny problems want a few exact steps, not L-BFGS's many line-searched ones.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu

from repr_jax.scaling.laws import Law, get_law


def huber(r: jax.Array, delta: float) -> jax.Array:
    """``r^2 / 2`` for ``|r| <= delta``, else ``delta (|r| - delta / 2)`` (``optax.huber_loss``)."""
    return optax.huber_loss(r, delta=delta)


@dataclasses.dataclass(frozen=True)
class FitResult:
    """A fitted law: ``params`` as papers report them, ``theta`` the internal vector, the objective,
    per-point residuals, and how many of ``num_starts`` ended within 0.1% of the best objective."""
    law: str
    params: dict[str, float]
    theta: np.ndarray
    objective: float
    residuals: np.ndarray
    num_starts: int
    starts_in_best_basin: int

    def predict(self, inputs: Mapping[str, Any]) -> np.ndarray:
        law = get_law(self.law)
        return np.asarray(law.predict(jnp.asarray(self.theta), _as_inputs(law, inputs)))


def _as_inputs(law: Law, inputs: Mapping[str, Any]) -> dict[str, jax.Array]:
    missing = [k for k in law.inputs if k not in inputs]
    if missing:
        raise ValueError(f"law {law.name!r} takes inputs {list(law.inputs)}; missing {missing}")
    out = {k: jnp.asarray(inputs[k], jnp.float32) for k in law.inputs}
    n = {v.shape for v in out.values()}
    if len(n) != 1 or len(next(iter(n))) != 1:
        raise ValueError(f"inputs must be 1-D arrays of one length; got "
                         f"{ {k: v.shape for k, v in out.items()} }")
    return out


def _as_float64(checked, inputs, y):
    """The checked inputs (their names) at the precision they were given, and ``y``, as float64
    (call under ``jax.enable_x64``)."""
    return ({k: jnp.asarray(np.asarray(inputs[k], np.float64)) for k in checked},
            jnp.asarray(np.asarray(y, np.float64)))


def _residual_fn(law: Law, log_space: bool):
    if log_space:
        log_pred = law.log_predict or (lambda t, i: jnp.log(law.predict(t, i)))
        return lambda t, i, y: log_pred(t, i) - jnp.log(y)
    return lambda t, i, y: law.predict(t, i) - y


@functools.partial(jax.jit, static_argnames=("law", "log_space", "max_iters"))
def _minimize(theta0_SxP, inputs, y, weights, *, law: Law, log_space: bool, delta, max_iters: int,
              tol):
    """L-BFGS from every row of ``theta0``: ``(theta [S, P], objective [S])``. ``weights`` (point
    multiplicities) let one compiled function serve bootstrap resamples."""
    residual = _residual_fn(law, log_space)
    opt = optax.lbfgs()

    def objective(theta):
        r = residual(theta, inputs, y)
        value = jnp.sum(weights * huber(r, delta))
        return jnp.where(jnp.isfinite(value), value, jnp.inf)

    value_and_grad = optax.value_and_grad_from_state(objective)

    def run(theta0):
        def step(carry):
            theta, state = carry
            value, grad = value_and_grad(theta, state=state)
            grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
            updates, state = opt.update(grad, state, theta, value=value, grad=grad,
                                        value_fn=objective)
            return optax.apply_updates(theta, updates), state

        def going(carry):
            _, state = carry
            it = otu.tree_get(state, "count")
            g = otu.tree_norm(otu.tree_get(state, "grad"))
            return (it == 0) | ((it < max_iters) & (g > tol) & jnp.isfinite(g))

        theta, _ = jax.lax.while_loop(going, step, (theta0, opt.init(theta0)))
        return theta, objective(theta)

    return jax.vmap(run)(theta0_SxP)


def _law_of(law, init_grid):
    if isinstance(law, (str, Law)):
        return get_law(law)
    if callable(law):  # a plain function f(params: dict, inputs: dict) -> y
        if not init_grid:
            raise ValueError("a law given as a function needs init_grid={param: values}")
        names = tuple(init_grid)
        return Law(getattr(law, "__name__", "custom"), (), names,
                   predict=lambda t, i: law(dict(zip(names, t)), i),
                   public=lambda t: dict(zip(names, t)), init_grid=init_grid)
    raise TypeError(f"law must be a name, a Law or a function; got {type(law).__name__}")


def fit_law(law: str | Law | Callable, inputs: Mapping[str, Any], y, *, huber_delta: float = 1e-3,
            log_space: bool = True, init_grid: Mapping[str, Sequence[float]] | None = None,
            max_iters: int = 1000, tol: float = 1e-9, screen_iters: int = 100,
            polish: int = 32) -> FitResult:
    """Fits ``law`` to ``y`` observed at ``inputs`` (see the module docstring).

    Args:
      law: ``"power"``, ``"chinchilla"``, ``"saturation"``, ``"bnsl"``, ``"log_linear"``,
        ``"sae_topk"``, a :class:`~repr_jax.scaling.laws.Law`, or a function
        ``f(params: dict, inputs: dict) -> y`` (then ``init_grid`` names its parameters).
      inputs: named 1-D arrays, e.g. ``{"N": ..., "D": ...}`` for Chinchilla, ``{"x": ...}``.
      y: observed values (positive when ``log_space``).
      huber_delta: the Huber threshold on (log-)residuals.
      log_space: residuals of ``log y`` (relative errors) rather than of ``y``.
      init_grid: ``{param: initial values}`` overriding the law's default grid (internal params).
      max_iters, tol: L-BFGS limits of the final optimisation (gradient-norm tolerance).
      screen_iters, polish: every start first runs ``screen_iters`` iterations at once; the
        ``polish`` best then run to ``max_iters`` (a vmapped while-loop lasts as long as its slowest
        member, so thousands of starts are screened briefly rather than all run to convergence).

    Returns:
      :class:`FitResult`; ``starts_in_best_basin`` counts the polished starts that end within 0.1%
      of the best objective.
    """
    law_obj = _law_of(law, init_grid)
    x = _as_inputs(law_obj, inputs) if law_obj.inputs else {
        k: jnp.asarray(v, jnp.float32) for k, v in inputs.items()}
    y_given, y = y, jnp.asarray(y, jnp.float32)
    if log_space and bool(jnp.any(y <= 0)):
        raise ValueError("log_space=True needs positive y; pass log_space=False")
    starts = jnp.asarray(law_obj.grid(init_grid if isinstance(law, (str, Law)) else None))
    num_starts = len(starts)
    run = functools.partial(_minimize, inputs=x, y=y, weights=jnp.ones_like(y), law=law_obj,
                            log_space=log_space, delta=huber_delta, tol=tol)
    if len(starts) > polish:
        screened, screen_obj = run(starts, max_iters=screen_iters)
        order = np.argsort(np.nan_to_num(np.asarray(screen_obj), nan=np.inf))[:polish]
        starts = screened[order]
    theta, obj = run(starts, max_iters=max_iters)
    obj = np.asarray(obj)
    best = int(np.nanargmin(obj))
    in_basin = int(np.sum(obj <= obj[best] * (1 + 1e-3) + 1e-12))
    with jax.enable_x64(True):  # Newton in float64 from the best start, as the bootstrap refits
        x64, y64 = _as_float64(x, inputs, y_given)
        best64 = jnp.asarray(np.asarray(theta[best], np.float64))
        polished, _, _ = _newton_refits(best64, x64, y64, jnp.ones((1, len(y64)), jnp.float64),
                                        law=law_obj, log_space=log_space, delta=huber_delta,
                                        max_iters=50, tol=tol * max(1.0, float(obj[best])))
        residual = _residual_fn(law_obj, log_space)
        objective = lambda t: float(jnp.sum(huber(residual(t, x64, y64), huber_delta)))
        theta_best = polished[0] if objective(polished[0]) <= objective(best64) else best64
        residuals = np.asarray(residual(theta_best, x64, y64))
        params = {k: float(v) for k, v in law_obj.public(theta_best).items()}
        value = objective(theta_best)
    return FitResult(law_obj.name, params, np.asarray(theta_best), value, residuals, num_starts,
                     in_basin)


@functools.partial(jax.jit, static_argnames=("law", "log_space", "max_iters"))
def _newton_refits(theta0, inputs, y, weights_NxM, *, law: Law, log_space: bool, delta,
                   max_iters: int, tol):
    """Levenberg–Marquardt on the exact Hessian from ``theta0`` for every row of ``weights``.

    Each iteration tries ``theta - (H + lam diag|H|)^-1 g`` and keeps it if the objective falls (or,
    within rounding of the objective, if the gradient shrinks); ``lam`` shrinks 5x on success and
    grows 10x on failure. All problems step together until every one has ``|g| <= tol`` or
    ``max_iters`` is reached; finished ones stop moving. Returns ``(theta [N, P], |g| [N],
    iterations [N])``.
    """
    residual = _residual_fn(law, log_space)

    def objective(theta, w):
        return jnp.sum(w * huber(residual(theta, inputs, y), delta))

    def grad_with_value(theta, w):
        value, grad = jax.value_and_grad(objective)(theta, w)
        return grad, (value, grad)

    def derivatives(theta, w):  # one forward-over-reverse pass gives all three
        hess, (value, grad) = jax.jacfwd(grad_with_value, has_aux=True)(theta, w)
        return value, grad, hess

    def init(w):
        value, grad, hess = derivatives(theta0, w)
        return theta0, value, grad, hess, jnp.asarray(1e-3, theta0.dtype), jnp.int32(0)

    def step(carry, w):
        theta, value, grad, hess, lam, its = carry
        running = jnp.linalg.norm(grad) > tol
        diag = jnp.abs(jnp.diagonal(hess))
        damping = lam * jnp.maximum(diag, 1e-6 * jnp.max(diag))
        new = theta - jnp.linalg.solve(hess + jnp.diag(damping), grad)
        new_value, new_grad, new_hess = derivatives(new, w)
        better = (new_value < value) | ((new_value <= value + 1e-12 * jnp.abs(value))
                                        & (jnp.linalg.norm(new_grad) < jnp.linalg.norm(grad)))
        ok = running & jnp.isfinite(new_value) & jnp.all(jnp.isfinite(new)) & better
        keep = lambda a, b: jnp.where(ok, a, b)
        return (keep(new, theta), keep(new_value, value), keep(new_grad, grad),
                keep(new_hess, hess), jnp.where(ok, lam * 0.2, jnp.where(running, lam * 10, lam)),
                its + running.astype(jnp.int32))

    def going(loop):
        i, carry = loop
        return (i < max_iters) & jnp.any(jnp.linalg.norm(carry[2], axis=-1) > tol)

    def body(loop):
        i, carry = loop
        return i + 1, jax.vmap(step)(carry, weights_NxM)

    _, (theta, _, grad, _, _, its) = jax.lax.while_loop(
        going, body, (0, jax.vmap(init)(weights_NxM)))
    return theta, jnp.linalg.norm(grad, axis=-1), its


@dataclasses.dataclass(frozen=True)
class BootstrapResult:
    """Standard errors and percentile intervals per (public) parameter over refits of resampled
    points; ``samples[name]`` holds every converged resample's value, ``thetas`` their internal
    vectors (for prediction bands). ``failed`` counts resamples whose refit did not converge (left
    out of everything else, and warned about); ``iterations`` is each resample's Newton steps."""
    se: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]
    samples: dict[str, np.ndarray]
    level: float
    thetas: np.ndarray
    failed: int = 0
    iterations: np.ndarray | None = None


def bootstrap(law: str | Law, inputs: Mapping[str, Any], y, n: int = 4000, seed: int = 0, *,
              level: float = 0.95, start: FitResult | None = None, huber_delta: float = 1e-3,
              log_space: bool = True, max_iters: int = 50, tol: float = 1e-9,
              chunk: int = 256) -> BootstrapResult:
    """Refits ``n`` resamples (with replacement) of the points, each from ``start`` (default: the
    full-data fit); SE = std over resamples (of the public parameters), intervals = percentiles.

    Every refit is damped Newton in float64 (:func:`_newton_refits`), ``chunk`` resamples vmapped
    at a time, until the gradient norm of the sum-Huber objective is at most ``tol * max(1, f)``
    (``f`` the full-data objective) or ``max_iters`` steps. On the Chinchilla points every resample
    converges, within 28 steps (median 8). A resample that does not converge, or ends non-finite,
    is counted in ``failed``, warned about, and left out.
    """
    law_obj = get_law(law)
    start = start or fit_law(law_obj, inputs, y, huber_delta=huber_delta, log_space=log_space)
    m = len(np.asarray(y))
    idx = np.random.default_rng(seed).integers(0, m, size=(n, m))
    counts = np.stack([np.bincount(row, minlength=m) for row in idx]).astype(np.float64)
    counts = np.concatenate([counts, np.ones((-n % chunk, m))])  # one compiled shape; cut below
    with jax.enable_x64(True):
        x, y64 = _as_float64(_as_inputs(law_obj, inputs), inputs, y)
        theta0 = jnp.asarray(np.asarray(start.theta, np.float64))
        limit = tol * max(1.0, abs(start.objective))
        parts = [_newton_refits(theta0, x, y64, jnp.asarray(counts[i:i + chunk]), law=law_obj,
                                log_space=log_space, delta=huber_delta, max_iters=max_iters,
                                tol=limit) for i in range(0, n, chunk)]
        thetas, grad_norm, iterations = (np.concatenate([np.asarray(p[j]) for p in parts])[:n]
                                         for j in range(3))
        ok = (grad_norm <= limit) & np.all(np.isfinite(thetas), axis=1)
        pub = jax.vmap(law_obj.public)(jnp.asarray(thetas[ok]))
        samples = {k: np.asarray(v, np.float64) for k, v in pub.items()}
    failed = int(n - ok.sum())
    if failed:
        warnings.warn(f"bootstrap of {law_obj.name!r}: {failed} of {n} refits did not converge in "
                      f"{max_iters} Newton steps (gradient norm above {limit:.3g}); they are left "
                      f"out of the standard errors and intervals", stacklevel=2)
    if not ok.any():
        raise ValueError(f"bootstrap of {law_obj.name!r}: only {int(ok.sum())} of {n} refits "
                         f"converged; no standard errors")
    a = (1 - level) / 2
    return BootstrapResult(
        se={k: float(np.std(v, ddof=1)) if len(v) > 1 else float("nan") for k, v in samples.items()},
        low={k: float(np.quantile(v, a)) for k, v in samples.items()},
        high={k: float(np.quantile(v, 1 - a)) for k, v in samples.items()},
        samples=samples, level=level, thetas=thetas[ok], failed=failed, iterations=iterations)
