"""text_transformer on packed tokens (``pack=``, data.pack_tokens): the dense layers run on the
valid tokens only, attention on the padded layout; the same embeddings and gradients as the
padded model, in float32 and under the bfloat16 policy, with LoRA and with remat."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from repr_jax.encoders import precision
from repr_jax.encoders.lora import LoRA
from repr_jax.encoders.text_transformer import (TextTransformer, pack_indices, packed,
                                                padded)


def _batch(lengths, t, capacity):
    ids = np.zeros((len(lengths), t), np.int32)
    rng = np.random.default_rng(0)
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(1, 100, n)
    positions = np.flatnonzero(ids.ravel())
    pack = np.concatenate([positions, np.full(capacity - len(positions), ids.size)])
    return jnp.asarray(ids), jnp.asarray(pack, jnp.int32)


def test_pack_and_unpack_are_inverse_on_valid_tokens():
    ids, pack = _batch([3, 0, 5, 1], 6, 12)
    y = jnp.arange(4 * 6 * 2, dtype=jnp.float32).reshape(4, 6, 2) + 1
    p = packed(y, pack)
    assert p.shape == (12, 2) and (p[9:] == 0).all()  # unused slots are zeros
    back = padded(p, pack_indices(pack, 4, 6), 4, 6)
    mask = (ids != 0)[..., None]
    np.testing.assert_array_equal(back, jnp.where(mask, y, 0))


@pytest.mark.parametrize("pooling,mixed,lora,remat", [
    ("mean", False, False, False), ("cls", False, True, False), ("mean", True, False, True),
    ("max", True, True, False)])
def test_packed_model_equals_padded_model(pooling, mixed, lora, remat):
    lengths = [4, 7, 1, 3, 9, 2] if pooling != "mean" else [4, 7, 0, 3, 9, 2]
    ids, pack = _batch(lengths, 10, 32)
    model = TextTransformer(vocab_size=100, width=16, depth=2, num_heads=2, mlp_dim=32,
                            max_len=16, pooling=pooling, remat=remat,
                            lora=LoRA(rank=2, alpha=4.0) if lora else None)
    params = model.init(jax.random.PRNGKey(0), ids)

    def loss(params, pack):
        with precision.mixed(mixed):
            emb, features = model.apply(params, ids, pack=pack)
        valid = (ids != 0)[..., None]  # padded positions of the padded model are not features
        return (emb ** 2).sum() + (features["layers"][0] * valid).sum(), (emb, features)

    grad = jax.jit(jax.grad(loss, has_aux=True))
    (g0, (e0, f0)), (g1, (e1, f1)) = grad(params, None), grad(params, pack)
    tol = 2e-2 if mixed else 1e-5
    np.testing.assert_allclose(e1, e0, rtol=tol, atol=tol)
    mask = np.asarray(ids != 0)[..., None]
    np.testing.assert_allclose(np.where(mask, f1["tokens"], 0), np.where(mask, f0["tokens"], 0),
                               rtol=tol, atol=tol)
    assert (np.asarray(f1["tokens"])[~mask[..., 0]] == 0).all()  # padding: zeros when packed
    diff = optax.global_norm(jax.tree.map(lambda a, b: a - b, g1, g0)) / optax.global_norm(g0)
    assert float(diff) < (2e-2 if mixed else 1e-5)


def test_landmark_pooling_refuses_packed_tokens():
    ids, pack = _batch([3, 5], 8, 8)
    model = TextTransformer(vocab_size=200, width=16, depth=1, num_heads=2, mlp_dim=32,
                            max_len=32, pooling="landmark", landmark_chunk=4, landmark_id=102)
    params = model.init(jax.random.PRNGKey(0), ids)
    with pytest.raises(ValueError, match="landmark pooling inserts tokens"):
        model.apply(params, ids, pack=pack)
