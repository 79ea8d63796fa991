"""Run outputs: metrics.jsonl on resume, the evaluation table, and the loss plot."""

import json
import math

from repr_jax.train.log import format_rows, format_table, plot_metrics, read_jsonl
from repr_jax.train.writers import JsonlWriter


def test_metrics_writer_drops_rows_past_the_resumed_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    writer = JsonlWriter(path)
    for step in (1, 2, 3, 4):
        writer.write_scalars(step, {"loss": 1.0 / step})
    JsonlWriter(path, resume_step=2).write_scalars(3, {"loss": 0.5})
    assert [(r["step"], r["loss"]) for r in read_jsonl(path)] == [(1, 1.0), (2, 0.5), (3, 0.5)]


def test_table_has_a_column_per_representation_with_intervals_and_failures():
    rows = [dict(representation="raw", evaluator="knn", metric="accuracy", value=0.5,
                 ci_low=0.4, ci_high=0.6),
            dict(representation="enc", evaluator="knn", metric="accuracy", value=0.9),
            dict(representation="enc", evaluator="sts", metric="error", value=math.nan,
                 error="boom")]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["metric", "raw", "enc"]
    assert lines[1].split() == ["knn/accuracy", "0.5000", "±0.1000", "0.9000"]
    assert "failed (see error)" in lines[2] and lines[2].split()[1] == "-"
    assert format_table([]) == "(no evaluation rows)"


def test_rows_align_and_round_floats():
    text = format_rows([{"a": 1.23456, "b": "x"}, {"a": None, "b": "long"}])
    assert text.splitlines() == ["    a     b", "1.235     x", "       long"]


def test_loss_plot_is_written(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 2.0 / s, "lr": 1e-3}) + "\n"
                            for s in range(1, 6)))
    plot_metrics(path, tmp_path / "plots" / "loss.png")
    assert (tmp_path / "plots" / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_loss_plot_draws_the_held_out_loss_of_each_evaluation(tmp_path, monkeypatch):
    import pytest

    from repr_jax.train import log
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 2.0 / s, "lr": 1e-3}) + "\n"
                            for s in range(1, 11)))
    (tmp_path / "eval").mkdir()
    for step, value in ((5, 0.6), (10, 0.4)):
        (tmp_path / "eval" / f"step_{step}.json").write_text(json.dumps([
            dict(step=step, representation="enc", evaluator="upstream", metric="loss",
                 value=value),
            dict(step=step, representation="enc", evaluator="knn", metric="accuracy", value=0.9)]))
    (tmp_path / "eval" / "step_7.json").write_text("[{")  # damaged: warned about, left out
    drawn = {}
    real_save = log.save_figure

    def capture(fig, out, **kw):
        drawn["lines"] = [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()))
                          for line in fig.axes[0].get_lines()]
        return real_save(fig, out, **kw)
    monkeypatch.setattr(log, "save_figure", capture)
    with pytest.warns(UserWarning, match="step_7.json"):
        plot_metrics(path, tmp_path / "plots" / "loss.png")
    assert [label for label, _, _ in drawn["lines"]] == ["train", "held out (test split)"]
    assert drawn["lines"][1][1:] == ([5, 10], [0.6, 0.4])
