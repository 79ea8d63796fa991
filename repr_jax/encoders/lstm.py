"""(Bi)LSTM sentence encoder over token ids with InferSent-style max pooling (Conneau et al. 2017).

Padding is handled by sequence lengths: the backward direction starts at each row's last real
token, and poolings ignore padded positions.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax.encoders.pooling import pool_tokens

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
