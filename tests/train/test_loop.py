"""The one loop: checks before compiling, bitwise resume, the NaN policy, workdir safety."""

import json

import chex
import jax
import numpy as np
import pytest
from conftest import Crash, FaultyStream, tiny_config

from repr_jax import config as C
from repr_jax.config import ConfigError
from repr_jax.train import (Checkpointer, TrainingDiverged, build_method, init_state, make_mesh,
                            sample_batch, train_and_evaluate)


def test_uneven_batch_fails_before_compiling(tmp_path):
    cfg = tiny_config(train=C.TrainConfig(batch_size=30, steps=2, num_devices=8))
    with pytest.raises(ConfigError, match="batch_size=30 is not divisible by the 8 devices"):
        train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_resume_is_bitwise_identical(tmp_path, mnist1d_small):
    cfg = tiny_config()
    full = train_and_evaluate(cfg, tmp_path / "full", progress=False, verbose=False,
                              dataset=mnist1d_small)
    crashy = FaultyStream(mnist1d_small.splits["train"], batch_size=32, seed=0, fault="crash",
                          at_step=4)
    with pytest.raises(Crash):  # dies after the checkpoint at step 3
        train_and_evaluate(cfg, tmp_path / "resumed", progress=False, verbose=False,
                           dataset=mnist1d_small, stream=crashy)
    resumed = train_and_evaluate(cfg, tmp_path / "resumed", progress=False, verbose=False,
                                 dataset=mnist1d_small)
    a, b = jax.device_get(full["state"]), jax.device_get(resumed["state"])
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)  # bitwise
    # metrics.jsonl holds each step once, and the same numbers as the uninterrupted run.
    rows = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").open()]
    full_rows = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert [r["loss"] for r in rows] == [r["loss"] for r in full_rows]
    assert (tmp_path / "resumed" / "plots" / "loss.png").exists()
    assert {r["representation"] for r in resumed["eval_rows"]} == {
        "raw inputs", "random-init encoder", "simclr encoder"}


@pytest.mark.slow
def test_nan_stops_with_step_and_keeps_last_good_checkpoint(tmp_path, mnist1d_small):
    cfg = tiny_config(train=C.TrainConfig(batch_size=32, steps=8, ckpt_every=2, log_every=1,
                                          num_devices=1))
    poisoned = FaultyStream(mnist1d_small.splits["train"], batch_size=32, seed=0, fault="nan",
                            at_step=5)
    with pytest.raises(TrainingDiverged, match=r"at step 5.*checkpoint \(step 4\).*intact"):
        train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False,
                           dataset=mnist1d_small, stream=poisoned)
    mesh = make_mesh(1)
    method = build_method(cfg, mnist1d_small)
    like = init_state(cfg, method, sample_batch(mnist1d_small), mesh)
    ckpt = Checkpointer(tmp_path / "run" / "checkpoints")
    assert ckpt.latest_step() == 4
    restored = ckpt.restore(like)
    ckpt.close()
    assert int(restored.step) == 4
    chex.assert_tree_all_finite(restored.params)


@pytest.mark.slow
def test_a_poisoned_state_is_never_kept_as_the_last_good_checkpoint(tmp_path, mnist1d_small):
    """lr=1e30: the step-2 parameters are finite (about 1e28) but give a NaN loss; that checkpoint
    is moved aside, and the message names the last one that is truly finite."""
    cfg = C.override(tiny_config(), ["optim.lr=1e30", "optim.warmup_steps=0",
                                     "train.ckpt_every=1", "train.steps=8"])
    with pytest.raises(TrainingDiverged) as e:
        train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False,
                           dataset=mnist1d_small)
    msg = str(e.value)
    assert "training stopped. Moved aside the checkpoints of steps" in msg, msg
    poisoned = sorted(int(p.name) for p in (tmp_path / "run" / "checkpoints.nonfinite").iterdir())
    kept = Checkpointer(tmp_path / "run" / "checkpoints").all_steps()
    assert poisoned and (not kept or max(kept) < min(poisoned))
    assert (f"last good checkpoint (step {max(kept)})" in msg) if kept else (
        "No finite checkpoint" in msg)
    like = init_state(cfg, build_method(cfg, mnist1d_small), sample_batch(mnist1d_small),
                      make_mesh(1))
    for step in kept:  # every checkpoint left gives a finite loss
        ckpt = Checkpointer(tmp_path / "run" / "checkpoints")
        chex.assert_tree_all_finite(ckpt.restore(like, step).params)
        ckpt.close()


