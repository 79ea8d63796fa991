"""``method.name=sae``: trains end to end through the one loop, its jitted step's loss is
``objectives.sae.loss``, decoder norms and JumpReLU thresholds stay where configured, dead latents
are counted as sae-lens counts them, BatchTopK keeps its threshold, and the one-line refusals."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import sae_config, setup_step

from repr_jax import cli
from repr_jax import config as C
from repr_jax import data
from repr_jax.config import ConfigError
from repr_jax.methods import sae as sae_method
from repr_jax.objectives import sae as S
from repr_jax.train import global_batch, hyperparams, train_and_evaluate


@pytest.fixture(scope="module")
def latent():
    return data.load("latent_classes", num_examples=2000)  # x [32] float vectors


def _steps(cfg, dataset, n):
    """``n`` steps of ``cfg``'s jitted step: the states before each step, its metrics, the
    batches."""
    mesh, state, step_fn = setup_step(cfg, 1, dataset)
    stream = data.BatchStream(dataset.splits["train"], batch_size=cfg.train.batch_size, seed=0)
    states, metrics, batches = [jax.device_get(state)], [], []
    for i in range(n):
        batch = stream.batch(i)
        state, m = step_fn(state, global_batch(batch, mesh), hyperparams(cfg))
        states.append(jax.device_get(state))
        metrics.append(jax.device_get(m))
        batches.append(batch)
    return states, metrics, batches


def test_trains_end_to_end_and_evaluates_its_latents(tmp_path):
    """Through ``train_and_evaluate``: the loss falls, the sae rows come back for the trained
    SAE and its FVU is the objective's on the test split."""
    cfg = sae_config(steps=60)
    out = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    losses = [json.loads(line)["loss"] for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0], losses
    rows = {r["metric"]: r for r in out["eval_rows"] if r["evaluator"] == "sae"}
    assert set(rows) == {"fvu", "l0", "dead_fraction", "dense_fraction"}
    assert rows["fvu"]["ci_low"] <= rows["fvu"]["value"] <= rows["fvu"]["ci_high"]
    assert rows["l0"]["value"] <= 4 + 1e-6  # TopK: at most k per row
    state = out["state"]
    test_x = jnp.asarray(data.load("latent_classes", num_examples=2000).splits["test"]["x"])
    x_hat = S.decode(state.params["sae"],
                     S.encode(state.params["sae"], test_x, activation="topk", k=4),
                     rescale_acts_by_decoder_norm=True)
    np.testing.assert_allclose(rows["fvu"]["value"], S.fvu(test_x, x_hat), rtol=1e-4)
    assert rows["fvu"]["value"] < 0.9


@pytest.mark.parametrize("activation", ["topk", "batchtopk", "relu", "jumprelu"])
def test_the_jitted_steps_loss_is_the_objectives(latent, activation):
    """The step's loss (before its update) is the mean of ``objectives.sae.loss`` on the same
    params and batch (inputs times the stored scale), with AuxK on the latents dead before it."""
    cfg = sae_config(f"method.activation={activation}", "method.scale_inputs=True",
                     "method.dead_feature_window=1", "method.l1_coefficient=0.01",
                     "method.l0_coefficient=0.01")
    states, metrics, batches = _steps(cfg, latent, 3)
    for before, m, batch in zip(states, metrics, batches):
        scale = before.batch_stats["scale"]
        dead = before.extra["forward_passes_since_fired"] > 1
        loss_B, aux = S.loss(before.params["sae"], jnp.asarray(batch["x"]) * scale,
                             activation=activation, k=4, l1_coefficient=0.01,
                             l0_coefficient=0.01,
                             dead_mask=dead if activation in ("topk", "batchtopk") else None)
        np.testing.assert_allclose(m["loss"], jnp.mean(loss_B), rtol=1e-5)
        np.testing.assert_allclose(m["l0"], jnp.mean(aux["l0"]), rtol=1e-6)
    if activation in ("topk", "batchtopk"):
        assert metrics[-1]["auxk"] > 0  # latents dead after one silent pass feed AuxK


