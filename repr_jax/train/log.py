"""Run outputs: reading metrics.jsonl, evaluation tables (printed), and the run's plots."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Iterable

from repr_jax import files


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSONL log; a torn last line (a run still writing, or killed) is left out."""
    return files.read_jsonl(path, drop_torn_tail=True)


def format_table(rows: Iterable[dict[str, Any]], notes: Iterable[str] = ()) -> str:
    """Rows ``{representation, evaluator, metric, value[, ci_low, ci_high]}`` as a table: one line
    per ``evaluator/metric``, one column per representation; ``0.9245 ±0.0052`` shows the half-width
    of a bootstrap interval. ``notes``: lines under it saying what a row or column measures."""
    rows = list(rows)
    if not rows:
        return "(no evaluation rows)"
    metrics = list(dict.fromkeys(f"{r['evaluator']}/{r['metric']}" for r in rows))
    reps = list(dict.fromkeys(r["representation"] for r in rows))
    cell = {}
    for r in rows:
        text = "failed (see error)" if "error" in r else f"{r['value']:.4f}"
        if "ci_low" in r:
            text += f" ±{(r['ci_high'] - r['ci_low']) / 2:.4f}"
        cell[r["representation"], f"{r['evaluator']}/{r['metric']}"] = text
    width = max(len(m) for m in metrics + ["metric"])
    col = [max(len(rep), *(len(cell.get((rep, m), "-")) for m in metrics)) for rep in reps]
    lines = ["  ".join(["metric".ljust(width)] + [rep.rjust(w) for rep, w in zip(reps, col)])]
    for m in metrics:
        lines.append("  ".join([m.ljust(width)] + [cell.get((rep, m), "-").rjust(w)
                                                   for rep, w in zip(reps, col)]))
    lines += [f"failed: {r['evaluator']} on {r['representation']}: {r['error']}"
              for r in rows if "error" in r]  # why, one line each
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def format_rows(rows: Iterable[dict[str, Any]]) -> str:
    """Any list of flat dicts as an aligned text table (floats to 4 significant digits)."""
    rows = list(rows)
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def text(v):
        return "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)

    cells = [[text(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(line, widths))
                     for line in [columns] + cells)


def _series(rows, evaluator: str):
    """``{(representation, metric_suffix): [(position, row), ...]}`` for ``layer_i/...``,
    ``dim_d/...`` and ``{precision}/...`` style metric names."""
    out: dict[tuple[str, str], list] = {}
    for r in rows:
        if r["evaluator"] == evaluator and "/" in r["metric"]:
            head, _, rest = r["metric"].rpartition("/")
            out.setdefault((r["representation"], rest), []).append((head, r))
    return out


def _errorbar(ax, xs, rs, **kw):
    ys = [r["value"] for r in rs]
    if all("ci_low" in r for r in rs):
        err = [[y - r["ci_low"] for y, r in zip(ys, rs)], [r["ci_high"] - y for y, r in zip(ys, rs)]]
        ax.errorbar(xs, ys, yerr=err, capsize=3, marker="o", **kw)
    else:
        ax.plot(xs, ys, marker="o", **kw)


def figure(*args, **kwargs):
    """``matplotlib.pyplot.subplots`` on the file-only Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(*args, **kwargs)


def save_figure(fig, path: str | Path, *, dpi: int = 120) -> Path:
    """Lays out, writes (creating the folder) and closes ``fig``."""
    import matplotlib.pyplot as plt
    path = Path(path)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, dpi=dpi, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return files.write_bytes(path, image.getvalue())  # atomic: never a half-written image


def plain_number(value: float, _pos=None) -> str:
    """A tick label without TeX powers: ``0.005``, ``4.8``, ``20000``, ``3e12``, ``1.5e-5``."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    exp = math.floor(math.log10(abs(value)) + 1e-9)
    if -3 <= exp < 5:
        return f"{round(value, 6 - exp):g}"
    return f"{round(value / 10**exp, 2):g}e{exp}"


def short_count(n: float) -> str:
    """``3100`` as ``3.1k``, ``1.8e5`` as ``180k``, ``2.5e6`` as ``2.5M`` (3 significant digits)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{float(f'{n / scale:.3g}'):g}{suffix}"
    return f"{n:g}"


def log_axis(ax, which: str = "x") -> None:
    """Puts ``ax``'s ``which`` axis ("x" or "y") on a log scale with plain tick labels
    (:func:`plain_number`) and few enough of them not to overlap: round numbers for a range under
    about a decade, 1-2-5 per decade up to three decades, decades (thinned) beyond. Call it after
    plotting: the ticks follow the data's range."""
    from matplotlib import ticker
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    lo, hi = sorted(getattr(ax, f"get_{which}lim")())
    decades = math.log10(hi / lo) if lo > 0 else math.inf
    if decades < 1.2:
        locator = ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10])
    else:
        locator = ticker.LogLocator(subs=(1.0, 2.0, 5.0) if decades < 3.5 else (1.0,), numticks=8)
    axis.set_major_locator(locator)
    axis.set_major_formatter(ticker.FuncFormatter(plain_number))
    axis.set_minor_formatter(ticker.NullFormatter())


