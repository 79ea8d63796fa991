"""BERT-style bidirectional text encoder (Devlin et al. 2019), post-LayerNorm so BERT checkpoints load.

Input: token ids ``[B, T]`` (``pad_id`` marks padding) and optional segment ids. Any pooling of
``encoders.pooling`` applies; ``landmark`` first inserts ``landmark_id`` after every
``landmark_chunk`` tokens (so ``tokens`` is then the longer sequence) and averages those positions. Each layer is
``x = LN(x + Attn(x)); x = LN(x + FFN(x))`` with exact (erf) GELU, an additive attention-mask bias on
padded keys, and LayerNorm eps 1e-12 — the conventions of Hugging Face's ``BertModel``. The parameter
names mirror BERT's so ``encoders.pretrained`` maps a checkpoint one tensor to one parameter. Its
dense layers and attention einsums follow the mixed-precision policy (``encoders.precision``:
bfloat16 GEMMs with float32 results under ``precision.mixed()``, exact float32 otherwise).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax.config import EncoderConfig, config, static
from repr_jax.encoders import precision
from repr_jax.encoders.attention import attend
from repr_jax.encoders.family import Family, sizes
from repr_jax.encoders.layers import gelu_exact
from repr_jax.encoders.lora import LoRA, dense_factory
from repr_jax.encoders.pooling import ALL_POOLINGS, insert_landmarks, mean_pool, pool_tokens

LORA_TARGETS = ("query", "key", "value", "attention_out")  # the default: attention projections
DENSE_LAYERS = LORA_TARGETS + ("intermediate", "output")

VARIANTS = {
    "tiny": dict(width=32, depth=2, num_heads=2, mlp_dim=64),
    "MiniLM-L6": dict(width=384, depth=6, num_heads=12, mlp_dim=1536),
    "S": dict(width=512, depth=4, num_heads=8, mlp_dim=2048),
    "B": dict(width=768, depth=12, num_heads=12, mlp_dim=3072),  # BERT-base: 109.5M with 30,522
}


class BertLayer(nn.Module):
    width: int
    num_heads: int
    mlp_dim: int
    eps: float = 1e-12
    lora: LoRA | None = None

    @nn.compact
    def __call__(self, x, bias_Bx1x1xT, pack_C=None, unpack_BT=None):
        """``x`` ``[B, T, D]``, or ``[C, D]`` packed tokens with ``pack_C``/``unpack_BT``
        (:func:`pack_indices`): every dense layer, LayerNorm and GELU then runs on the ``C``
        packed tokens, attention on the padded ``[B, T]`` layout."""
        b, t = bias_Bx1x1xT.shape[0], bias_Bx1x1xT.shape[-1]
        d = x.shape[-1]
        h, dh = self.num_heads, d // self.num_heads
        dense = dense_factory(self.lora, LORA_TARGETS)
        qkv = [dense(d, name) for name in ("query", "key", "value")]
        if self.is_initializing() or not all(type(m) is nn.Dense for m in qkv):
            y = jnp.concatenate([m(x) for m in qkv], axis=-1)
        else:  # one [D, 3D] product (and one of each gradient) instead of three [D, D] ones
            p = self.variables["params"]
            kernel = jnp.concatenate([p[n]["kernel"] for n in ("query", "key", "value")], axis=1)
            bias = jnp.concatenate([p[n]["bias"] for n in ("query", "key", "value")])
            y = precision.matmul(x, kernel) + bias.reshape((1,) * (x.ndim - 1) + (-1,))
        if pack_C is not None:
            y = padded(y, unpack_BT, b, t)
        q, k, v = jnp.split(y.reshape(b, t, 3 * d), 3, axis=-1)
        ctx = attend(*(a.reshape(b, t, h, dh) for a in (q, k, v)), bias_Bx1x1xT).reshape(b, t, d)
        if pack_C is not None:
            ctx = packed(ctx, pack_C)
        x = nn.LayerNorm(self.eps, name="attention_ln")(x + dense(d, "attention_out")(ctx))
        ffn = dense(self.mlp_dim, "intermediate")(x)
        ffn = dense(d, "output")(gelu_exact(ffn))
        return nn.LayerNorm(self.eps, name="output_ln")(x + ffn)


def pack_indices(pack_C: jax.Array, b: int, t: int) -> jax.Array:
    """The inverse of a packing: for each of the ``B T`` padded positions, its row among the
    ``C`` packed tokens, ``C`` (a zero row) for padding. ``pack_C`` holds the flat positions
    ``row * T + col`` of the valid tokens in order, then ``B T`` for each unused slot."""
    c = pack_C.shape[0]
    return jnp.full((b * t,), c, jnp.int32).at[pack_C].set(jnp.arange(c, dtype=jnp.int32),
                                                           mode="drop")


def packed(y_BxTxF: jax.Array, pack_C: jax.Array) -> jax.Array:
    """``[B, T, F]`` -> ``[C, F]``: the valid tokens' rows (zeros in unused slots)."""
    return jnp.take(y_BxTxF.reshape(-1, y_BxTxF.shape[-1]), pack_C, axis=0, mode="fill",
                    fill_value=0)


def padded(y_CxF: jax.Array, unpack_BT: jax.Array, b: int, t: int) -> jax.Array:
    """``[C, F]`` -> ``[B, T, F]``: each valid token's row in its place, zeros at padding."""
    y = jnp.concatenate([y_CxF, jnp.zeros((1, y_CxF.shape[-1]), y_CxF.dtype)])
    return y[unpack_BT].reshape(b, t, -1)


