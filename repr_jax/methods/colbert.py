"""ColBERT: late interaction (Khattab & Zaharia 2020; Santhanam et al. 2022).

One text transformer reads queries and documents apart; each token state goes through a linear
projection without bias (``dim``, 128 by default) and is L2-normalised. A query scores a document
by MaxSim: the sum over the query's tokens of the best cosine with any of the document's tokens.
Options as ColBERT's: ``query_expansion`` pads every query with ``[MASK]`` tokens to the data's
query length, which the encoder attends to and which take part in MaxSim (query augmentation);
``mask_punctuation`` leaves documents' punctuation tokens out of MaxSim (ColBERT's skiplist).

Training is contrastive, as the bi-encoder's: each query's softmax over ``MaxSim / temperature``
of the global batch's positives and (with ``negatives_per_query``) hard negatives, its own
positive the target (PyLate's ``Contrastive``). Cost a step: the encoder on ``B (2 + K)`` texts,
and ``O(B^2 (1 + K) Tq Td dim)`` for the MaxSim scores.
"""

from __future__ import annotations

import string

import flax.linen as nn
import jax.numpy as jnp
import optax

from repr_jax.config import ConfigError, MethodConfig, config, hyper, static
from repr_jax.eval.late_interaction import maxsim, paired_maxsim
from repr_jax.methods.base import (BuildContext, Method, MethodSpec, apply_train,
                                   documents_and_negatives, text_pairs_vocab)
from repr_jax.objectives import l2_normalize


class ColBERT(nn.Module):
    """``tokens(ids, side)`` -> ``(vectors [B, T, dim], mask [B, T])``; ``score(q, d)`` ->
    ``[B]`` MaxSim; ``embed(x)``: the mean of a text's token vectors (a single-vector summary
    for the evaluation battery)."""
    encoder: nn.Module
    dim: int = 128
    pad_id: int = 0
    mask_id: int = -1  # [MASK]: query expansion when >= 0
    query_len: int = 32  # a query is expanded to this many tokens
    punctuation: tuple[int, ...] = ()  # document token ids left out of MaxSim

    def setup(self):
        self.project = nn.Dense(self.dim, use_bias=False, name="project")

    def __call__(self, batch, *, train: bool = False):
        q = self.tokens(batch["x"], "query", train=train)
        d = self.tokens(batch["x_pos"], "doc", train=train)
        return q, d

    def tokens(self, ids, side: str = "doc", *, train: bool = False):
        valid = ids != self.pad_id
        if side == "query" and self.mask_id >= 0:
            if ids.shape[1] < self.query_len:
                ids = jnp.pad(ids, ((0, 0), (0, self.query_len - ids.shape[1])),
                              constant_values=self.pad_id)
            ids = jnp.where(ids == self.pad_id, self.mask_id, ids)
            valid = jnp.ones(ids.shape, bool)
        _, features = self.encoder(ids, train=train)
        vectors = l2_normalize(self.project(features["tokens"]))
        if side == "doc" and self.punctuation:
            valid = valid & ~jnp.isin(ids, jnp.asarray(self.punctuation))
        return vectors, valid

    def score(self, q, d, *, train: bool = False):
        return paired_maxsim(*self.tokens(q, "query", train=train),
                             *self.tokens(d, "doc", train=train))

    def embed(self, x):
        vectors, valid = self.tokens(x, "doc")
        pooled = jnp.sum(vectors * valid[..., None], 1) / jnp.maximum(valid.sum(1), 1)[:, None]
        return pooled

    def embed_tokens_query(self, x):
        return self.tokens(x, "query")

    def embed_tokens_doc(self, x):
        return self.tokens(x, "doc")


def colbert(encoder: nn.Module, *, dim: int, pad_id: int, negatives: int, mask_id: int = -1,
            query_len: int = 32, punctuation: tuple[int, ...] = ()) -> Method:
    """The ColBERT method (module docstring)."""
    model = ColBERT(encoder, dim, pad_id, mask_id, query_len, punctuation)

    def loss(params, model_state, extra, batch, key, hp):
        del key
        docs = documents_and_negatives(batch, negatives)
        (q, q_mask), model_state = apply_train(model, params, model_state, batch["x"], "query",
                                               method=ColBERT.tokens)
        (d, d_mask), model_state = apply_train(model, params, model_state, docs, "doc",
                                               method=ColBERT.tokens)
        scores = maxsim(q, q_mask, d, d_mask).astype(jnp.float32)  # [B, B (1 + K)]
        labels = jnp.arange(q.shape[0])
        value = optax.softmax_cross_entropy_with_integer_labels(
            scores / hp.temperature, labels).mean()
        metrics = {"rank_accuracy": jnp.mean(jnp.argmax(scores, axis=1) == labels),
                   "maxsim_pos": jnp.mean(scores[labels, labels])}
        return hp.loss_weight * value, (model_state, extra, metrics)

    return Method("colbert", model, loss)


@config
class ColBERTConfig(MethodConfig):
    dim: int = static(128, ">0", "width of each token vector (ColBERT's linear projection)")
    temperature: float = hyper(1.0, ">0", "softmax temperature over the MaxSim scores")
    negatives_per_query: int = static(0, ">=0", "hard negatives per query from the data "
                                                "(pairs:FILE lines' 'negatives')")
    query_expansion: bool = static(False, doc="pad queries with [MASK] tokens to the query "
                                              "length; they are attended to and scored")
    mask_punctuation: bool = static(False, doc="leave documents' punctuation tokens out of "
                                               "MaxSim (ColBERT's skiplist)")


def build(section: ColBERTConfig, ctx: BuildContext) -> Method:
    from repr_jax.data.tokenizer import pad_id_of
    vocab, train = text_pairs_vocab("colbert", ctx), ctx.dataset.splits["train"]
    if section.query_expansion and "[MASK]" not in vocab:
        raise ConfigError("method.query_expansion pads queries with [MASK]: use a WordPiece "
                          "vocabulary (data.tokenizer=minilm or a BERT vocab.txt)")
    punctuation = tuple(i for i, t in enumerate(vocab) if t and all(
        c in string.punctuation for c in t)) if section.mask_punctuation else ()
    return colbert(ctx.encoder(), dim=section.dim, pad_id=pad_id_of(vocab),
                   negatives=section.negatives_per_query,
                   mask_id=vocab.index("[MASK]") if section.query_expansion else -1,
                   query_len=train["x"].shape[1], punctuation=punctuation)


COLBERT = MethodSpec(ColBERTConfig, build)