def setting_points(ax, labels: list[str], series: dict[str, list[dict[str, Any] | None]]) -> None:
    """One column per setting (``labels`` under the axis, so none is drawn over another), one
    colour per series, each value a point with its interval where the rows carry one (``None``:
    no value for that setting); a legend when there are several series."""
    width = 0.6 / max(len(series), 1)
    for i, (name, points) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j, r in enumerate(points) if r]
        _errorbar(ax, xs, [r for r in points if r], label=name, ls="")
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=7)


def plot_eval(rows: Iterable[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """Plots the per-layer, per-prefix and per-precision evaluations among ``rows`` (with their
    intervals): ``layerwise.png`` (metric vs layer), ``matryoshka.png`` (metric vs embedding size),
    ``quantization.png`` (retrieval metric vs bytes per vector). Returns the files written."""
    rows, out_dir, written = list(rows), Path(out_dir), []

    def save(fig, name):
        written.append(save_figure(fig, out_dir / name, dpi=110))

    for evaluator, xlabel in (("layerwise", "layer"), ("matryoshka", "embedding size")):
        series = _series(rows, evaluator)
        if not series:
            continue
        metrics = sorted({m for _, m in series})
        fig, axes = figure(1, len(metrics), figsize=(4.5 * len(metrics), 3.4), squeeze=False)
        for ax, metric in zip(axes[0], metrics):
            for (rep, m), points in series.items():
                if m != metric:
                    continue
                if evaluator == "layerwise":
                    labels = [h for h, _ in points]
                    _errorbar(ax, range(len(points)), [r for _, r in points], label=rep)
                    ax.set_xticks(range(len(points)), labels, rotation=30, fontsize=8)
                else:
                    dims = [int(h.removeprefix("dim_")) for h, _ in points]
                    _errorbar(ax, dims, [r for _, r in points], label=rep)
                    ax.set_xscale("log", base=2)
                    ax.set_xticks(dims, [str(d) for d in dims])  # the prefix sizes, plainly
                    ax.minorticks_off()
            ax.set(xlabel=xlabel, ylabel=metric, title=f"{evaluator}: {metric}")
            ax.legend(fontsize=7)
        save(fig, f"{evaluator}.png")

    quant = [r for r in rows if r["evaluator"] == "quantization"]
    if quant:
        tasks = sorted({r["metric"].rpartition("/")[0].rpartition("/")[0] for r in quant})
        fig, axes = figure(1, len(tasks), figsize=(4.8 * len(tasks), 3.8), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            prefix, series, settings, ylabel = f"{task}/" if task else "", {}, {}, ""
            for rep in dict.fromkeys(r["representation"] for r in quant):
                mine = {r["metric"]: r for r in quant if r["representation"] == rep}
                for name, r in mine.items():
                    head, _, metric = name.rpartition("/")
                    if head.startswith(prefix) and metric != "bytes" and "/" not in head[len(prefix):]:
                        setting = head[len(prefix):]
                        settings[setting] = mine[f"{head}/bytes"]["value"]
                        series.setdefault(rep, {})[setting] = r
                        ylabel = metric
            order = sorted(settings, key=lambda k: (-settings[k], k))
            setting_points(ax, [f"{k}\n{plain_number(settings[k])} B" for k in order],
                           {rep: [pts.get(k) for k in order] for rep, pts in series.items()})
            ax.set(xlabel="precision (bytes per vector)", ylabel=ylabel,
                   title=f"quantization {task or 'test pairs'}")
        save(fig, "quantization.png")
    return written


def eval_steps(run_dir: str | Path) -> list[int]:
    """The steps a run has evaluation files for (``eval/step_<N>.json``), ascending."""
    return sorted(int(p.stem.split("_")[1]) for p in Path(run_dir, "eval").glob("step_*.json"))


def held_out_loss(run_dir: str | Path) -> list[tuple[int, float]]:
    """``(step, loss)`` of the objective on the test split (``upstream/loss`` rows) from the run's
    ``eval/step_<N>.json`` files; a damaged file is skipped with a warning."""
    import warnings
    out = []
    for step in eval_steps(run_dir):
        path = Path(run_dir, "eval", f"step_{step}.json")
        try:
            rows = files.read_json(path)
        except files.DamagedFile as e:
            warnings.warn(f"{e}; left out of the loss plot", stacklevel=2)
            continue
        out += [(int(r["step"]), float(r["value"])) for r in rows
                if r.get("evaluator") == "upstream" and r.get("metric") == "loss"
                and math.isfinite(r.get("value", math.nan))]
    return sorted(out)


def plot_metrics(metrics_path: str | Path, out_path: str | Path) -> None:
    """Loss (train, and held-out where the run was evaluated) and learning rate against step, as a
    PNG."""
    rows = [r for r in read_jsonl(metrics_path) if "loss" in r and math.isfinite(r["loss"])]
    if not rows:
        return
    fig, (ax1, ax2) = figure(1, 2, figsize=(9, 3.2))
    ax1.plot([r["step"] for r in rows], [r["loss"] for r in rows], label="train")
    held = held_out_loss(Path(metrics_path).parent)
    if held:
        ax1.plot(*zip(*held), "o-", color="tab:red", label="held out (test split)")
        ax1.legend()
    ax1.set(xlabel="step", ylabel="loss", title="loss")
    ax2.plot([r["step"] for r in rows], [r["lr"] for r in rows], color="tab:orange")
    ax2.set(xlabel="step", ylabel="learning rate", title="schedule")
    save_figure(fig, out_path, dpi=100)
