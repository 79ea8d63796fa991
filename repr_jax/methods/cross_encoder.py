"""The cross-encoder reranker: one text transformer reads a query and a document together.

Input ``[CLS] query [SEP] document [SEP]`` with segment ids 0 / 1 (BERT's sentence pairs, as
sentence-transformers' ``CrossEncoder`` and Tevatron's reranker build it), a scalar head on the
``[CLS]`` state: ``score(q, d)`` is that logit. Queries and documents arrive tokenised apart (the
data's ``x``, ``x_pos`` and ``negatives``, each ``[CLS] ... [SEP]`` right-padded); :func:`pack_pairs`
joins them without the padding between, so positions and segments are those of the joint
tokenisation. Each side keeps its own truncation (``data.query_max_len`` / ``doc_max_len``).

Training scores each query against its positive and ``K`` negatives — the data's hard negatives
(``negatives_per_query``) or, without them, the next ``batch_negatives`` queries' positives in the
batch — in one encoder pass over ``B (1 + K)`` pairs, with a listwise softmax over the ``1 + K``
candidates (the positive first: Tevatron's reranker, sentence-transformers' ``CrossEntropyLoss``)
or pointwise binary cross-entropy (positive 1, negatives 0: sentence-transformers'
``BinaryCrossEntropyLoss``). Cost a step: ``O(B (1 + K) (Tq + Td)^2)`` attention.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from repr_jax.config import ConfigError, MethodConfig, config, static
from repr_jax.methods.base import (BuildContext, Method, MethodSpec, apply_train,
                                   hard_negatives, text_pairs_vocab)

OBJECTIVES = ("listwise", "bce")


def pack_pairs(q_BxTq: jax.Array, d_BxTd: jax.Array, pad_id: int
               ) -> tuple[jax.Array, jax.Array]:
    """``(ids, segment_ids)`` ``[B, Tq + Td - 1]``: each query's tokens up to its ``[SEP]``, then
    the document's without its ``[CLS]``, then padding; segment 1 marks the document's tokens.
    Both inputs are right-padded with ``pad_id``. Time and memory ``O(B (Tq + Td))``.

    >>> ids, seg = pack_pairs(jnp.asarray([[101, 7, 102, 0]]), jnp.asarray([[101, 8, 9, 102]]), 0)
    >>> ids.tolist(), seg.tolist()
    ([[101, 7, 102, 8, 9, 102, 0]], [[0, 0, 0, 1, 1, 1, 0]])
    """
    tq, td = q_BxTq.shape[1], d_BxTd.shape[1]
    lq = jnp.sum(q_BxTq != pad_id, axis=1)[:, None]
    ld = jnp.sum(d_BxTd != pad_id, axis=1)[:, None]
    t = jnp.arange(tq + td - 1)[None, :]
    in_q = t < lq
    d_pos = t - lq + 1  # the document's token at joint position t (its [CLS] at 0 is skipped)
    in_d = ~in_q & (d_pos < ld)
    q_tok = jnp.take_along_axis(q_BxTq, jnp.minimum(t, tq - 1).repeat(len(q_BxTq), 0), axis=1)
    d_tok = jnp.take_along_axis(d_BxTd, jnp.clip(d_pos, 0, td - 1), axis=1)
    ids = jnp.where(in_q, q_tok, jnp.where(in_d, d_tok, pad_id))
    return ids.astype(q_BxTq.dtype), in_d.astype(jnp.int32)


class CrossEncoder(nn.Module):
    """``score(q, d) -> [B]``: the head's logit on the ``[CLS]`` state of the packed pair;
    ``embed(x)``: the encoder's own pooled embedding of one text (what the standard evaluation
    battery reads)."""
    encoder: nn.Module
    pad_id: int = 0

    def setup(self):
        self.head = nn.Dense(1, name="head")

    def __call__(self, batch, *, train: bool = False):
        return self.score(batch["x"], batch["x_pos"], train=train)

    def score(self, q, d, *, train: bool = False):
        ids, segments = pack_pairs(q, d, self.pad_id)
        _, features = self.encoder(ids, train=train, segment_ids=segments)
        return self.head(features["tokens"][:, 0])[:, 0]

    def embed(self, x):
        return self.encoder(x, train=False)[0]

    def embed_layers(self, x):
        from repr_jax.encoders.pooling import layer_summaries
        return layer_summaries(*self.encoder(x, train=False))


def candidates(batch, negatives: int, batch_negatives: int) -> jax.Array:
    """``[B, 1 + K, Td]``: each query's positive, then its K negatives: the data's first
    ``negatives`` hard negatives, else the positives of the next ``batch_negatives`` queries."""
    pos = batch["x_pos"]
    if negatives:
        return jnp.concatenate([pos[:, None], batch["negatives"][:, :negatives]], axis=1)
    if batch_negatives >= len(pos):
        raise ValueError(f"method.batch_negatives={batch_negatives} must be below the batch "
                         f"({len(pos)} pairs a micro-batch): a query would meet its own positive")
    shifted = [jnp.roll(pos, -(j + 1), axis=0) for j in range(batch_negatives)]
    return jnp.stack([pos] + shifted, axis=1)


def cross_encoder(encoder: nn.Module, *, pad_id: int, objective: str, negatives: int,
                  batch_negatives: int) -> Method:
    """The cross-encoder method (module docstring) over ``encoder`` (a text transformer that
    takes ``segment_ids``)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown cross_encoder objective {objective!r}; choose from: "
                         f"{', '.join(OBJECTIVES)}")
    model = CrossEncoder(encoder, pad_id)

    def loss(params, model_state, extra, batch, key, hp):
        del key
        if negatives:
            hard_negatives(batch)  # one line when the data has none
        docs = candidates(batch, negatives, batch_negatives)
        b, c = docs.shape[:2]
        queries = jnp.repeat(batch["x"], c, axis=0)
        scores, model_state = apply_train(model, params, model_state, queries,
                                          docs.reshape(b * c, -1), method=CrossEncoder.score)
        scores_BxC = scores.reshape(b, c).astype(jnp.float32)
        if objective == "listwise":
            value = optax.softmax_cross_entropy_with_integer_labels(
                scores_BxC, jnp.zeros(b, jnp.int32)).mean()
        else:
            labels = jnp.zeros_like(scores_BxC).at[:, 0].set(1.0)
            value = optax.sigmoid_binary_cross_entropy(scores_BxC, labels).mean()
        metrics = {"rank_accuracy": jnp.mean(jnp.argmax(scores_BxC, axis=1) == 0),
                   "margin": jnp.mean(scores_BxC[:, 0] - jnp.max(scores_BxC[:, 1:], axis=1))}
        return hp.loss_weight * value, (model_state, extra, metrics)

    return Method("cross_encoder", model, loss)


