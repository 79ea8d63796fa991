"""``method.negatives_per_query=K``: the bi-encoder's InfoNCE over the global batch's positives and
hard negatives equals a softmax written out by hand, with and without a gradient cache, and 8
devices give the 1-device step."""

import json

import chex
import jax
import numpy as np
import pytest
from conftest import setup_step

from repr_jax import config as C
from repr_jax import data
from repr_jax.train import build_method, global_batch, hyperparams, init_state, make_mesh
from repr_jax.train.run import load_dataset

K = 2


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(0)
    with open(root / "pairs.jsonl", "w") as f:
        for i in range(400):
            topic = rng.integers(20)
            f.write(json.dumps({"query": f"question {i} on topic {topic}",
                                "positive": f"answer {i} about {topic}",
                                "negatives": [f"answer {rng.integers(400)} about {topic}",
                                              f"other {i}"]}) + "\n")
    return root


def _config(pairs, *extra):
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"pairs:{pairs / 'pairs.jsonl'}", max_len=16,
                          data_dir=str(pairs / "tfds")),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                              proj_dim=16, negatives_per_query=K),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False))
    return C.override(cfg, list(extra))


def _by_hand(model, params, batch, temperature):
    """Tower A on the queries, tower B on positives and negatives; the softmax of query i over
    [all B positives; all B*K negatives] at its positive, in float64."""
    def tower(name, x):
        return np.asarray(model.apply({"params": params}, x, method=lambda m, x: getattr(
            m, name)(x, train=True)[2]), np.float64)

    q = tower("tower_a", batch["x"])
    d = tower("tower_b", batch["x_pos"])
    n = tower("tower_b", batch["negatives"].reshape(-1, batch["negatives"].shape[-1]))
    cands = np.concatenate([d, n])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    cands /= np.linalg.norm(cands, axis=1, keepdims=True)
    logits = q @ cands.T / temperature
    assert logits.shape == (16, 16 + 16 * K)
    m = logits.max(1, keepdims=True)
    log_softmax = logits - m - np.log(np.exp(logits - m).sum(1, keepdims=True))
    return -np.mean(log_softmax[np.arange(16), np.arange(16)])


@pytest.mark.parametrize("grad_cache", [0, 4])
def test_loss_equals_hand_softmax_over_positives_and_negatives(pairs, grad_cache):
    cfg = _config(pairs, f"train.grad_cache_chunk={grad_cache}")
    dataset = load_dataset(cfg)
    assert dataset.splits["train"]["negatives"].shape[1:] == (K, 16)
    method = build_method(cfg, dataset)
    mesh = make_mesh(1)
    state = init_state(cfg, method, {k: v[:2] for k, v in dataset.splits["train"].items()}, mesh)
    batch = data.BatchStream(dataset.splits["train"], batch_size=16, seed=0).batch(0)
    value, _ = method.loss(state.params, {}, state.extra, jax.tree.map(np.asarray, batch),
                           jax.random.PRNGKey(0), hyperparams(cfg)["method"])
    want = _by_hand(method.model, state.params, batch, cfg.method.temperature)
    np.testing.assert_allclose(float(value), want, rtol=2e-5)
    # the negatives matter: the same batch without them gives a smaller loss
    no_neg = _config(pairs, "method.negatives_per_query=0")
    plain = build_method(no_neg, load_dataset(no_neg))
    value0, _ = plain.loss(state.params, {}, state.extra, jax.tree.map(np.asarray, batch),
                           jax.random.PRNGKey(0), hyperparams(no_neg)["method"])
    assert float(value0) < float(value)


def test_eight_devices_equal_one(pairs):
    # Attention key biases have a zero gradient (a softmax is shift-invariant): Adam would turn
    # their rounding noise, which differs with the summation order, into lr-sized steps.
    cfg = _config(pairs, "optim.freeze=('*key/bias',)")
    dataset = load_dataset(cfg)
    stream = data.BatchStream(dataset.splits["train"], batch_size=16, seed=0)
    out = {}
    for n in (1, 8):
        mesh, state, step_fn = setup_step(C.override(cfg, [f"train.num_devices={n}"]), n, dataset)
        for step in range(2):
            state, metrics = step_fn(state, global_batch(stream.batch(step), mesh),
                                     hyperparams(cfg))
        out[n] = jax.device_get((state.params, metrics["loss"]))
    chex.assert_trees_all_close(out[1], out[8], atol=2e-5, rtol=2e-5)


def test_refusals(pairs):
    with pytest.raises(ValueError, match="hard negatives come from data.name=pairs:FILE"):
        load_dataset(C.override(_config(pairs), "data.name=latent_modalities".split()))
    with pytest.raises(ValueError, match="negatives_per_query applies to objectives info_nce"):
        _config(pairs, "method.objective=graded_bce")
    with pytest.raises(ValueError, match="margin_mse needs method.negatives_per_query >= 1"):
        _config(pairs, "method.objective=margin_mse", "method.negatives_per_query=0")


@pytest.fixture(scope="module")
def scored(pairs):
    """The pairs with a teacher's scores on every line."""
    rng = np.random.default_rng(1)
    lines = [json.loads(line) for line in open(pairs / "pairs.jsonl")]
    with open(pairs / "scored.jsonl", "w") as f:
        for row in lines:
            f.write(json.dumps(dict(row, positive_score=float(rng.normal(3, 1)),
                                    negative_scores=rng.normal(0, 2, 2).tolist())) + "\n")
    return pairs / "scored.jsonl"


@pytest.mark.parametrize("objective", ["margin_mse", "kl_distill"])
def test_distillation_losses_equal_the_formulas_on_the_teacher_scores(pairs, scored, objective):
    cfg = _config(pairs, f"data.name=pairs:{scored}", f"method.objective={objective}")
    dataset = load_dataset(cfg)
    assert dataset.splits["train"]["scores"].shape[1:] == (1 + K,)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, {k: v[:2] for k, v in dataset.splits["train"].items()},
                       make_mesh(1))
    batch = jax.tree.map(np.asarray, data.BatchStream(dataset.splits["train"], batch_size=16,
                                                      seed=0).batch(0))
    value, _ = method.loss(state.params, {}, state.extra, batch, jax.random.PRNGKey(0),
                           hyperparams(cfg)["method"])

    def tower(name, x):
        return np.asarray(method.model.apply({"params": state.params}, x, method=lambda m, x:
                                             getattr(m, name)(x, train=True)[2]), np.float64)

    q = tower("tower_a", batch["x"])
    docs = np.stack([tower("tower_b", batch["x_pos"])]
                    + [tower("tower_b", batch["negatives"][:, j]) for j in range(K)], axis=1)
    t = batch["scores"].astype(np.float64)
    if objective == "margin_mse":  # dot products, as sentence-transformers' MarginMSELoss
        s = np.einsum("bd,bcd->bc", q, docs)
        want = np.mean(((s[:, :1] - s[:, 1:]) - (t[:, :1] - t[:, 1:])) ** 2)
    else:  # KL(softmax(teacher) || softmax(cos / temperature))
        s = np.einsum("bd,bcd->bc", q / np.linalg.norm(q, axis=1, keepdims=True),
                      docs / np.linalg.norm(docs, axis=2, keepdims=True)) / 0.1
        p = np.exp(t - t.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        log_q = s - s.max(1, keepdims=True)
        log_q -= np.log(np.exp(log_q).sum(1, keepdims=True))
        want = np.mean(np.sum(p * (np.log(p) - log_q), axis=1))
    np.testing.assert_allclose(float(value), want, rtol=2e-5)