@pytest.mark.slow
def test_eval_refuses_a_checkpoint_whose_parameters_are_not_finite(tmp_path, mnist1d_small):
    from repr_jax.train import evaluate_workdir, load_trained
    cfg = tiny_config(train=C.TrainConfig(batch_size=32, steps=2, ckpt_every=0, num_devices=1),
                      eval=C.EvalConfig(evaluators=("knn",)))
    train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False,
                       dataset=mnist1d_small)
    before = (tmp_path / "run" / "eval" / "step_2.json").read_text()
    state = load_trained(tmp_path / "run")[3]
    ckpt = Checkpointer(tmp_path / "run" / "checkpoints")
    bad = state.replace(step=state.step + 1,
                        params=jax.tree.map(lambda x: x * np.inf, state.params))
    assert ckpt.save(bad, require_finite=False)  # as an older version could have written it
    ckpt.close()
    with pytest.raises(ConfigError, match=r"checkpoint at step 3 are not finite; not used"):
        evaluate_workdir(tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "eval" / "step_2.json").read_text() == before
    assert not (tmp_path / "run" / "eval" / "step_3.json").exists()


@pytest.mark.slow
def test_a_population_stops_when_every_member_has_diverged(tmp_path):
    """The same NaN policy for populations: the loop stops once no member is finite."""
    from repr_jax.train.population import train_population
    configs = [C.override(tiny_config(), [f"optim.lr={lr}", "train.ckpt_every=0"])
               for lr in (1e30, 1e31)]
    with pytest.raises(TrainingDiverged, match="at step .*training stopped. No finite checkpoint"):
        train_population(configs, tmp_path / "pop", progress=False)


@pytest.mark.slow
def test_workdir_with_other_config_is_refused(tmp_path, mnist1d_small):
    cfg = tiny_config(train=C.TrainConfig(batch_size=32, steps=2, num_devices=1))
    train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False, dataset=mnist1d_small)
    with pytest.raises(ConfigError, match=r"different config \(optim.lr: 0.001 -> 0.01\)"):
        train_and_evaluate(C.override(cfg, ["optim.lr=0.01"]), tmp_path / "run",
                           progress=False, verbose=False, dataset=mnist1d_small)


@pytest.mark.slow
def test_supervised_method_trains_on_digits(tmp_path):
    cfg = C.override(tiny_config(), [
        "data.name=digits", "data.views.shift=0", "data.views.mask=0.0",
        "data.views.crop_pad=1", "method.name=supervised", "optim.lr=0.01", "train.steps=30",
        "train.ckpt_every=0", "train.log_every=10"])
    out = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    acc = {(r["representation"], r["evaluator"]): r["value"] for r in out["eval_rows"]}
    assert acc["supervised encoder", "linear_probe"] > 0.8


@pytest.mark.slow
def test_training_says_so_when_no_checkpoint_verifies_before_starting_over(tmp_path, capfd,
                                                                           mnist1d_small):
    """Every checkpoint damaged: `repr-jax eval` moves them aside and says so; the next train
    then starts from step 0 and says that too, in one line, before training."""
    from repr_jax.train import evaluate_workdir
    from repr_jax.train.checkpoint import NoVerifiedCheckpoint
    cfg = tiny_config(train=C.TrainConfig(batch_size=32, steps=2, ckpt_every=1, num_devices=1),
                      eval=C.EvalConfig(evaluators=("knn",), reference_rows=False, bootstrap=0))
    run = tmp_path / "run"
    train_and_evaluate(cfg, run, progress=False, verbose=False, dataset=mnist1d_small)
    for step in (run / "checkpoints").iterdir():
        if step.name.isdigit():
            (step / "state" / "_METADATA").unlink()
    with pytest.raises(NoVerifiedCheckpoint):
        evaluate_workdir(run, progress=False)
    capfd.readouterr()
    train_and_evaluate(cfg, run, progress=False, verbose=False, dataset=mnist1d_small)
    err = [line for line in capfd.readouterr().err.splitlines() if "starts again" in line]
    assert len(err) == 1 and "no checkpoint in" in err[0] and "checkpoints.damaged" in err[0]
