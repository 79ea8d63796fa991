"""Run writers: metrics.jsonl, TensorBoard event files (read back with TensorBoard's own reader)
and W&B offline runs, on a fresh run and a resumed one."""

import shutil
import subprocess
import sys

import numpy as np
import pytest

from repr_jax import config as config_lib
from repr_jax import files
from repr_jax.train.log import read_jsonl
from repr_jax.train.writers import RunLog

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def _events(logdir):
    ea = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "images": 0})
    ea.Reload()
    return ea


def _scalars(ea, tag):
    return [(e.step, e.value) for e in ea.Scalars(tag)]


def _assert_tensorboard_equals_jsonl(run_dir):
    ea, rows = _events(run_dir), read_jsonl(run_dir / "metrics.jsonl")
    keys = [k for k in rows[0] if k != "step"]
    assert keys and set(f"train/{k}" for k in keys) <= set(ea.Tags()["scalars"])
    for k in keys:
        got = _scalars(ea, f"train/{k}")
        assert [s for s, _ in got] == [r["step"] for r in rows], k  # step for step, no repeats
        np.testing.assert_allclose([v for _, v in got], [r[k] for r in rows], rtol=1e-6,
                                   err_msg=k)  # event files hold float32


def test_scalars_evaluation_rows_and_hparams_reach_tensorboard(tmp_path):
    log = RunLog(tmp_path, config_lib.Config().log, resume_step=0, lead=True,
                 hparams={"optim.lr": 1e-3, "encoder.widths": (8, 16), "seed": 0},
                 trained="simclr encoder")
    for step in (10, 20):
        log.train(step, {"loss": 1.0 / step, "lr": 0.1})
    log.finish(20, [
        dict(step=20, representation="simclr encoder", evaluator="knn", metric="accuracy",
             value=0.75, ci_low=0.7, ci_high=0.8),
        dict(step=20, representation="simclr encoder", evaluator="sts", metric="error",
             value=float("nan"), error="boom"),
        dict(step=0, representation="raw inputs", evaluator="knn", metric="accuracy", value=0.5)])
    log.close()
    _assert_tensorboard_equals_jsonl(tmp_path)
    ea = _events(tmp_path)
    assert _scalars(ea, "eval/knn/accuracy") == [(20, 0.75)]
    assert [v for _, v in _scalars(ea, "eval/knn/accuracy/ci_low")] == [pytest.approx(0.7)]
    assert _scalars(ea, "reference/raw_inputs/knn/accuracy") == [(0, 0.5)]
    assert not any("sts" in t for t in ea.Tags()["scalars"])  # a failed evaluator has no value
    hparams = ea.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(hparams)
    assert b"optim.lr" in hparams["_hparams_/session_start_info"]
    assert b"eval/knn/accuracy" in hparams["_hparams_/experiment"]  # the metric to compare by


@pytest.mark.slow
def test_tensorboard_logging_does_not_import_torch(tmp_path):
    """tensorboardX would import an installed torch (~1 s, ~180 MB) for nothing repr_jax uses."""
    probe = ("import sys; from repr_jax.train.writers import TensorBoardWriter; "
             f"w = TensorBoardWriter({str(tmp_path)!r}); w.write_scalars(1, {{'a': 1.0}}); "
             "w.close(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "False"
    assert len(_scalars(_events(tmp_path), "a")) == 1


def test_only_the_lead_process_writes_beside_the_jsonl(tmp_path):
    log = RunLog(tmp_path, config_lib.Config().log, resume_step=0, lead=False, hparams={},
                 trained="x")
    assert log.writers == []
    log.close()
    assert not list(tmp_path.glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_a_resumed_run_continues_its_tensorboard_and_wandb_logs_without_repeats(tmp_path):
    """A run killed after its step-20 checkpoint (its later logs already written) resumes: the
    event files read back equal metrics.jsonl step for step, and W&B continues the same run id."""
    pytest.importorskip("wandb")
    from repr_jax.train import train_and_evaluate
    cfg = config_lib.override(config_lib.load("simclr_mnist1d"), [
        "encoder.name='mlp'", "encoder.widths=(32,)", "train.steps=40", "train.batch_size=64",
        "train.log_every=5", "train.ckpt_every=20", "train.eval_every=20", "eval.bootstrap=20",
        "eval.evaluators=('knn',)", "eval.reference_rows=False", "log.wandb='repr_jax_test'"])
    run = tmp_path / "run"
    train_and_evaluate(cfg, run, progress=False, verbose=False)
    first = _scalars(_events(run), "train/loss")
    shutil.rmtree(run / "checkpoints" / "40")  # as if killed between its logs and this save
    train_and_evaluate(cfg, run, progress=False, verbose=False)
    _assert_tensorboard_equals_jsonl(run)
    assert len(list(run.glob("events.out.tfevents.*"))) == 2  # the first run's, the resumed one's
    assert _scalars(_events(run), "train/loss") == first  # deterministic, and nothing twice
    assert [s for s, _ in _scalars(_events(run), "eval/knn/accuracy")] == [20, 40]

    # repr-jax eval adds its rows to the same logs, leaving the training rows as they were.
    from repr_jax.train import evaluate_workdir
    evaluate_workdir(run, overrides=["eval.evaluators=('linear_probe',)"], progress=False)
    _assert_tensorboard_equals_jsonl(run)
    assert [s for s, _ in _scalars(_events(run), "eval/linear_probe/accuracy")] == [40]

    run_id = files.read_json(run / "wandb.json")["id"]
    offline = sorted((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 3 and all(d.name.endswith(f"-{run_id}") for d in offline)
    assert all((d / f"run-{run_id}.wandb").stat().st_size > 0 for d in offline)
    listed = subprocess.run([sys.executable, "-m", "wandb", "sync", "--dry-run"], cwd=run,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and f"run-{run_id}.wandb" in listed.stdout + listed.stderr
