"""Populations of sparse autoencoders: members that differ in their sparsity weights (l1, l0, AuxK),
learning rate, seed or ``method.k`` train vmapped in one compiled step, each equal to its separate
run (its projection, dead-latent counters and batch statistics its own); ``method.latents`` and
the other shape-changing keys are refused in one line naming the sweep to run instead."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import sae_config as shared_sae_config

from repr_jax.config import ConfigError
from repr_jax.objectives import sae as S
from repr_jax.scaling import Sweep
from repr_jax.train import train_and_evaluate
from repr_jax.train.population import (member, member_differences, members_per_chunk,
                                       population_base, train_population)


def sae_config(*sets, steps=8):
    """A TopK SAE of 48 latents on latent_classes' 32-wide vectors, 8 steps of 32."""
    return shared_sae_config("method.latents=48", "method.dead_feature_window=2",
                             "method.scale_inputs=True", *sets, steps=steps, examples=1000,
                             batch_size=32, warmup=2, log_every=2, bootstrap=0)


def _members(values, *common):
    return [sae_config(*common, *(f"{k}={v!r}" for k, v in m.items())) for m in values]


def assert_members_are_their_runs(pop, configs, tmp_path, which):
    for i in which:
        solo = train_and_evaluate(configs[i], tmp_path / f"solo{i}", progress=False,
                                  verbose=False)
        for part in ("params", "batch_stats", "extra"):
            chex.assert_trees_all_close(member(getattr(pop["state"], part), i),
                                        getattr(solo["state"], part), atol=1e-5, rtol=1e-5)
        ours = {(r["evaluator"], r["metric"]): r["value"]
                for r in pop["eval_rows"][pop["names"][i]]}
        theirs = {(r["evaluator"], r["metric"]): r["value"] for r in solo["eval_rows"]}
        assert ours.keys() == theirs.keys() and ("sae", "fvu") in ours
        for k in ours:
            assert ours[k] == pytest.approx(theirs[k], rel=1e-4, abs=1e-5), k


@pytest.mark.slow
@pytest.mark.parametrize("activation, values, common, shared", [
    # the projection (unit decoder rows, folded into the encoder) runs on each member's params
    ("relu", [{"method.l1_coefficient": 0.01}, {"method.l1_coefficient": 0.1, "optim.lr": 1e-2}],
     ["method.normalize_decoder=True"], True),
    # JumpReLU's threshold clamp; per-member batches: the second member's seed is its own
    ("jumprelu", [{"method.l0_coefficient": 0.01},
                  {"method.l0_coefficient": 0.1, "seed": 3, "optim.lr": 1e-2}], [], False),
    # AuxK on each member's own dead latents (forward_passes_since_fired per member)
    ("topk", [{"method.aux_k_coefficient": 1.0},
              {"method.aux_k_coefficient": 1 / 32, "optim.lr": 1e-2}], [], True),
    # and the running BatchTopK threshold in each member's batch_stats
    ("batchtopk", [{"method.aux_k_coefficient": 1.0},
                   {"method.aux_k_coefficient": 1 / 32, "optim.lr": 1e-2}], [], True),
])
def test_sparsity_weight_members_equal_their_separate_runs(tmp_path, activation, values, common,
                                                           shared):
    configs = _members(values, f"method.activation={activation}", *common,
                       "train.population_chunk=2")
    assert members_per_chunk(configs[0]) == 2  # vmapped together (on CPU the default maps them)
    pop = train_population(configs, tmp_path / "pop", shared_batches=shared, progress=False)
    assert pop["diverged"] == {}
    assert_members_are_their_runs(pop, configs, tmp_path, range(len(configs)) if shared else [1])


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["topk", "batchtopk"])
def test_k_members_share_one_step_and_equal_their_separate_runs(tmp_path, activation):
    """``method.k`` is a hyper leaf: the population's ``lax.top_k`` is sized by its largest k (the
    first member's is not), each member keeps its own (TopK records it in batch_stats, so its
    evaluation does too)."""
    configs = _members([{"method.k": k} for k in (2, 8, 5)], f"method.activation={activation}",
                       "train.population_chunk=3")  # vmapped together
    assert member_differences(configs) == ["method.k"]
    assert population_base(configs).method.k == 8
    pop = train_population(configs, tmp_path / "pop", progress=False)
    if activation == "topk":
        np.testing.assert_array_equal(pop["state"].batch_stats["k"], [2, 8, 5])
        l0 = [next(r["value"] for r in pop["eval_rows"][n] if r["metric"] == "l0")
              for n in pop["names"]]
        np.testing.assert_allclose(l0, [2, 8, 5])
    assert_members_are_their_runs(pop, configs, tmp_path, [0, 2])


