"""Bootstrap of the Chinchilla fit: repr_jax (vmapped damped Newton, float64) vs a scipy loop.

    python bench/bootstrap_vs_scipy.py              # 4,000 resamples
    python bench/bootstrap_vs_scipy.py --n 500

The same work on both sides: the 240 digitised Hoffmann et al. points (shared/refdata/chinchilla_epoch,
found beside this checkout or under $REPR_JAX_REFDATA; the script exits if absent), the same resampled
indices, every refit from the same full-data optimum, the sum-Huber(1e-3) log-loss objective with its
analytic gradient (scipy: ``minimize(method="L-BFGS-B", jac=True)`` with our tolerances, in a
Python loop). Prints both
wall times (ours after a warm-up that compiles), the ratio, and both sets of standard errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine  # noqa: E402


def scipy_objective(theta, log_n, log_d, log_l, w, delta):
    """Sum-Huber of log residuals of LSE(a - alpha log N, b - beta log D, e), and its gradient."""
    a, b, e, alpha, beta = theta
    t = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    m = t.max(0)
    p = np.exp(t - m)
    lse = m + np.log(p.sum(0))
    soft = p / p.sum(0)
    r = lse - log_l
    small = np.abs(r) <= delta
    value = np.sum(w * np.where(small, 0.5 * r ** 2, delta * (np.abs(r) - 0.5 * delta)))
    dr = w * np.where(small, r, delta * np.sign(r))
    grad = np.array([np.sum(dr * soft[0]), np.sum(dr * soft[1]), np.sum(dr * soft[2]),
                     -np.sum(dr * soft[0] * log_n), -np.sum(dr * soft[1] * log_d)])
    return value, grad


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4000)
    args = p.parse_args(argv)
    machine = Machine.now()  # before this bench's own work loads the cores
    print(machine.line())

    import jax
    from scipy.optimize import minimize

    from repr_jax.scaling import bootstrap, fit_law
    from repr_jax.scaling.refdata import chinchilla_points

    points = chinchilla_points()
    if points is None:
        sys.exit("chinchilla_epoch refdata not found (set REPR_JAX_REFDATA=/path/to/shared/refdata)")
    n_params, d_tokens, loss = points["N"], points["D"], points["loss"]
    inputs = {"N": n_params, "D": d_tokens}
    fit = fit_law("chinchilla", inputs, loss)
    print(f"{len(loss)} points; full fit {', '.join(f'{k}={v:.4g}' for k, v in fit.params.items())}; "
          f"{args.n} resamples; jax {jax.__version__} on {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPUs")

    t = time.perf_counter()
    bootstrap("chinchilla", inputs, loss, n=1, start=fit, chunk=256)  # compiles the 256-row chunk
    print(f"repr_jax first call (compiles): {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    ours = bootstrap("chinchilla", inputs, loss, n=args.n, seed=0, start=fit)
    t_ours = time.perf_counter() - t

    m = len(loss)
    idx = np.random.default_rng(0).integers(0, m, size=(args.n, m))  # bootstrap()'s draws
    logs = np.log(n_params), np.log(d_tokens), np.log(loss)
    x0 = np.asarray(fit.theta, np.float64)
    t = time.perf_counter()
    thetas, scipy_iters, scipy_ok = [], [], []
    for row in idx:
        w = np.bincount(row, minlength=m).astype(np.float64)
        # Tolerances as ours (gradient 1e-9, at most 200 iterations): scipy's defaults stop at the
        # start, since the sum-Huber objective is ~1e-3 in absolute terms.
        res = minimize(scipy_objective, x0, args=(*logs, w, 1e-3), jac=True, method="L-BFGS-B",
                       options={"gtol": 1e-9, "ftol": 0.0, "maxiter": 200})
        thetas.append(res.x)
        scipy_iters.append(res.nit)
        scipy_ok.append(np.linalg.norm(res.jac) <= 1e-9)
    t_scipy = time.perf_counter() - t
    th = np.asarray(thetas)
    scipy_se = {"A": np.exp(th[:, 0]).std(ddof=1), "B": np.exp(th[:, 1]).std(ddof=1),
                "E": np.exp(th[:, 2]).std(ddof=1), "alpha": th[:, 3].std(ddof=1),
                "beta": th[:, 4].std(ddof=1)}
    print(f"{'param':6} {'SE ours':>10} {'SE scipy':>10}")
    for k in ("E", "A", "B", "alpha", "beta"):
        print(f"{k:6} {ours.se[k]:10.4g} {scipy_se[k]:10.4g}")
    print(f"repr_jax: {ours.failed} refits failed; Newton steps median {np.median(ours.iterations):.0f}"
          f", max {ours.iterations.max()}")
    print(f"scipy: {len(idx) - sum(scipy_ok)} refits ended above gradient norm 1e-9; iterations "
          f"median {np.median(scipy_iters):.0f}, max {max(scipy_iters)}")
    print(f"repr_jax bootstrap : {t_ours:8.2f} s")
    print(f"scipy loop         : {t_scipy:8.2f} s")
    print(machine.ratio("scipy / repr_jax time", t_scipy / t_ours))


if __name__ == "__main__":
    main()