def test_scale_and_mean_init_come_from_the_training_inputs(latent):
    cfg = sae_config("method.scale_inputs=True", "method.b_dec_init=mean")
    states, _, _ = _steps(cfg, latent, 0)
    mean, factor = sae_method.input_statistics(latent.splits["train"])
    x = np.asarray(latent.splits["train"]["x"], np.float64)  # 1,400 rows: the whole split
    np.testing.assert_allclose(factor, np.sqrt(32) / np.linalg.norm(x, axis=1).mean(), rtol=1e-6)
    np.testing.assert_allclose(states[0].batch_stats["scale"], factor, rtol=1e-6)
    np.testing.assert_allclose(states[0].params["sae"]["b_dec"], mean * factor, rtol=1e-5,
                               atol=1e-6)
    plain = _steps(sae_config(), latent, 0)[0][0]
    assert plain.batch_stats["scale"] == 1.0 and not plain.params["sae"]["b_dec"].any()


@pytest.mark.parametrize("normalize", [False, True])
def test_decoder_norms_as_configured(latent, normalize):
    """False (sae-lens 6.x): rows start at norm 0.1 and move freely; True: unit rows after every
    step, the norms folded into the encoder so the projection keeps the SAE's function."""
    cfg = sae_config(f"method.normalize_decoder={normalize}", "method.activation=relu",
                     "method.l1_coefficient=0.01")
    states, _, _ = _steps(cfg, latent, 3)
    norms = [np.linalg.norm(s.params["sae"]["W_dec"], axis=1) for s in states]
    if normalize:
        for n in norms:
            np.testing.assert_allclose(n, 1.0, rtol=1e-5)
    else:
        np.testing.assert_allclose(norms[0], 0.1, rtol=1e-5)
        assert np.abs(norms[-1] - 0.1).max() > 1e-3


def test_normalizing_keeps_the_function():
    params = S.init_sae(jax.random.PRNGKey(0), 6, 10, activation="relu")
    params = dict(params, W_dec=params["W_dec"] * jnp.linspace(0.5, 2, 10)[:, None])
    x = jax.random.normal(jax.random.PRNGKey(1), (5, 6))
    method = sae_method.sparse_autoencoder(6, 10, activation="relu", normalize_decoder=True)
    projected = method.project_params({"sae": params}, None)["sae"]

    def x_hat(p):
        return S.decode(p, S.encode(p, x, activation="relu"))
    np.testing.assert_allclose(x_hat(projected), x_hat(params), rtol=1e-5, atol=1e-6)


def test_dead_latents_are_counted_per_forward_pass(latent):
    """Each step resets the counter of the latents that fired on its batch (its params before
    the update) and adds one to the others; the metric counts those past the window."""
    cfg = sae_config("method.dead_feature_window=2")
    states, metrics, batches = _steps(cfg, latent, 4)
    for before, after, m, batch in zip(states, states[1:], metrics, batches):
        z = S.encode(before.params["sae"], jnp.asarray(batch["x"]), activation="topk", k=4)
        fired = np.asarray(jnp.any(z != 0, axis=0))
        expect = np.where(fired, 0, before.extra["forward_passes_since_fired"] + 1)
        np.testing.assert_array_equal(after.extra["forward_passes_since_fired"], expect)
        np.testing.assert_allclose(m["dead_fraction"], np.mean(expect > 2))
    assert metrics[-1]["dead_fraction"] > 0  # 64 latents, 4 a row: some stay silent


