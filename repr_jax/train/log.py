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


def format_table(rows: Iterable[dict[str, Any]]) -> str:
    """Rows ``{representation, evaluator, metric, value[, ci_low, ci_high]}`` as a table: one line
    per ``evaluator/metric``, one column per representation; ``0.9245 ±0.0052`` shows the half-width
    of a bootstrap interval."""
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
                    _errorbar(ax, [int(h.removeprefix("dim_")) for h, _ in points],
                              [r for _, r in points], label=rep)
                    ax.set_xscale("log", base=2)
            ax.set(xlabel=xlabel, ylabel=metric, title=f"{evaluator}: {metric}")
            ax.legend(fontsize=7)
        save(fig, f"{evaluator}.png")

    quant = [r for r in rows if r["evaluator"] == "quantization"]
    if quant:
        tasks = sorted({r["metric"].rpartition("/")[0].rpartition("/")[0] for r in quant})
        fig, axes = figure(1, len(tasks), figsize=(4.8 * len(tasks), 3.6), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            prefix = f"{task}/" if task else ""
            for rep in dict.fromkeys(r["representation"] for r in quant):
                mine = {r["metric"]: r for r in quant if r["representation"] == rep}
                points = []
                for name, r in mine.items():
                    head, _, metric = name.rpartition("/")
                    if head.startswith(prefix) and metric != "bytes" and "/" not in head[len(prefix):]:
                        points.append((mine[f"{head}/bytes"]["value"], r, head[len(prefix):], metric))
                points.sort(key=lambda p: (p[0], p[1]["value"]))
                if not points:
                    continue
                _errorbar(ax, [p[0] for p in points], [p[1] for p in points], label=rep)
                for b, r, label, _ in points:
                    ax.annotate(label, (b, r["value"]), fontsize=6, xytext=(3, 3),
                                textcoords="offset points")
                ax.set(xscale="log", xlabel="bytes per vector", ylabel=points[0][3],
                       title=f"quantization {task or 'test pairs'}")
            ax.legend(fontsize=7)
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
