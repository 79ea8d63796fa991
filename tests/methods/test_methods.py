"""Every method trains: a few hundred steps on synthetic data lower its loss and give a linear probe
far above chance; method state (EMA teacher, queue) behaves; Matryoshka wrappers; clear errors."""

import dataclasses
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import Crash, FaultyStream

from repr_jax import config as C
from repr_jax import data
from repr_jax.config import ConfigError
from repr_jax.methods import METHODS
from repr_jax.train import (build_method, init_state, make_mesh, sample_batch,
                            train_and_evaluate)

STEPS = 150


def _own(name, options):
    """The options that method ``name``'s config section has."""
    fields = {f.name for f in dataclasses.fields(C.MethodConfig(name=name))}
    return {k: v for k, v in options.items() if k in fields}


def method_config(name, **method_kw):
    dataset = {"clip": "latent_modalities", "siglip": "latent_modalities",
               "biencoder": "latent_modalities", "mlm": "latent_topics"}.get(name, "latent_classes")
    encoder = C.EncoderConfig(name="mlp", widths=(64, 64), norm="layer")
    if name == "mlm":
        encoder = C.EncoderConfig(name="text_transformer", variant="tiny", width=64, num_heads=4,
                                  mlp_dim=128)
    temperature = {"simclr": 0.2, "supcon": 0.1, "moco": 0.1, "biencoder": 0.1}.get(name, 0.5)
    return C.Config(
        seed=0,
        data=C.DataConfig(name=dataset, num_examples=2000,  # token ids (mlm) take no views
                          **({} if name == "mlm" else
                             # mae and sae reconstruct the inputs as they are
                             {"views": C.ViewsConfig(noise=0.0 if name in ("mae", "sae")
                                                     else 0.1)})),
        encoder=encoder,
        method=C.MethodConfig(name=name, **_own(name, dict(
            temperature=temperature, proj_hidden=64, proj_dim=32, pred_hidden=32, queue_size=256,
            patch_size=4, mask_ratio=0.15 if name == "mlm" else 0.75)), **method_kw),
        optim=C.OptimConfig(lr=3e-3, warmup_steps=10, weight_decay=1e-4),
        train=C.TrainConfig(batch_size=64, steps=STEPS, ckpt_every=0, log_every=10,
                            num_devices=1),
        eval=C.EvalConfig(evaluators=("linear_probe",), reference_rows=False))


def _run(cfg, workdir):
    out = train_and_evaluate(cfg, workdir, progress=False, verbose=False)
    losses = [json.loads(line)["loss"] for line in (workdir / "metrics.jsonl").open()]
    acc = next(r["value"] for r in out["eval_rows"] if r["evaluator"] == "linear_probe")
    return out, losses, acc


# The methods that read query/document text together, and mntp (a decoder LLM's head), train end
# to end in their own tests (tests/methods/test_cross_encoder.py, test_colbert.py,
# test_splade.py, test_mntp.py, tests/train/test_second_stage.py).
OWN_TESTS = ("cross_encoder", "colbert", "splade", "mntp")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(METHODS) - set(OWN_TESTS)))
def test_method_lowers_loss_and_beats_chance(tmp_path, name):
    cfg = method_config(name)
    if name == "biencoder":
        cfg = C.override(cfg, ["method.objective=graded_bce"])
    out, losses, acc = _run(cfg, tmp_path / name)
    assert np.isfinite(losses).all()
    assert np.mean(losses[-3:]) < np.mean(losses[:2]), (name, losses)
    assert acc > 0.5, f"{name}: probe accuracy {acc:.3f} (chance 0.1)"


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["info_nce", "kl_distill"])
def test_biencoder_objectives(tmp_path, objective):
    cfg = C.override(method_config("biencoder"), [f"method.objective={objective}"])
    _, losses, acc = _run(cfg, tmp_path / objective)
    assert np.mean(losses[-3:]) < np.mean(losses[:2]) and acc > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("name, extra", [("simclr", []), ("clip", []),
                                         ("simclr", ["method.matryoshka_layers=True"])])