def test_jumprelu_thresholds_are_clamped_and_batchtopk_keeps_its_threshold(latent):
    cfg = sae_config("method.activation=jumprelu")
    mesh, state, step_fn = setup_step(cfg, 1, latent)
    sae = dict(state.params["sae"], threshold=jnp.full((64,), -0.5))
    state = state.replace(params=dict(state.params, sae=sae))
    batch = data.BatchStream(latent.splits["train"], batch_size=64, seed=0).batch(0)
    state, _ = step_fn(state, global_batch(batch, mesh), hyperparams(cfg))
    assert float(jnp.min(state.params["sae"]["threshold"])) == 0.0

    states, _, batches = _steps(sae_config("method.activation=batchtopk"), latent, 2)
    for before, after, batch in zip(states, states[1:], batches):
        z = S.encode(before.params["sae"], jnp.asarray(batch["x"]), activation="batchtopk", k=4)
        np.testing.assert_allclose(after.batch_stats["threshold"], S.update_batchtopk_threshold(
            before.batch_stats["threshold"], z), rtol=1e-6)
    # Evaluation runs BatchTopK as JumpReLU with that threshold: rows do not compete.
    method = sae_method.sparse_autoencoder(32, 64, activation="batchtopk", k=4)
    variables = {"params": states[-1].params, "batch_stats": states[-1].batch_stats}
    x = jnp.asarray(latent.splits["test"]["x"][:8])
    z = method.embed(variables, x)
    np.testing.assert_array_equal(method.embed(variables, x[:3]), z[:3])
    pre = S.pre_activations(states[-1].params["sae"], x, rescale_acts_by_decoder_norm=True)
    np.testing.assert_array_equal(z != 0, pre > states[-1].batch_stats["threshold"])


def _fake(x, vocab=None):
    split = {"x": x, "label": np.zeros(len(x), np.int32)}
    return data.Dataset("fake", {"train": split, "validation": split, "test": split}, 2, vocab)


def test_refuses_what_is_not_activation_vectors(latent):
    with pytest.raises(ConfigError, match=r"^method 'sae' trains on activation vectors "
                                          r"\(data.name=activations:DIR or another vector "
                                          r"dataset\); 'fake' has inputs of shape \(8, 8, 1\)$"):
        sae_method.check_vectors(_fake(np.zeros((4, 8, 8, 1), np.float32)))
    with pytest.raises(ConfigError, match="'fake' has token ids$"):
        sae_method.check_vectors(_fake(np.zeros((4, 16), np.int32), vocab=("[PAD]", "a")))
    from repr_jax.train import build_method
    with pytest.raises(ConfigError, match=r"data.views must be off \(data.views.noise=0.1\)"):
        build_method(sae_config("data.views.noise=0.1"), latent)
    with pytest.raises(ConfigError, match=r"method.k=300 must be below the 256 latents "
                                          r"\(0 < k < L; L = method.expansion x D = 8 x 32\)"):
        build_method(sae_config("method.latents=0", "method.k=300"), latent)
    with pytest.raises(ConfigError, match="method.k=64 must be below method.latents=64"):
        sae_config("method.k=64")


def test_coefficients_are_leaves_a_population_vmaps(latent):
    """l1/l0/aux_k coefficients are hyper leaves: one loss vmapped over stacked sections gives
    each member's own loss (here: relu's L1 weight)."""
    cfg = sae_config("method.activation=relu")
    from repr_jax.train import build_method
    method = build_method(cfg, latent)
    batch = jax.tree.map(jnp.asarray, data.BatchStream(latent.splits["train"], batch_size=64,
                                                       seed=0).batch(0))
    variables = method.init(jax.random.PRNGKey(0), batch)
    extra = method.init_extra(jax.random.PRNGKey(1), variables)
    sections = [C.override(cfg, [f"method.l1_coefficient={c}"]).method for c in (0.0, 0.5)]
    stacked = jax.tree.map(lambda *v: jnp.stack(v), *sections)

    def one(hp):
        return method.loss(variables["params"], {"batch_stats": variables["batch_stats"]}, extra,
                           batch, jax.random.PRNGKey(2), hp)[0]
    losses = jax.vmap(one)(stacked)
    np.testing.assert_allclose(losses, [one(s) for s in sections], rtol=1e-6)
    assert losses[1] > losses[0]


def test_print_config_says_an_sae_does_not_use_the_encoder(capsys):
    assert cli.main(["train", "--set", "method.name=sae", "--print-config"]) == 0
    err = capsys.readouterr().err
    assert "method.name='sae' does not use the encoder section (encoder.name='cnn')" in err
