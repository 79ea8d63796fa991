"""Run outputs: metrics.jsonl, evaluation tables (printed and JSON), and the loss plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable


class MetricsWriter:
    """Appends one JSON object per line to ``metrics.jsonl``; a resumed run first drops the rows past
    the restored step, so the file never holds steps the resumed run will log again."""

    def __init__(self, path: str | Path, *, resume_step: int = 0):
        self.path = Path(path)
        if self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, row: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def format_table(rows: Iterable[dict[str, Any]]) -> str:
    """Rows ``{representation, evaluator, metric, value}`` as a table: one line per representation,
    one column per ``evaluator/metric``."""
    rows = list(rows)
    cols = list(dict.fromkeys(f"{r['evaluator']}/{r['metric']}" for r in rows))
    reps = list(dict.fromkeys(r["representation"] for r in rows))
    cell = {(r["representation"], f"{r['evaluator']}/{r['metric']}"): r["value"] for r in rows}
    width = max(len(x) for x in reps + ["representation"])
    lines = ["  ".join(["representation".ljust(width)] + [c.rjust(max(len(c), 8)) for c in cols])]
    for rep in reps:
        vals = [(f"{cell[rep, c]:.4f}" if (rep, c) in cell else "-").rjust(max(len(c), 8))
                for c in cols]
        lines.append("  ".join([rep.ljust(width)] + vals))
    return "\n".join(lines)


def plot_metrics(metrics_path: str | Path, out_path: str | Path) -> None:
    """Loss (and learning rate) against step, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_jsonl(metrics_path) if "loss" in r and math.isfinite(r["loss"])]
    if not rows:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
    ax1.plot([r["step"] for r in rows], [r["loss"] for r in rows])
    ax1.set(xlabel="step", ylabel="train loss", title="loss")
    ax2.plot([r["step"] for r in rows], [r["lr"] for r in rows], color="tab:orange")
    ax2.set(xlabel="step", ylabel="learning rate", title="schedule")
    fig.tight_layout()
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
