"""Embedding-dimension limits with free embeddings (LIMIT; Weller et al. 2025).

Claim: even query and document vectors optimised directly on the test set (the best case for any
embedding model) can make every top-2 subset of n documents retrievable only up to a critical n
that grows polynomially with the dimension d; the paper fits a cubic to its critical-n points.

Setup (`repr_jax.eval.limit`): for each d, n documents and one query per pair of them; Adam
(lr 0.05, up to 4,000 steps, 2 random restarts) on a smooth margin loss (soft max of the
negatives' scores minus soft min of the two positives', temperature 0.1); solved = every query
ranks exactly its two documents first (dot product, strict). Critical n by doubling then
bisection; a cubic least-squares fit of critical n against d.
Command:   repr-jax study limit_free_embeddings --workdir runs/limit
           (append :quick for d = 2..4 only)
Hardware:  2 CPU cores.
Runtime and result: see experiments/README.md.
"""

from pathlib import Path

import numpy as np

from repr_jax.eval.limit import critical_n_curve
from repr_jax.scaling import Study


def analyze(workdir: Path, table: list[dict], *, dims=tuple(range(2, 9))) -> list[dict]:
    del table
    curve = critical_n_curve(dims)
    d, n = np.asarray(list(curve)), np.asarray(list(curve.values()), float)
    degree = min(3, len(d) - 1)
    coeffs = np.polyfit(d, n, degree)
    fit = np.polyval(coeffs, d)
    rows = [dict(dim=int(di), critical_n=int(ni), cubic_fit=float(fi),
                 queries=int(ni * (ni - 1) // 2)) for di, ni, fi in zip(d, n, fit)]
    rows.append(dict(dim="fit", critical_n=None,
                     cubic_fit=" + ".join(f"{c:.4g} d^{degree - i}"
                                          for i, c in enumerate(coeffs)).replace(" d^0", "")))
    _plot(d, n, coeffs, workdir / "plots" / "critical_n.png")
    return rows


def _plot(d, n, coeffs, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    grid = np.linspace(d.min(), d.max(), 100)
    ax.plot(d, n, "o", label="critical n (free embeddings)")
    ax.plot(grid, np.polyval(coeffs, grid), "-", label=f"degree-{len(coeffs) - 1} fit")
    ax.set(xlabel="embedding dimension d", ylabel="largest n with every top-2 set retrievable",
           title="LIMIT: critical n vs dimension")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def get_study(arg=None):
    dims = (2, 3, 4) if arg == "quick" else tuple(range(2, 9))
    return Study(claim=__doc__.split("\n\n")[1],
                 analyze=lambda workdir, table: analyze(workdir, table, dims=dims))