@config
class CrossEncoderConfig(MethodConfig):
    objective: str = static("listwise", OBJECTIVES, "listwise: softmax over the positive and its "
                                                    "negatives; bce: each pair on its own")
    negatives_per_query: int = static(0, ">=0", "hard negatives per query from the data "
                                                "(pairs:FILE lines' 'negatives'); 0 = in-batch")
    batch_negatives: int = static(3, ">0", "without hard negatives: the next N queries' "
                                           "positives in the batch are each query's negatives")


def build(section: CrossEncoderConfig, ctx: BuildContext) -> Method:
    from repr_jax.data.tokenizer import pad_id_of
    vocab, train = text_pairs_vocab("cross_encoder", ctx), ctx.dataset.splits["train"]
    if "[CLS]" not in vocab or "[SEP]" not in vocab:
        raise ConfigError("method 'cross_encoder' joins texts as [CLS] q [SEP] d [SEP]: use a "
                          "tokenizer with those tokens (data.tokenizer=minilm, a BERT vocab.txt "
                          "or the byte tokenizer)")
    encoder = ctx.encoder()
    if not hasattr(encoder, "type_vocab_size"):
        raise ConfigError(f"method 'cross_encoder' needs encoder.name=text_transformer (segment "
                          f"ids), not {type(encoder).__name__}")
    joint = train["x"].shape[1] + train["x_pos"].shape[1] - 1
    if encoder.max_len < joint:
        encoder = encoder.clone(max_len=joint)
    return cross_encoder(encoder, pad_id=pad_id_of(vocab), objective=section.objective,
                         negatives=section.negatives_per_query,
                         batch_negatives=section.batch_negatives)


CROSS_ENCODER = MethodSpec(CrossEncoderConfig, build)