class TextTransformer(nn.Module):
    """Returns ``(embedding [B, E], features)`` with ``tokens`` ``[B, T, D]`` (last layer), ``layers``
    (each layer's token states), ``mask`` ``[B, T]`` (valid tokens), ``pooled`` and ``pre_head``."""
    vocab_size: int = 30522
    width: int = 384
    depth: int = 6
    num_heads: int = 12
    mlp_dim: int = 1536
    max_len: int = 512
    type_vocab_size: int = 2
    pad_id: int = 0
    pooling: str = "mean"  # mean | max | cls | last_token | attention | multi_layer | landmark
    embed_dim: int = 0
    eps: float = 1e-12
    landmark_chunk: int = 16
    landmark_id: int = 102  # BERT's [SEP]
    remat: bool = False  # recompute each layer's activations in the backward pass
    lora: LoRA | None = None  # adapters on the layers it names (optim.lora_*)

    def setup(self):
        if self.width % self.num_heads:
            raise ValueError(f"text_transformer: width {self.width} is not divisible by "
                             f"num_heads {self.num_heads}")

    @nn.compact
    def __call__(self, ids: jax.Array, *, train: bool = False, segment_ids: jax.Array | None = None,
                 pack: jax.Array | None = None):
        """``pack`` (optional, ``[C]``): the flat positions of ``ids``' valid tokens, then ``B T``
        in each unused slot (``data.pack_tokens``): the layers' token-wise work then runs on ``C``
        rows instead of ``B T``. The same embeddings; padded positions of ``tokens`` are 0."""
        del train  # no dropout: deterministic features and exact resume
        ids = ids.astype(jnp.int32)
        landmarks = None
        if self.pooling == "landmark":
            ids, landmarks = insert_landmarks(ids, ids != self.pad_id, chunk=self.landmark_chunk,
                                              landmark_id=self.landmark_id, pad_id=self.pad_id)
        b, t = ids.shape
        if t > self.max_len:
            raise ValueError(f"text_transformer: sequence length {t} exceeds max_len {self.max_len}")
        mask = ids != self.pad_id
        segment_ids = jnp.zeros_like(ids) if segment_ids is None else segment_ids
        pos = self.param("position_embeddings", nn.initializers.normal(0.02),
                         (self.max_len, self.width))
        x = (nn.Embed(self.vocab_size, self.width, name="word_embeddings",
                      embedding_init=nn.initializers.normal(0.02))(ids)
             + pos[None, :t]
             + nn.Embed(self.type_vocab_size, self.width, name="token_type_embeddings",
                        embedding_init=nn.initializers.normal(0.02))(segment_ids))
        x = nn.LayerNorm(self.eps, name="embeddings_ln")(x)
        bias = jnp.where(mask, 0.0, jnp.finfo(x.dtype).min)[:, None, None, :]
        if pack is not None and landmarks is not None:
            raise ValueError("text_transformer: landmark pooling inserts tokens; it cannot take "
                             "packed tokens (data.pack_tokens)")
        unpack = None if pack is None else pack_indices(pack, b, t)
        if pack is not None:
            x = packed(x, pack)
        layers = []
        layer = nn.remat(BertLayer) if self.remat else BertLayer
        for i in range(self.depth):
            x = layer(self.width, self.num_heads, self.mlp_dim, self.eps, self.lora,
                      name=f"layer_{i}")(x, bias, pack, unpack)
            layers.append(x if pack is None else padded(x, unpack, b, t))
        if pack is not None:
            x = padded(x, unpack, b, t)
        if self.pooling == "landmark":
            pooled = mean_pool(x, landmarks)
        else:
            pooled = pool_tokens(self.pooling, x, mask, layers, num_heads=self.num_heads)
        emb = (nn.Dense(self.embed_dim, name="embed", **precision.dense_kwargs())(pooled)
               if self.embed_dim else pooled)
        return emb, {"tokens": x, "layers": tuple(layers), "mask": mask, "pooled": pooled,
                     "pre_head": pooled}


@config
class TextTransformerConfig(EncoderConfig):
    """``encoder.name=text_transformer``: a BERT over token ids; sizes that override the variant's
    (0 = the variant's), its pooling and the landmark chunk."""
    width: int = static(0, ">=0", "hidden width (0 = the variant's)")
    depth: int = static(0, ">=0", "layers (0 = the variant's)")
    num_heads: int = static(0, ">=0", "attention heads (0 = the variant's)")
    mlp_dim: int = static(0, ">=0", "FFN width (0 = the variant's)")
    pooling: str = static("mean", ALL_POOLINGS, "token pooling")
    landmark_chunk: int = static(16, ">0", "landmark pooling: tokens per chunk")


def text_max_len(length: int, chunk: int = 16) -> int:
    """Positions a text encoder needs for ``length`` tokens plus a landmark every ``chunk``."""
    return max(length + -(-length // chunk), 8)


def _fields(e: TextTransformerConfig, *, input_shape, vocab, **_) -> dict:
    return {**sizes(e, {"width": "width", "depth": "depth", "num_heads": "num_heads",
                        "mlp_dim": "mlp_dim"}),
            "vocab_size": len(vocab), "pooling": e.pooling,
            "max_len": text_max_len(input_shape[0], e.landmark_chunk),
            "landmark_chunk": e.landmark_chunk, "landmark_id": vocab.index("[SEP]")}


FAMILY = Family(TextTransformer, VARIANTS, TextTransformerConfig, _fields, reads="tokens",
                remat=True, lora_layers=DENSE_LAYERS, lora_default=LORA_TARGETS,
                mixed_precision=True)
