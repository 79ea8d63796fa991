"""Linear-probe fit time: repr_jax (JAX, on device) vs scikit-learn (CPU), at equal accuracy.

    python bench/probe_vs_sklearn.py                          # 20,000 x 256 features, 10 classes
    python bench/probe_vs_sklearn.py --train 50000 --dim 512
    python bench/probe_vs_sklearn.py --data separated --l2 1e-3   # issue 53's easy case

Both fit the same objective on the same standardised features: multinomial logistic regression
(``mean CE + l2/2 ||W||^2`` = sklearn's ``C = 1 / (l2 N)``, L-BFGS both) and ridge (sklearn
``RidgeClassifier``, the same penalty). Prints test accuracy, fit+predict time (best of
``--repeats`` after a warm-up that compiles ours; the first, compiling call is printed too) and the
time ratios, all from this one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see shared/OFFLINE_DATA.md: threads spin

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine, take_turns  # noqa: E402


def features(n_train: int, n_test: int, dim: int, classes: int, seed: int = 0,
             kind: str = "overlapping"):
    """``overlapping``: Gaussian classes in a random low-rank-plus-noise feature space (probe
    accuracy well below 1, as for real frozen features). ``separated``: unit-variance Gaussian
    classes with means drawn ``N(0, 0.35^2)`` in every dimension: separable in 256 dimensions, so
    a solver stops after few iterations (scikit-learn's lbfgs: 10) and fixed costs dominate."""
    rng = np.random.default_rng(seed)
    if kind == "separated":
        centres = rng.normal(size=(classes, dim)) * 0.35

        def draw_separated(n):
            y = rng.integers(0, classes, n)
            return (centres[y] + rng.normal(size=(n, dim))).astype(np.float32), y
        return draw_separated(n_train), draw_separated(n_test)
    means = rng.normal(size=(classes, 32)) * 0.6
    mix = rng.normal(size=(32, dim)) / np.sqrt(32)
    def draw(n):
        y = rng.integers(0, classes, n)
        z = means[y] + rng.normal(size=(n, 32))
        return (z @ mix + 0.5 * rng.normal(size=(n, dim))).astype(np.float32), y
    return draw(n_train), draw(n_test)


def timed(ours, theirs, repeats: int):
    """``(our result, theirs, our first call's time, our best, their best)``: each side's first
    call, then ``repeats`` rounds taking turns (:func:`machine.take_turns`)."""
    t = time.perf_counter()
    out_o = ours()
    first = time.perf_counter() - t
    out_s = theirs()
    best = take_turns({"ours": ours, "theirs": theirs}, repeats)
    return out_o, out_s, first, best["ours"], best["theirs"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--test", type=int, default=5000)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--l2", type=float, default=1e-4)
    p.add_argument("--data", choices=("overlapping", "separated"), default="overlapping")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    machine = Machine.now()  # before this bench's own work loads the cores
    print(machine.line())

    import jax
    from sklearn.linear_model import LogisticRegression, RidgeClassifier

    from repr_jax.eval import linear_probe
    from repr_jax.eval.linear_probe import LOGISTIC_GRID, standardize

    (x, y), (tx, ty) = features(args.train, args.test, args.dim, args.classes,
                                kind=args.data)
    xs, txs = (np.asarray(a) for a in standardize(x, tx))
    print(f"{args.train:,} x {args.dim} {args.data} train features, {args.test:,} test, "
          f"{args.classes} classes, l2 {args.l2:g}; "
          f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs")

    rows = []
    for kind in ("logistic", "ridge"):
        def ours(kind=kind):
            return linear_probe(x, y, tx, ty, kind=kind, l2=args.l2)["accuracy"]
        if kind == "logistic":
            ref_model = LogisticRegression(C=1 / (args.l2 * args.train), max_iter=1000)
        else:
            alpha = args.l2 * np.linalg.eigvalsh(xs.T.astype(np.float64) @ xs).mean()
            ref_model = RidgeClassifier(alpha=alpha)

        def theirs(model=ref_model):
            return model.fit(xs, y).score(txs, ty)
        rows.append((kind, *timed(ours, theirs, args.repeats)))

    # The penalty grid (LOGISTIC_GRID, 7 values), chosen on a validation split: ours solves it in one
    # program, largest penalty first, each warm-started; sklearn loops the same way (warm_start).
    # The last tenth of train is the validation split.
    cut = args.train - args.train // 10
    gx, gtx, gvx = (np.asarray(a) for a in standardize(x[:cut], tx, x[cut:]))

    def ours_grid():
        return linear_probe(x[:cut], y[:cut], tx, ty, kind="logistic", val_x=x[cut:],
                            val_y=y[cut:])["accuracy"]

    def theirs_grid():
        model, best = LogisticRegression(warm_start=True, max_iter=1000), (-1.0, None)
        for lam in sorted(LOGISTIC_GRID, reverse=True):
            model.set_params(C=1 / (lam * cut)).fit(gx, y[:cut])
            best = max(best, (model.score(gvx, y[cut:]), model.score(gtx, ty)), key=lambda t: t[0])
        return best[1]
    rows.append(("logistic, 7-penalty grid", *timed(ours_grid, theirs_grid, args.repeats)))

    print(f"{'probe':9} {'acc ours':>9} {'acc sklearn':>12} {'ours 1st':>9} {'ours':>8} "
          f"{'sklearn':>8} {'sklearn/ours':>13}")
    for kind, acc_o, acc_s, first_o, t_o, t_s in rows:
        print(f"{kind:9} {acc_o:9.4f} {acc_s:12.4f} {first_o:8.2f}s {t_o:7.2f}s {t_s:7.2f}s "
              f"{t_s / t_o:12.2f}x")
        print("   " + machine.ratio(f"sklearn / repr_jax time, {kind}", t_s / t_o))


if __name__ == "__main__":
    main()