def test_matryoshka_wrappers_train_every_prefix(tmp_path, name, extra):
    cfg = C.override(method_config(name), ["method.matryoshka_dims=(8, 16, 64)"] + extra)
    out, losses, acc = _run(cfg, tmp_path / "run")
    assert np.mean(losses[-3:]) < np.mean(losses[:2]) and acc > 0.5


def test_ema_teacher_and_queue(tmp_path):
    """BYOL's target follows the online network by the EMA rule; MoCo's queue is FIFO."""
    cfg = method_config("moco")
    dataset = data.load("latent_classes", num_examples=2000)
    method = build_method(cfg, dataset)
    mesh = make_mesh(1)
    state = init_state(cfg, method, sample_batch(dataset), mesh)
    chex_equal = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), state.extra["target"],
                              state.params)
    assert all(jax.tree.leaves(chex_equal))  # the teacher starts as a copy
    from repr_jax.train import global_batch, hyperparams, make_step_fn
    step_fn = make_step_fn(cfg, method, mesh, state)
    stream = data.BatchStream(dataset.splits["train"], batch_size=64, seed=0)
    before = jax.device_get(state)
    state, _ = step_fn(state, global_batch(stream.batch(0), mesh), hyperparams(cfg))
    after = jax.device_get(state)
    m = cfg.method.momentum
    expect = jax.tree.map(lambda t, p: m * t + (1 - m) * p, before.extra["target"], after.params)
    for a, b in zip(jax.tree.leaves(after.extra["target"]), jax.tree.leaves(expect)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    q0, q1 = before.extra["queue"], after.extra["queue"]
    np.testing.assert_array_equal(q1[64:], q0[:-64])  # old keys moved back by one batch
    np.testing.assert_allclose(np.linalg.norm(q1[:64], axis=1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_resume_restores_method_state(tmp_path):
    """EMA teacher and queue are checkpointed with the state: resume is still bitwise."""
    cfg = C.override(method_config("moco"), ["train.steps=6", "train.ckpt_every=3"])
    full = train_and_evaluate(cfg, tmp_path / "full", progress=False, verbose=False)
    half = C.override(cfg, ["train.steps=6"])
    # Interrupt after the step-3 checkpoint by making step 4's batch crash.
    ds = data.load("latent_classes", num_examples=2000)
    crashy = FaultyStream(ds.splits["train"], fault="crash", at_step=4, batch_size=64, seed=0)
    with pytest.raises(Crash):
        train_and_evaluate(half, tmp_path / "resumed", progress=False, verbose=False, dataset=ds,
                           stream=crashy)
    resumed = train_and_evaluate(half, tmp_path / "resumed", progress=False, verbose=False)
    for a, b in zip(jax.tree.leaves(jax.device_get(full["state"])),
                    jax.tree.leaves(jax.device_get(resumed["state"]))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("sets, pattern", [
    (["method.name=simsiam", "method.matryoshka_dims=(8,)"],
     "unknown config key 'method.matryoshka_dims'; valid keys in method: .*pred_hidden"),
    (["method.matryoshka_dims=(16, 8)"], "increasing positive widths"),
    (["method.matryoshka_layers=True"], "needs method.matryoshka_dims"),
    (["method.name=biencoder", "method.objective=ranknet"],
     "method.objective='ranknet' is not valid"),
])
def test_config_errors(sets, pattern):
    with pytest.raises(ConfigError, match=pattern):
        C.override(C.Config(), sets)


def test_runtime_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="use a dual-encoder method"):
        cfg = C.override(method_config("simclr"), ["data.name=latent_modalities"])
        train_and_evaluate(cfg, tmp_path / "a", progress=False, verbose=False)
    with pytest.raises(ValueError, match="needs paired data"):
        cfg = C.override(method_config("clip"), ["data.name=mnist1d", "data.num_examples=500"])
        train_and_evaluate(cfg, tmp_path / "b", progress=False, verbose=False)
    with pytest.raises(ValueError, match="needs a text dataset"):
        cfg = C.override(method_config("mlm"), ["data.name=latent_classes"])
        train_and_evaluate(cfg, tmp_path / "d", progress=False, verbose=False)
    with pytest.raises(ValueError, match="share one width"):
        cfg = C.override(method_config("simclr"), ["encoder.widths=(32, 64)",
                                                   "method.matryoshka_dims=(8, 16)",
                                                   "method.matryoshka_layers=True"])
        train_and_evaluate(cfg, tmp_path / "c", progress=False, verbose=False)


@pytest.mark.parametrize("name", ["simclr", "supcon", "clip", "siglip", "biencoder"])
def test_grad_cache_equals_the_full_batch_loss_and_gradients(name):
    """train.grad_cache_chunk=8 (4 chunks of a batch of 32) gives the loss and gradients of the
    full batch (its in-batch negatives included) to 1e-5, learned temperatures included."""
    cfg = C.override(method_config(name), ["train.batch_size=32"])
    dataset = data.load(cfg.data.name, num_examples=2000)
    batch = jax.tree.map(jnp.asarray, data.BatchStream(dataset.splits["train"], batch_size=32,
                                                       seed=0).batch(0))
    hp = cfg.method
    results = []
    for chunk in (0, 8):
        method = build_method(C.override(cfg, [f"train.grad_cache_chunk={chunk}"]), dataset)
        params = method.init(jax.random.PRNGKey(0), batch)["params"]
        results.append(jax.jit(jax.value_and_grad(
            lambda p, method=method: method.loss(p, {}, {}, batch, jax.random.PRNGKey(1), hp)[0]
        ))(params))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5)
    chex.assert_trees_all_close(results[1][1], results[0][1], atol=1e-5, rtol=1e-5)


def test_grad_cache_refuses_what_it_cannot_cache(mnist1d_small):
    with pytest.raises(ValueError, match="no in-batch-negative objective"):
        build_method(C.override(method_config("vicreg"), ["train.grad_cache_chunk=8"]),
                     data.load("latent_classes", num_examples=2000))
    with pytest.raises(ConfigError, match="does not divide"):
        C.override(method_config("simclr"), ["train.grad_cache_chunk=24"])
    cfg = C.override(method_config("simclr"), ["train.grad_cache_chunk=8", "data.name=mnist1d",
                                               "encoder.name=cnn", "encoder.norm=batch"])
    method = build_method(cfg, mnist1d_small)
    batch = sample_batch(mnist1d_small)
    variables = method.init(jax.random.PRNGKey(0), batch)
    with pytest.raises(ValueError, match="without batch statistics"):
        method.loss(variables["params"], {"batch_stats": variables["batch_stats"]}, {}, batch,
                    jax.random.PRNGKey(1), cfg.method)


def test_bct_adds_the_old_classifiers_influence_loss(mnist1d_small):
    """method.compat_run: the loss gains compat_weight x the old, frozen classifier's cross-entropy
    on the new embeddings (BCT), which no gradient reaches; only supervised runs may use it."""
    from repr_jax import objectives as O
    from repr_jax.methods.supervised import supervised
    cfg = C.override(method_config("supervised"), ["data.name=mnist1d", "encoder.embed_dim=8",
                                                   "method.compat_weight=0.5",
                                                   "data.views.noise=0.0"])  # views = inputs
    plain = build_method(cfg, mnist1d_small)
    old = {"kernel": jax.random.normal(jax.random.PRNGKey(3), (8, 10)), "bias": jnp.zeros(10)}
    bct = supervised(plain.model.tower.encoder, data.make_views_fn(), num_classes=10,
                     old_classifier=old)
    batch = jax.tree.map(jnp.asarray, data.BatchStream(mnist1d_small.splits["train"],
                                                       batch_size=16, seed=0).batch(0))
    params = plain.init(jax.random.PRNGKey(0), batch)["params"]
    key = jax.random.PRNGKey(1)
    base = plain.loss(params, {}, {}, batch, key, cfg.method)[0]
    total, (_, _, metrics) = bct.loss(params, {}, {}, batch, key, cfg.method)
    emb = plain.model.apply({"params": params}, batch["x"], train=True)[0]
    np.testing.assert_allclose(metrics["bct_influence"],
                               O.bct_influence(emb, old, batch["label"]).mean(), rtol=1e-5)
    np.testing.assert_allclose(total, base + 0.5 * metrics["bct_influence"], rtol=1e-5)
    with pytest.raises(ConfigError, match="unknown config key 'method.compat_run'"):
        C.override(method_config("simclr"), ["method.compat_run=/tmp/old"])
