"""Plots of a sweep (held-out loss against compute) and of a fit (data, fitted curve, bootstrap
prediction band, held-out points)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import jax.numpy as jnp
import numpy as np

from repr_jax.train.log import figure, log_axis, save_figure, short_count


def plot_fit(law, fit, boot, data: dict[str, np.ndarray], y: np.ndarray, train: np.ndarray,
             out: str | Path, *, x_label: str = "x", y_label: str = "y") -> Path:
    """One-input laws: y against x (log x) with the fit, its 95% bootstrap band and held-out points
    in red. Several inputs: predicted against observed, with the identity line."""
    fig, ax = figure(figsize=(5.2, 3.8))
    first = data[law.inputs[0]]
    if len(law.inputs) == 1:
        grid = np.geomspace(first.min(), first.max(), 200) if first.min() > 0 else np.linspace(
            first.min(), first.max(), 200)
        inputs = {law.inputs[0]: jnp.asarray(grid, jnp.float32)}
        thetas = boot.thetas[:: max(1, len(boot.thetas) // 400)]
        band = np.asarray([np.asarray(law.predict(jnp.asarray(t), inputs)) for t in thetas])
        ax.fill_between(grid, np.nanpercentile(band, 2.5, 0), np.nanpercentile(band, 97.5, 0),
                        alpha=0.25, label="95% bootstrap band")
        ax.plot(grid, np.asarray(law.predict(jnp.asarray(fit.theta), inputs)), label="fit")
        ax.scatter(first[train], y[train], s=14, color="k", label="fitted points")
        if (~train).any():
            ax.scatter(first[~train], y[~train], s=18, color="tab:red", label="held out")
        if first.min() > 0:
            log_axis(ax, "x")
        ax.set(xlabel=x_label, ylabel=y_label)
    else:
        pred = fit.predict(data)
        ax.scatter(y[train], pred[train], s=14, color="k", label="fitted points")
        if (~train).any():
            ax.scatter(y[~train], pred[~train], s=18, color="tab:red", label="held out")
        lo, hi = float(np.min(y)), float(np.max(y))
        ax.plot([lo, hi], [lo, hi], color="gray", lw=1)
        ax.set(xlabel=f"observed {y_label}", ylabel=f"predicted {y_label}")
    params = ", ".join(f"{k}={v:.3g}" for k, v in fit.params.items())
    ax.set_title(f"{law.name}: {params}", fontsize=8)
    ax.legend(fontsize=7)
    return save_figure(fig, out, dpi=110)


MARKERS = "os^Dv<>pPX*h"


def loss_vs_flops_figure(rows: Iterable[dict[str, Any]], grid: Mapping[str, Mapping[str, Any]]):
    """The held-out loss of every point against training FLOPs, one line per point: colour is
    the parameter count, marker shape the grid key that varies at a fixed size (data, steps, a
    hyperparameter), both named in legends; log axes with plain tick labels. ``grid``: each
    point's grid values. None when no row has both numbers."""
    series: dict[str, list[tuple[float, float]]] = {}
    params: dict[str, float] = {}
    for r in rows:
        loss, flops = r.get("upstream/loss"), r.get("flops")
        if loss is not None and flops and math.isfinite(loss) and flops > 0:
            series.setdefault(r["point"], []).append((flops, loss))
            params[r["point"]] = r.get("params") or 0
    if not series:
        return None
    from matplotlib import colormaps
    from matplotlib.lines import Line2D
    sizes = sorted(set(params.values()))
    shape_key = _shape_key(series, params, grid)

    def shape_of(name):
        return str(grid.get(name, {}).get(shape_key))

    shapes = sorted({shape_of(n) for n in series}, key=_natural) if shape_key else []
    cmap = colormaps["viridis"]

    def colour(size):
        return cmap(0.85 * sizes.index(size) / max(len(sizes) - 1, 1))

    fig, ax = figure(figsize=(7.5, 4.5))
    for name, pts in series.items():
        pts.sort()
        marker = MARKERS[shapes.index(shape_of(name)) % len(MARKERS)] if shapes else "o"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", marker=marker, ms=4, lw=1,
                color=colour(params[name]))
    log_axis(ax, "x")
    log_axis(ax, "y")
    ax.set(xlabel="training FLOPs (XLA cost analysis)", ylabel="upstream loss (test split)",
           title="held-out loss vs compute")
    shown = sizes if len(sizes) <= 10 else sizes[:: math.ceil(len(sizes) / 10)]
    legend = ax.legend(handles=[Line2D([], [], color=colour(s), lw=2, label=short_count(s))
                                for s in shown], title="parameters", fontsize=7,
                       title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if shapes:
        ax.add_artist(legend)
        ax.legend(handles=[Line2D([], [], color="0.3", ls="", marker=MARKERS[i % len(MARKERS)],
                                  label=v) for i, v in enumerate(shapes)],
                  title=shape_key, fontsize=7, title_fontsize=7, loc="lower left",
                  bbox_to_anchor=(1.01, 0.0))
    return fig


def _shape_key(series, params, grid) -> str | None:
    """The first grid key that takes several values among points of one parameter count."""
    keys = dict.fromkeys(k for n in series for k in grid.get(n, {}))
    for key in keys:
        seen: dict[float, set[str]] = {}
        for n in series:
            if key in grid.get(n, {}):
                seen.setdefault(params[n], set()).add(str(grid[n][key]))
        if any(len(v) > 1 for v in seen.values()):
            return key
    return None


def _natural(text: str):
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)
