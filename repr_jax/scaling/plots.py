"""Plots of a fit: data, fitted curve, bootstrap prediction band, held-out points."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np

from repr_jax.train.log import figure, log_axis, save_figure


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