def test_a_traced_k_under_its_bound_keeps_the_static_ks_latents():
    """One program for several k: the k largest of the k_max largest are top_k(k)'s own, ties
    included; vmapped over k, each row of the result is the static call's."""
    pre_BxL = jnp.array([[3.0, -1.0, 2.0, 2.0, 0.5, 2.0], [1.0, 1.0, 1.0, -2.0, 1.0, 0.0]])
    ks = jnp.array([1, 2, 3, 4])
    for fn in (S.topk_activation, S.batchtopk_activation):
        vmapped = jax.vmap(lambda k: fn(pre_BxL, k, k_max=5))(ks)  # noqa: B023
        for k, z in zip(ks.tolist(), vmapped):
            np.testing.assert_array_equal(z, fn(pre_BxL, k))
    params = S.init_sae(jax.random.PRNGKey(0), 6, 12, activation="topk")
    x_BxD = jax.random.normal(jax.random.PRNGKey(1), (4, 6))
    with pytest.raises(ValueError, match="a traced k needs a static bound k_max"):
        jax.jit(lambda k: S.encode(params, x_BxD, activation="topk", k=k))(2)
    with pytest.raises(ValueError, match="needs 0 < k <= k_max; got k=6, k_max=5"):
        S.encode(params, x_BxD, activation="topk", k=6, k_max=5)


@pytest.mark.parametrize("key, values, why", [
    ("method.latents", (48, 96),
     r"method.latents changes the SAE's parameter shapes \(W_enc \[D, L\], W_dec \[L, D\]\)"),
    ("method.expansion", (4, 8),
     r"method.expansion changes the SAE's parameter shapes \(L = expansion x D\)"),
    ("method.activation", ("topk", "jumprelu"), r"method.activation changes the SAE's function"),
])
def test_shape_changing_keys_are_refused_naming_the_sweep(key, values, why):
    base = ["method.latents=0"] if key == "method.expansion" else []
    configs = _members([{key: v, "method.aux_k_coefficient": c}
                        for v, c in zip(values, (1.0, 0.5))], *base)
    with pytest.raises(ConfigError) as e:
        member_differences(configs)
    listed = ", ".join(f'"{v}"' if isinstance(v, str) else repr(v) for v in values)
    assert "\n" not in str(e.value)
    assert e.match(f"^{why}")
    assert str(e.value).endswith(
        f"so population members that differ in it cannot share one compiled step; train them "
        f"as a sweep: repr-jax sweep --config EXPERIMENT --grid '{key}=[{listed}]' (not "
        f"--population; in a sweep file, a grid key outside population=(...))")


def test_a_sweep_grids_latents_and_trains_each_width_s_ks_as_one_population():
    """What the refusal points to: latents a grid key, k (and the λs) the population."""
    sweep = Sweep(sae_config(), grid={"method.latents": [48, 96], "method.k": [2, 4, 8]},
                  population=("method.k",))
    runs = [p.run for p in sweep.points()]
    assert runs[:3] == ["latents=48/members/k=2", "latents=48/members/k=4",
                        "latents=48/members/k=8"]
    assert {r.split("/")[0] for r in runs} == {"latents=48", "latents=96"}
    with pytest.raises(ConfigError, match=r"^method.latents changes the SAE's parameter shapes"):
        Sweep(sae_config(), grid={"method.latents": [48, 96]},
              population=("method.latents",)).points()


def test_the_command_line_takes_population_axes(capsys):
    """``repr-jax sweep --grid ... --population ...``: the same sweep as the file's, and a
    shape-changing --population axis is the one-line refusal."""
    from repr_jax.scaling.sweep import grid_sweep
    sweep = grid_sweep("simclr_mnist1d", ["method.temperature=[0.1, 0.2]"],
                       ["optim.lr=[1e-3, 3e-3]"])
    assert sweep.population == ("optim.lr",)
    assert sorted(p.run for p in sweep.points()) == [
        "temperature=0.1/members/lr=0.001", "temperature=0.1/members/lr=0.003",
        "temperature=0.2/members/lr=0.001", "temperature=0.2/members/lr=0.003"]
    from repr_jax import cli
    code = cli.main(["sweep", "--config", "simclr_mnist1d", "--set", "method.name=sae",
                     "--set", "data.views.shift=0", "--set", "method.k=8", "--population",
                     "method.latents=[64, 128]", "--workdir", "/nonexistent/never", "--dry-run",
                     "--no-timing"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("repr-jax: error: method.latents changes the SAE's parameter "
                             "shapes") and "(not --population;" in err[0]
