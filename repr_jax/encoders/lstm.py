"""(Bi)LSTM sentence encoder over token ids with InferSent-style max pooling (Conneau et al. 2017).

Padding is handled by sequence lengths: the backward direction starts at each row's last real
token, and poolings ignore padded positions.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax.config import EncoderConfig, config, static
from repr_jax.encoders.family import Family, sizes
from repr_jax.encoders.pooling import ALL_POOLINGS, pool_tokens
from repr_jax.encoders.text_transformer import text_max_len

VARIANTS = {
    "tiny": dict(hidden=16, depth=1, embed_width=16),
    "S": dict(hidden=512, depth=1, embed_width=300),
    "B": dict(hidden=2048, depth=1, embed_width=300),  # InferSent's BiLSTM-max
}


class LSTMEncoder(nn.Module):
    """Args: token ids ``[B, T]`` (``pad_id`` = padding). Returns ``(embedding, features)`` with
    ``tokens`` ``[B, T, H or 2H]``, ``layers``, ``mask``, ``pooled`` and ``pre_head``."""
    vocab_size: int = 30522
    hidden: int = 512
    depth: int = 1
    embed_width: int = 300
    bidirectional: bool = True
    pooling: str = "max"
    pad_id: int = 0
    max_len: int = 512  # accepted for a common interface with the transformers; unused
    embed_dim: int = 0

    @nn.compact
    def __call__(self, ids: jax.Array, *, train: bool = False):
        del train
        ids = ids.astype(jnp.int32)
        mask = ids != self.pad_id
        lengths = jnp.sum(mask, axis=1)
        x = nn.Embed(self.vocab_size, self.embed_width, name="embed_tokens")(ids)
        layers = []
        for i in range(self.depth):
            fwd = nn.RNN(nn.OptimizedLSTMCell(self.hidden), name=f"fwd{i}")
            if self.bidirectional:
                bwd = nn.RNN(nn.OptimizedLSTMCell(self.hidden), reverse=True, keep_order=True,
                             name=f"bwd{i}")
                x = nn.Bidirectional(fwd, bwd, name=f"bilstm{i}")(x, seq_lengths=lengths)
            else:
                x = fwd(x, seq_lengths=lengths)
            x = jnp.where(mask[..., None], x, 0.0)
            layers.append(x)
        if self.pooling == "landmark":
            raise ValueError("landmark pooling needs a transformer (encoder.name=text_transformer)")
        pooled = pool_tokens(self.pooling, x, mask, layers)
        emb = nn.Dense(self.embed_dim, name="embed")(pooled) if self.embed_dim else pooled
        return emb, {"tokens": x, "layers": tuple(layers), "mask": mask, "pooled": pooled,
                     "pre_head": pooled}


@config
class LSTMConfig(EncoderConfig):
    """``encoder.name=lstm``: sizes that override the variant's (0 = the variant's) and the
    pooling (landmarks need a transformer)."""
    width: int = static(0, ">=0", "hidden size (0 = the variant's)")
    depth: int = static(0, ">=0", "layers (0 = the variant's)")
    pooling: str = static("mean", tuple(p for p in ALL_POOLINGS if p != "landmark"),
                          "token pooling")


def _fields(e: LSTMConfig, *, input_shape, vocab, **_) -> dict:
    return {**sizes(e, {"width": "hidden", "depth": "depth"}), "vocab_size": len(vocab),
            "pooling": e.pooling, "max_len": text_max_len(input_shape[0])}


FAMILY = Family(LSTMEncoder, VARIANTS, LSTMConfig, _fields, reads="tokens")
