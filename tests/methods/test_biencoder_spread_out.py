"""``method.spread_out`` (EmbeddingGemma's spread-out regulariser) on a bi-encoder over a tiny
decoder LLM (one tower for both sides, as EmbeddingGemma) with Matryoshka dims: the loss is the
plain loss plus the hand-computed second moment of the full-width query and document embeddings'
cosines; the gradient-cache path adds the same terms on the projections; training steps run and
log it."""

import json

import jax
import numpy as np
import pytest

from repr_jax import config as C
from repr_jax import data
from repr_jax.train import (build_method, global_batch, hyperparams, init_state, make_mesh,
                            make_step_fn)
from repr_jax.train.run import load_dataset
from tiny_llm import tiny_params, write_gguf

B = 8


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("spread_out")
    with open(root / "pairs.jsonl", "w") as f:
        for i in range(64):
            f.write(json.dumps({"query": f"what is thing {i} about",
                                "positive": f"thing {i} is about the topic {i % 5}"}) + "\n")
    write_gguf(root / "tiny.gguf", tiny_params())
    return root


def _config(root, *extra):
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"pairs:{root / 'pairs.jsonl'}", max_len=12,
                          data_dir=str(root / "tfds")),
        encoder=C.EncoderConfig(name="decoder_lm", init_from=str(root / "tiny.gguf"),
                                pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                              proj_dim=16, matryoshka_dims=(8, 16, 32), tied_towers=True),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=B, steps=2, num_devices=1, ckpt_every=0),
        eval=C.EvalConfig(evaluators=(), reference_rows=False))
    return C.override(cfg, list(extra))


def _second_moment(x):
    """Mean squared off-diagonal cosine, float64 (EmbeddingGemma's spread-out term)."""
    u = np.asarray(x, np.float64)
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    s = u @ u.T
    np.fill_diagonal(s, 0.0)
    return (s ** 2).sum() / (len(s) * (len(s) - 1))


@pytest.fixture(scope="module")
def built(files):
    """The bi-encoder with Matryoshka dims and spread_out=1: config, dataset, method, state, and
    a batch (its parameters also fit the configs below, which build the same towers)."""
    cfg = _config(files, "method.spread_out=1.0")
    dataset = load_dataset(cfg)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, {k: v[:2] for k, v in dataset.splits["train"].items()},
                       make_mesh(1))
    batch = jax.tree.map(np.asarray, data.BatchStream(dataset.splits["train"], batch_size=B,
                                                      seed=0).batch(0))
    return cfg, dataset, method, state, batch


def _loss(cfg, dataset, params, batch):
    method = build_method(cfg, dataset)
    value, (_, _, metrics) = method.loss(params, {}, {}, batch, jax.random.PRNGKey(3),
                                         hyperparams(cfg)["method"])
    return float(value), jax.device_get(metrics)


def _towers(method, params, batch, out):
    """Both towers' outputs ``out`` (0: embedding, 2: projection) in train mode, float64."""
    return [np.asarray(method.model.apply({"params": params}, batch[x_name], method=lambda m, x: (
        m.tower_a if x_name == "x" else m.doc_tower())(x, train=True)[out]), np.float64)
        for x_name in ("x", "x_pos")]


def test_loss_adds_the_spread_out_term_of_the_full_width_embeddings(files, built):
    cfg, dataset, method, state, batch = built
    assert cfg.method.spread_out == 1.0 and cfg.method.spread_out_mean == 0.0
    with_term, metrics = _loss(cfg, dataset, state.params, batch)
    plain, plain_metrics = _loss(_config(files), dataset, state.params, batch)
    emb = _towers(method, state.params, batch, 0)
    assert emb[0].shape == (B, 32)  # the embedding, not the 16-wide projection
    want = _second_moment(emb[0]) + _second_moment(emb[1])
    assert want > 1e-3
    np.testing.assert_allclose(with_term, plain + want, rtol=1e-5)
    np.testing.assert_allclose(metrics["spread_out"], want, rtol=1e-5)
    np.testing.assert_allclose(plain_metrics["spread_out"], want, rtol=1e-5)  # logged at 0 too


def test_gradient_cache_adds_the_term_on_the_projections(files, built):
    """Without Matryoshka the objective compares the projections; the gradient-cache loss is the
    plain loss's, first moment (spread_out_mean) included."""
    _, dataset, method, state, batch = built
    flags = ["method.matryoshka_dims=()", "method.spread_out=0.5", "method.spread_out_mean=2.0"]
    value, _ = _loss(_config(files, *flags), dataset, state.params, batch)
    cached, _ = _loss(_config(files, *flags, "train.grad_cache_chunk=4"), dataset, state.params,
                      batch)
    plain, _ = _loss(_config(files, "method.matryoshka_dims=()"), dataset, state.params, batch)
    z = _towers(method, state.params, batch, 2)
    assert z[0].shape == (B, 16)
    mean_term = 0.0
    for zi in z:
        u = zi / np.linalg.norm(zi, axis=1, keepdims=True)
        s = u @ u.T
        np.fill_diagonal(s, 0.0)
        mean_term += (s.sum() / (B * (B - 1))) ** 2
    want = plain + 0.5 * (_second_moment(z[0]) + _second_moment(z[1])) + 2.0 * mean_term
    np.testing.assert_allclose(value, want, rtol=1e-5)
    np.testing.assert_allclose(cached, want, rtol=1e-5)


def test_train_steps_run_with_a_finite_loss(files, built):
    cfg, dataset, method, state, _ = built
    mesh = make_mesh(1)
    state = jax.tree.map(lambda x: x.copy(), state)  # the step donates it; the fixture keeps its
    step_fn = make_step_fn(cfg, method, mesh, state)
    stream = data.BatchStream(dataset.splits["train"], batch_size=B, seed=0)
    for step in range(2):
        state, metrics = step_fn(state, global_batch(stream.batch(step), mesh), hyperparams(cfg))
        assert np.isfinite(float(metrics["loss"])) and np.isfinite(float(metrics["spread_out"]))
    with pytest.raises(ValueError, match="spread_out"):
        _config(files, "method.spread_out=-1")
