"""Run outputs: metrics.jsonl on resume, the evaluation table, and the loss plot."""

import json
import math

from conftest import assert_readable_ticks, tick_labels
from repr_jax.train.log import (figure, format_rows, format_table, log_axis, plain_number,
                                plot_metrics, read_jsonl, setting_points, short_count)
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


def test_plain_numbers_and_short_counts():
    assert [plain_number(v) for v in (0.005, 4.8, 20000, 3e12, 1.5e-5, 1.9999999e12, 0)] == [
        "0.005", "4.8", "20000", "3e12", "1.5e-5", "2e12", "0"]
    assert [short_count(v) for v in (999, 3100, 180000, 2.5e6)] == ["999", "3.1k", "180k", "2.5M"]


def test_log_axes_have_plain_labels_that_do_not_overlap_at_any_span():
    import numpy as np
    for lo, hi in ((4.6, 5.3), (0.02, 0.5), (1e11, 5e13), (3e8, 2e17)):
        fig, ax = figure(figsize=(6, 4))
        ax.plot(np.geomspace(lo, hi, 20), np.geomspace(lo, hi, 20))
        log_axis(ax, "x")
        log_axis(ax, "y")
        assert_readable_ticks(fig, ax.xaxis)
        assert_readable_ticks(fig, ax.yaxis)


def test_setting_columns_keep_their_labels_apart():
    fig, ax = figure(figsize=(7, 4))
    labels = [f"binary\n+rescore ×{m}\n16 B" for m in (2, 4, 10)] + ["float32\n512 B"] * 4
    setting_points(ax, labels, {"a": [{"value": i} for i in range(7)],
                                "b": [None] + [{"value": i, "ci_low": i - 1, "ci_high": i + 1}
                                               for i in range(6)]})
    assert_readable_ticks(fig, ax.xaxis, min_labels=7)
    assert [t for t, _ in tick_labels(fig, ax.xaxis)] == labels
