"""The cross-encoder: packed pairs equal a joint tokenisation, its logits equal transformers'
BertModel + a linear head with the same weights, and its losses equal the formulas."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import needs_minilm
from repr_jax.encoders.text_transformer import TextTransformer
from repr_jax.methods.cross_encoder import CrossEncoder, cross_encoder, pack_pairs

DATA = Path(__file__).resolve().parent.parent / "data"
sys.path.insert(0, str(DATA))
from make_cross_encoder_reference import HEAD_SEED, PAIRS  # noqa: E402


def test_pack_pairs_equals_a_loop():
    rng = np.random.default_rng(0)
    q = np.zeros((6, 7), np.int32)
    d = np.zeros((6, 9), np.int32)
    for row, n in zip(q, rng.integers(2, 8, 6)):
        row[:n] = [101] + list(rng.integers(1000, 2000, n - 2)) + [102]
    for row, n in zip(d, rng.integers(2, 10, 6)):
        row[:n] = [101] + list(rng.integers(1000, 2000, n - 2)) + [102]
    ids, seg = map(np.asarray, pack_pairs(jnp.asarray(q), jnp.asarray(d), 0))
    assert ids.shape == (6, 15)
    for i in range(6):
        qi, di = q[i][q[i] != 0], d[i][d[i] != 0]
        joint = list(qi) + list(di[1:])
        np.testing.assert_array_equal(ids[i], joint + [0] * (15 - len(joint)))
        np.testing.assert_array_equal(seg[i], [0] * len(qi) + [1] * (len(di) - 1)
                                      + [0] * (15 - len(joint)))


@needs_minilm
def test_logits_equal_transformers_bert_model_plus_linear_head(minilm):
    """Stored by tests/data/make_cross_encoder_reference.py (transformers, torch)."""
    ref = np.load(DATA / "cross_encoder_reference.npz")
    config, params, tokenizer = minilm
    q = tokenizer.encode([q for q, _ in PAIRS], max_len=64, pad_to=64).ids
    d = tokenizer.encode([d for _, d in PAIRS], max_len=64, pad_to=64).ids
    ids, seg = map(np.asarray, pack_pairs(jnp.asarray(q), jnp.asarray(d), 0))
    width = ref["ids"].shape[1]
    np.testing.assert_array_equal(ids[:, :width], ref["ids"])  # the joint tokenisation
    np.testing.assert_array_equal(seg[:, :width] * (ids[:, :width] != 0), ref["segments"]
                                  * (ref["ids"] != 0))
    assert (ids[:, width:] == 0).all()
    kernel = np.random.default_rng(HEAD_SEED).normal(0, 0.1, (384, 1)).astype(np.float32)
    module = CrossEncoder(minilm.module.clone(max_len=127), pad_id=0)
    encoder = dict(params, position_embeddings=params["position_embeddings"][:127])
    variables = {"params": {"encoder": encoder,
                            "head": {"kernel": kernel, "bias": np.asarray([0.1], np.float32)}}}
    logits = module.apply(variables, jnp.asarray(q), jnp.asarray(d), method=CrossEncoder.score)
    np.testing.assert_allclose(logits, ref["logits"], atol=2e-5)


def _tiny(objective, batch_negatives=2):
    encoder = TextTransformer(vocab_size=50, width=16, depth=1, num_heads=2, mlp_dim=32,
                              max_len=16)
    return cross_encoder(encoder, pad_id=0, objective=objective, negatives=0,
                         batch_negatives=batch_negatives)


def _batch(b=4, t=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(3, 50, (b, t)).astype(np.int32)
    x_pos = rng.integers(3, 50, (b, t)).astype(np.int32)
    x[:, 3:] = 0
    return {"x": jnp.asarray(x), "x_pos": jnp.asarray(x_pos), "label": jnp.zeros(b, jnp.int32)}


@pytest.mark.parametrize("objective", ["listwise", "bce"])
def test_loss_equals_the_formula_on_the_pairs_scores(objective):
    from repr_jax.config import MethodConfig
    method = _tiny(objective)
    batch = _batch()
    variables = method.init(jax.random.PRNGKey(0), batch)
    hp = MethodConfig(name="cross_encoder")
    value, (_, _, metrics) = method.loss(variables["params"], {}, {}, batch,
                                         jax.random.PRNGKey(1), hp)
    b = 4
    s = np.zeros((b, 3))
    for j in range(3):  # the positive, then the next two queries' positives
        docs = np.roll(np.asarray(batch["x_pos"]), -j, axis=0)
        s[:, j] = method.score(variables, batch["x"], jnp.asarray(docs))
    if objective == "listwise":
        expect = np.mean(np.log(np.exp(s).sum(1)) - s[:, 0])
    else:
        labels = np.zeros_like(s)
        labels[:, 0] = 1
        p = 1 / (1 + np.exp(-s))
        expect = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    np.testing.assert_allclose(value, expect, rtol=1e-5)
    np.testing.assert_allclose(metrics["rank_accuracy"], np.mean(s.argmax(1) == 0))


def test_batch_negatives_must_be_below_the_batch():
    method = _tiny("listwise", batch_negatives=4)
    batch = _batch()
    variables = method.init(jax.random.PRNGKey(0), batch)
    from repr_jax.config import MethodConfig
    with pytest.raises(ValueError, match="batch_negatives=4 must be below the batch"):
        method.loss(variables["params"], {}, {}, batch, jax.random.PRNGKey(1),
                    MethodConfig(name="cross_encoder"))
