"""Populations: each member of a population (trained member after member in one step, or vmapped)
equals its separate run; members may differ only in seed and numeric hyperparameters; the population
checkpoints and resumes as one."""

import json

import chex
import jax
import numpy as np
import pytest

from repr_jax.config import ConfigError, EvalConfig, override
from repr_jax.train import train_and_evaluate
from repr_jax.train.population import (member, member_differences, members_per_chunk,
                                      train_population)

from conftest import tiny_config

EVAL = EvalConfig(evaluators=("knn",), bootstrap=0, reference_rows=False)


def _members(base, values, *common):
    return [override(base, [*common, *(f"{k}={v!r}" for k, v in m.items())]) for m in values]


@pytest.mark.slow
@pytest.mark.parametrize("shared, chunk", [(True, 0), (False, 2)])
def test_each_member_equals_its_separate_run(tmp_path, shared, chunk):
    """Shared batches, members one after another (train.population_chunk=0: auto, the CNN on
    CPU): members differ in learning rate and temperature (same seed, so the same data order as
    their separate runs); per-member batches, vmapped together (chunk 2): they differ in seed too
    (the second member, whose seed is not the first's, is checked)."""
    base = tiny_config(eval=EVAL)
    values = ([{"optim.lr": 1e-3, "method.temperature": 0.5},
               {"optim.lr": 3e-3, "method.temperature": 0.2}] if shared else
              [{"seed": 0, "optim.lr": 1e-3}, {"seed": 5, "optim.lr": 2e-3}])
    configs = _members(base, values, f"train.population_chunk={chunk}")
    assert members_per_chunk(configs[0]) == (1 if shared else 2)
    pop = train_population(configs, tmp_path / "pop", shared_batches=shared, progress=False)
    assert pop["diverged"] == {}
    for i, cfg in enumerate(configs if shared else configs[1:], start=0 if shared else 1):
        # The separate run, as `repr-jax train`, with the population's convolution (vmapped
        # members: patch matmuls).
        solo = train_and_evaluate(cfg if shared else override(cfg, ["encoder.conv=im2col"]),
                                  tmp_path / f"solo{i}", progress=False, verbose=False)
        chex.assert_trees_all_close(member(pop["state"].params, i), solo["state"].params,
                                    atol=1e-5, rtol=1e-5)
        chex.assert_trees_all_close(member(pop["state"].batch_stats, i),
                                    solo["state"].batch_stats, atol=1e-5, rtol=1e-5)
        name = pop["names"][i]
        ours = {(r["evaluator"], r["metric"]): r["value"] for r in pop["eval_rows"][name]}
        theirs = {(r["evaluator"], r["metric"]): r["value"] for r in solo["eval_rows"]}
        assert ours.keys() == theirs.keys()
        for k in ours:
            assert ours[k] == pytest.approx(theirs[k], rel=1e-4, abs=1e-4), k
        saved = json.loads((tmp_path / "pop" / "members" / name / "config.json").read_text())
        assert saved["optim"]["lr"] == cfg.optim.lr


def test_members_may_not_differ_structurally():
    base = tiny_config()
    assert member_differences(_members(base, [{"seed": 0}, {"seed": 1, "optim.lr": 0.1}])) == [
        "optim.lr", "seed"]
    with pytest.raises(ConfigError, match="differ in encoder.widths"):
        member_differences(_members(base, [{}, {"encoder.widths": (4, 8)}]))
    with pytest.raises(ConfigError, match="differ in train.batch_size"):
        member_differences(_members(base, [{}, {"train.batch_size": 64}]))


@pytest.mark.slow
def test_population_resumes_and_records_a_diverged_member(tmp_path):
    """A member with a huge learning rate diverges without touching the others; an interrupted
    population resumes from its stacked checkpoint to the uninterrupted result."""
    base = tiny_config(eval=EVAL)
    configs = _members(base, [{"optim.lr": 1e-3}, {"optim.lr": 1e30}])
    whole = train_population(configs, tmp_path / "whole", progress=False)
    assert list(whole["diverged"]) == ["lr=1e+30"] and list(whole["eval_rows"]) == ["lr=0.001"]
    assert np.isfinite(jax.tree.leaves(member(whole["state"].params, 0))[0]).all()

    short = [override(c, ["train.steps=3"]) for c in configs]
    with pytest.raises(ConfigError, match="different config"):
        train_population(short, tmp_path / "whole", progress=False)

    # Interrupted after the step-3 checkpoint: drop the final one, rerun.
    import shutil
    shutil.rmtree(tmp_path / "whole" / "checkpoints" / "6")
    resumed = train_population(configs, tmp_path / "whole", progress=False)
    chex.assert_trees_all_equal(member(resumed["state"].params, 0),
                                member(whole["state"].params, 0))
    steps = [json.loads(line)["step"] for line in
             (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]
