"""Populations: each member of a population (trained member after member in one step, or vmapped)
equals its separate run; members may differ only in seed and numeric hyperparameters; the population
checkpoints and resumes as one; the im2col convolution vmapped members use equals XLA's, and the
convolution whose gradient is written channels-last equals lax's."""

import json
import re

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.config import ConfigError, EvalConfig, override
from repr_jax.encoders.cnn import CNN
from repr_jax.encoders.layers import conv
from repr_jax.train import train_and_evaluate
from repr_jax.train.population import (member, member_differences, members_per_chunk,
                                      train_population)

from conftest import tiny_config

EVAL = EvalConfig(evaluators=("knn",), bootstrap=0, reference_rows=False)


@pytest.mark.parametrize("shape, kernel", [((3, 40), 5), ((2, 8, 8, 2), 2)])
def test_im2col_convolution_equals_xla_convolution(shape, kernel):
    x = jax.random.normal(jax.random.PRNGKey(1), shape)
    xla = CNN(widths=(4, 6), kernel_size=kernel, norm="layer")
    patches = CNN(widths=(4, 6), kernel_size=kernel, norm="layer", im2col=True)
    variables = xla.init(jax.random.PRNGKey(0), x)
    chex.assert_trees_all_equal(variables, patches.init(jax.random.PRNGKey(0), x))
    np.testing.assert_allclose(patches.apply(variables, x)[0], xla.apply(variables, x)[0],
                               atol=1e-5)


@pytest.mark.parametrize("shape, window, padding", [
    ((3, 17, 2), (5,), "SAME"), ((2, 9, 7, 3), (3, 2), "SAME"), ((2, 9, 7, 3), (3, 3), "VALID"),
    ((3, 12, 2), (5,), ((1, 3),))])
def test_channels_last_gradient_convolution_equals_lax(shape, window, padding):
    """layers.conv (the CNN's) has lax's values and gradients (second order too), and inside a
    loop its gradient compiles to channels-last convolutions only — the layout XLA's CPU backend
    runs with its fast kernel (lax's own kernel gradient there is `f0b_i0o->0bf`, a naive loop)."""
    x = jax.random.normal(jax.random.PRNGKey(0), shape)
    ours = nn.Conv(5, window, padding=padding, conv_general_dilated=conv)
    lax_conv = nn.Conv(5, window, padding=padding)
    variables = lax_conv.init(jax.random.PRNGKey(1), x)

    def loss(module):
        return lambda v, x: (jnp.sin(module.apply(v, x)) ** 2).sum()
    np.testing.assert_allclose(ours.apply(variables, x), lax_conv.apply(variables, x), atol=1e-6)
    chex.assert_trees_all_close(jax.grad(loss(ours), argnums=(0, 1))(variables, x),
                                jax.grad(loss(lax_conv), argnums=(0, 1))(variables, x),
                                atol=1e-5, rtol=1e-5)
    chex.assert_trees_all_close(
        jax.grad(lambda v: (jax.grad(loss(ours), argnums=1)(v, x) ** 2).sum())(variables),
        jax.grad(lambda v: (jax.grad(loss(lax_conv), argnums=1)(v, x) ** 2).sum())(variables),
        atol=1e-4, rtol=1e-4)

    stacked = jax.tree.map(lambda a: jnp.stack([a, 2 * a]), variables)
    looped = jax.jit(lambda vs, x: jax.lax.map(lambda v: jax.grad(loss(ours))(v, x), vs))
    hlo = looped.lower(stacked, x).compile().as_text()
    labels = set(re.findall(r"dim_labels=([\w>-]+)", hlo))
    spatial = "".join(map(str, range(len(window))))
    assert labels == {f"b{spatial}f_{spatial}io->b{spatial}f"}, labels


def _members(base, values, *common):
    return [override(base, [*common, *(f"{k}={v!r}" for k, v in m.items())]) for m in values]


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
