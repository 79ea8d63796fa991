"""Two towers over paired inputs (``x`` and ``x_pos``, possibly of different modalities/shapes):
CLIP, SigLIP and the retrieval bi-encoder.

Each tower is an encoder with a linear projection; the evaluated representation is tower A's
embedding, and cross-tower retrieval (query ``x`` → document ``x_pos``) uses the space the objective
aligned: the projections (or, with Matryoshka, the embeddings). CLIP and SigLIP learn their logit scale (and SigLIP its bias) as parameters.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax import objectives as O
from repr_jax.config import ConfigError, config, hyper, static
from repr_jax.methods.base import (BuildContext, MatryoshkaConfig, Method, MethodSpec, Tower,
                                   apply_train, grad_cache_loss, hard_negatives, head,
                                   normalized_std, pair_options)
from repr_jax.methods.siamese import matryoshka_objective

BIENCODER_OBJECTIVES = ("info_nce", "graded_bce", "kl_distill", "margin_mse")


class TwoTowers(nn.Module):
    """Tower A reads ``x`` (queries), tower B ``x_pos`` (documents); with ``tower_b=None`` (tied
    towers) tower A reads both."""
    tower_a: Tower
    tower_b: Tower | None
    init_logit_scale: float = 0.0  # log of the initial multiplier
    init_logit_bias: float | None = None
    aligned: str = "projection"  # the space the objective aligns: "projection" | "embedding"

    @nn.compact
    def __call__(self, batch, *, train: bool = False):
        # packed token positions (data.pack_tokens) reach the encoder only where a batch has them
        out_a = self.tower_a(batch["x"], train=train, **_packing(batch, "x"))
        out_b = self.doc_tower()(batch["x_pos"], train=train, **_packing(batch, "x_pos"))
        log_scale = self.param("logit_scale", nn.initializers.constant(self.init_logit_scale), ())
        bias = (self.param("logit_bias", nn.initializers.constant(self.init_logit_bias), ())
                if self.init_logit_bias is not None else None)
        return out_a, out_b, log_scale, bias

    def doc_tower(self) -> Tower:
        return self.tower_a if self.tower_b is None else self.tower_b

    def embed(self, x):
        return self.tower_a.embed(x)

    def _aligned(self, tower: Tower, x):
        emb, _, z, _ = tower(x, train=False)
        return z if self.aligned == "projection" else emb

    def embed_query(self, x):
        return self._aligned(self.tower_a, x)

    def embed_pos(self, x_pos):
        return self._aligned(self.doc_tower(), x_pos)

    def embed_layers(self, x):
        return self.tower_a.embed_layers(x)


def _packing(batch, key: str) -> dict:
    pack = batch.get(f"{key}_pack")
    return {} if pack is None else {"pack": pack}


def spread_out_terms(a_BxD: jax.Array, b_BxD: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The spread-out regulariser's ``(mean_term, second_moment)`` of the queries ``a`` plus
    those of the documents ``b`` (:func:`repr_jax.objectives.spread_out` on each, summed:
    sentence-transformers' ``GlobalOrthogonalRegularizationLoss`` with aggregation "sum")."""
    (mean_a, second_a), (mean_b, second_b) = O.spread_out(a_BxD), O.spread_out(b_BxD)
    return mean_a + mean_b, second_a + second_b


def spread_out_penalty(a_BxD: jax.Array, b_BxD: jax.Array, hp) -> tuple[jax.Array, jax.Array]:
    """``(hp.spread_out * second_moment + hp.spread_out_mean * mean_term, second_moment)`` of
    :func:`spread_out_terms`: the term the loss adds and the unweighted second moment it logs."""
    mean_term, second_moment = spread_out_terms(a_BxD, b_BxD)
    return hp.spread_out * second_moment + hp.spread_out_mean * mean_term, second_moment


def dual_encoder(name: str, encoder_a, encoder_b, views_fn: Callable, objective, *, proj_dim: int,
                 init_logit_scale: float = 0.0, init_logit_bias: float | None = None,
                 matryoshka_dims: Sequence[int] = (), matryoshka_layers: bool = False,
                 grad_cache_chunk: int = 0, negatives: int = 0, tied: bool = False,
                 spread_out: bool = False) -> Method:
    """``objective(a, b, log_scale, bias, batch, hp)`` on the two towers' projections (or, with
    ``matryoshka_dims``, on nested prefixes of their embeddings). ``grad_cache_chunk``: its
    gradient by a gradient cache over chunks of that many pairs.

    ``negatives=K``: the batch's ``negatives [B, K, ...]`` (hard negatives of each query) go
    through tower B too, and the objective is called with ``negatives=[B, K, D]``. The loss is
    written on the global batch, so under ``jax.jit`` with the batch sharded over the mesh XLA
    gathers every device's documents and negatives: each query scores the whole global batch.

    ``tied``: one tower (encoder and projection) reads queries and documents (``encoder_b`` is
    not used): half the parameters and optimizer state.

    ``spread_out``: the loss adds :func:`spread_out_penalty` (weights ``hp.spread_out`` and
    ``hp.spread_out_mean``) of the compared queries and documents: the projections, or the
    full-width embeddings with Matryoshka (and ``proj_dim=0``); computed (O(B^2 D)) even at
    weight 0, since the weights are traced leaves, and logged as ``spread_out``."""
    if negatives and matryoshka_dims:
        raise ValueError("method.negatives_per_query with Matryoshka dims is not supported: "
                         "set one of them to 0 / ()")

    def per_negative(apply, x_BxK):
        """``apply`` on ``[B, K, ...]`` negatives as ``B K`` rows: ``[B, K, D]``."""
        return apply(x_BxK.reshape(-1, *x_BxK.shape[2:])).reshape(*x_BxK.shape[:2], -1)

    model = TwoTowers(Tower(encoder_a, head(proj_dim, 0, "none") if proj_dim else None),
                      None if tied else
                      Tower(encoder_b, head(proj_dim, 0, "none") if proj_dim else None),
                      init_logit_scale, init_logit_bias,
                      aligned="embedding" if matryoshka_dims or not proj_dim else "projection")
    cached = None
    if grad_cache_chunk:
        def tower(which):
            return lambda params, x: model.apply(
                {"params": params}, x, method=lambda m, x: (
                    m.tower_a if which == "tower_a" else m.doc_tower())(x, train=True)[2])

        def cached_objective(params, aux, za, zb, *zn):
            extra = {"negatives": zn[0].reshape(za.shape[0], negatives, -1)} if zn else {}
            value = jnp.mean(objective(za, zb, params["logit_scale"], params.get("logit_bias"),
                                       *aux, **extra))
            return value + spread_out_penalty(za, zb, aux[1])[0] if spread_out else value

        fns = (tower("tower_a"), tower("tower_b"))
        if negatives:
            tower_b = tower("tower_b")
            fns += (lambda params, xn: per_negative(lambda x: tower_b(params, x), xn
                                                    ).reshape(xn.shape[0], -1),)
        cached = grad_cache_loss(name, fns, cached_objective, grad_cache_chunk,
                                 bool(matryoshka_dims))

    def loss(params, model_state, extra, batch, key, hp):
        ka, kb, kn = jax.random.split(key, 3)
        views = dict(batch, x=views_fn(ka, batch["x"]), x_pos=views_fn(kb, batch["x_pos"]))
        if negatives:
            n = hard_negatives(batch)
            views["negatives"] = views_fn(kn, n.reshape(-1, *n.shape[2:])).reshape(n.shape)
        if cached is not None:
            inputs = (views["x"], views["x_pos"]) + ((views["negatives"],) if negatives else ())
            value = cached(params, model_state, inputs, (batch, hp))
            return hp.loss_weight * value, (model_state, extra,
                                            {"logit_scale": jnp.exp(params["logit_scale"])})
        ((emb_a, fa, za, _), (emb_b, fb, zb, _), log_scale, bias), model_state = apply_train(
            model, params, model_state, views)
        hard = {}
        if negatives:
            def apply_b(x):
                return apply_train(model, params, model_state, x,
                                   method=lambda m, x, train: m.doc_tower()(x, train=train)[2])[0]
            hard = {"negatives": per_negative(apply_b, views["negatives"])}
        if matryoshka_dims:
            nested = matryoshka_objective(
                lambda a, b, batch, hp: objective(a, b, log_scale, bias, batch, hp),
                tuple(matryoshka_dims), matryoshka_layers)
            value = nested(emb_a, emb_b, fa.get("layers", ()), fb.get("layers", ()), batch, hp)
        else:
            value = jnp.mean(objective(za, zb, log_scale, bias, batch, hp, **hard))
        metrics = {"emb_std": normalized_std(emb_a), "logit_scale": jnp.exp(log_scale)}
        if spread_out:  # on the compared space: the full-width embeddings under Matryoshka
            penalty, metrics["spread_out"] = spread_out_penalty(
                *((emb_a, emb_b) if matryoshka_dims else (za, zb)), hp)
            value = value + penalty
        return hp.loss_weight * value, (model_state, extra, metrics)

    return Method(name, model, loss)


def clip(encoder_a, encoder_b, views_fn, *, proj_dim: int, **options) -> Method:
    """CLIP (Radford et al. 2021): symmetric InfoNCE with a learned temperature (init 1/0.07,
    multiplier capped at 100 as in open_clip)."""
    def objective(a, b, log_scale, bias, batch, hp):
        del bias, batch, hp
        scale = jnp.minimum(jnp.exp(log_scale), 100.0)
        return O.clip_loss(O.l2_normalize(a), O.l2_normalize(b), scale)

    return dual_encoder("clip", encoder_a, encoder_b, views_fn, objective, proj_dim=proj_dim,
                        init_logit_scale=math.log(1 / 0.07), **options)


def siglip(encoder_a, encoder_b, views_fn, *, proj_dim: int, **options) -> Method:
    """SigLIP (Zhai et al. 2023): pairwise sigmoid loss, learned scale (init 10) and bias (init -10)."""
    def objective(a, b, log_scale, bias, batch, hp):
        del batch, hp
        return O.siglip_loss(O.l2_normalize(a), O.l2_normalize(b), jnp.exp(log_scale), bias)

    return dual_encoder("siglip", encoder_a, encoder_b, views_fn, objective, proj_dim=proj_dim,
                        init_logit_scale=math.log(10.0), init_logit_bias=-10.0, **options)


def graded_relevance(labels: jax.Array) -> jax.Array:
    """In-batch graded qrels ``[B, B]``: 1 for the paired document, 0.5 for another document of the
    query's class, 0 otherwise."""
    same = (labels[:, None] == labels[None, :]).astype(jnp.float32)
    eye = jnp.eye(labels.shape[0])
    return eye + 0.5 * same * (1.0 - eye)


def ranking_objective(objective: str, *, normalize: bool = True, method: str = "biencoder"):
    """``fn(q [B, D], d [B, D], batch, hp, negatives [B, K, D] | None) -> [B]``: the query/document
    ranking loss ``objective`` (one of :data:`BIENCODER_OBJECTIVES`) on a batch's embeddings, with
    ``hp.temperature``; ``batch`` gives ``label`` (``graded_bce``), the teacher's ``scores
    [B, 1 + K]`` (``margin_mse``, ``kl_distill`` with negatives) or teacher embeddings
    (``kl_distill`` without). ``normalize``: InfoNCE and ``kl_distill`` compare cosines (a
    dense bi-encoder); False, dot products (a sparse encoder's term weights). ``margin_mse``
    always takes dot products. ``method`` names the caller in errors."""
    unit = O.l2_normalize if normalize else (lambda x: x)

    def fn(a, b, batch, hp, negatives=None):
        if objective == "info_nce":
            return O.info_nce(a, b, hp.temperature, negatives=negatives, normalize=normalize)
        if objective == "graded_bce":
            return O.graded_bce(a, b, graded_relevance(batch["label"]), hp.temperature)
        if negatives is not None:  # distillation from a teacher's scores of each candidate
            if "scores" not in batch:
                raise ValueError(f"{method} objective {objective} needs the teacher's scores "
                                 f"in the data (pairs:FILE lines with positive_score and "
                                 f"negative_scores)")
            docs_BxCxD = jnp.concatenate([b[:, None], negatives], axis=1)
            teacher = batch["scores"].astype(jnp.float32)
            if objective == "margin_mse":
                s = jnp.einsum("bd,bcd->bc", a, docs_BxCxD).astype(jnp.float32)
                return O.margin_mse(s[:, 0], s[:, 1:], teacher[:, 0], teacher[:, 1:])
            s = jnp.einsum("bd,bcd->bc", unit(a), unit(docs_BxCxD))
            return O.kl_distill(s / hp.temperature, teacher)
        if "teacher" not in batch:
            raise ValueError(f"{method} objective kl_distill needs 'teacher' and 'teacher_pos' "
                             f"features (teacher embeddings) in the data, e.g. latent_modalities")
        student = unit(a) @ unit(b).T / hp.temperature
        teacher = (unit(batch["teacher"]) @ unit(batch["teacher_pos"]).T / hp.temperature)
        return O.kl_distill(student, teacher)

    return fn


def biencoder(encoder_a, encoder_b, views_fn, *, proj_dim: int, objective: str,
              negatives_per_query: int = 0, tied_towers: bool = False, **options) -> Method:
    """A query/document bi-encoder trained with ``info_nce`` (in-batch negatives), ``graded_bce``
    (graded in-batch relevance, BiXSE), ``kl_distill`` or ``margin_mse`` (distillation).

    ``negatives_per_query=K``: with ``info_nce``, each query's softmax runs over the global
    batch's B positives and its B x K hard negatives (its own K and every other query's), as
    sentence-transformers' MultipleNegativesRankingLoss with negative columns and Tevatron's
    ``train_n_passages = K + 1`` do. With ``margin_mse`` (which needs them) and ``kl_distill``
    the data's teacher scores of each query's positive and K negatives (``scores [B, 1 + K]``,
    e.g. a cross-encoder's from ``repr-jax score``) are the targets: ``margin_mse`` matches the
    student's dot-product margins ``s(q, d+) - s(q, d-)`` to the teacher's (Hofstätter et al.
    2020; sentence-transformers' ``MarginMSELoss``), ``kl_distill`` the softmax over the
    ``1 + K`` candidates of ``cos / temperature`` to the softmax of the teacher's scores.
    ``kl_distill`` without K matches a teacher's in-batch score distribution instead, from
    teacher embeddings in the data (``teacher`` / ``teacher_pos``).

    ``hp.spread_out`` / ``hp.spread_out_mean`` weight the spread-out regulariser (EmbeddingGemma,
    Zhang et al. 2017) on the queries and on the documents: :func:`spread_out_penalty`."""
    if objective not in BIENCODER_OBJECTIVES:
        raise ValueError(f"unknown biencoder objective {objective!r}; choose from: "
                         f"{', '.join(BIENCODER_OBJECTIVES)}")
    if negatives_per_query and objective == "graded_bce":
        raise ValueError("method.negatives_per_query applies to objectives info_nce, kl_distill "
                         "and margin_mse, not 'graded_bce'")
    if objective == "margin_mse" and not negatives_per_query:
        raise ValueError("method.objective=margin_mse needs method.negatives_per_query >= 1 (the "
                         "margins are between a positive and the data's hard negatives)")

    ranking = ranking_objective(objective)

    def fn(a, b, log_scale, bias, batch, hp, negatives=None):
        del log_scale, bias
        return ranking(a, b, batch, hp, negatives)

    return dual_encoder("biencoder", encoder_a, encoder_b, views_fn, fn, proj_dim=proj_dim,
                        negatives=negatives_per_query, tied=tied_towers, spread_out=True,
                        **options)


# --------------------------------------------------------------------------------------------------
# Config sections and registry entries
# --------------------------------------------------------------------------------------------------

@config
class DualEncoderConfig(MatryoshkaConfig):
    """CLIP and SigLIP: a linear projection on each tower, learned scale (and bias)."""
    proj_dim: int = static(128, ">=0", "projection output width (the space pairs are compared "
                                       "in); 0 = none: the encoders' embeddings are compared, as "
                                       "sentence-transformers fine-tunes")


@config
class BiEncoderConfig(DualEncoderConfig):
    objective: str = static("info_nce", BIENCODER_OBJECTIVES, "the in-batch objective")
    temperature: float = hyper(0.5, ">0", "softmax temperature")
    negatives_per_query: int = static(0, ">=0", "hard negatives per query from the data "
                                      "(pairs:FILE lines' 'negatives'): info_nce's softmax spans "
                                      "the global batch's positives and negatives; margin_mse "
                                      "and kl_distill read the teacher's scores of each")
    tied_towers: bool = static(False, doc="one encoder (and projection) for queries and "
                                          "documents, told apart by data.query_prefix/doc_prefix"
                                          " (sentence-transformers' and Tevatron's default)")
    spread_out: float = hyper(0.0, ">=0", "weight of the spread-out regulariser (EmbeddingGemma): "
                              "the mean squared off-diagonal cosine of the batch's queries plus "
                              "that of its documents, added to the loss")
    spread_out_mean: float = hyper(0.0, ">=0", "weight of its first-moment term (Zhang et al. "
                                   "2017): the squared mean off-diagonal cosine, queries plus "
                                   "documents")

    def _validate(self):
        super()._validate()
        if self.objective == "margin_mse" and not self.negatives_per_query:
            raise ConfigError("method.objective=margin_mse needs method.negatives_per_query >= 1 "
                              "(the margins are between a positive and the data's hard "
                              "negatives, with a teacher's scores: repr-jax score)")
        if self.objective == "graded_bce" and self.negatives_per_query:
            raise ConfigError("method.negatives_per_query applies to objectives info_nce, "
                              "kl_distill and margin_mse, not 'graded_bce'")


def _towers(builder, *own: str):
    """``build(section, ctx)`` of a two-tower method; ``own``: section fields its builder takes."""
    def build(section, ctx: BuildContext) -> Method:
        if "x_pos" not in ctx.dataset.splits["train"]:
            raise ConfigError(f"method {section.name!r} needs paired data with an 'x_pos' feature "
                              f"(e.g. data.name=latent_modalities or latent_classes); "
                              f"{ctx.dataset.name!r} has {sorted(ctx.dataset.splits['train'])}")
        return builder(ctx.encoder(), ctx.encoder(), ctx.views_fn, proj_dim=section.proj_dim,
                       **{k: getattr(section, k) for k in own}, **pair_options(section, ctx))
    return build


CLIP = MethodSpec(DualEncoderConfig, _towers(clip), grad_cache=True)
SIGLIP = MethodSpec(DualEncoderConfig, _towers(siglip), grad_cache=True)
BIENCODER = MethodSpec(BiEncoderConfig, _towers(biencoder, "objective", "negatives_per_query",
                                                "tied_towers"), grad_cache=True)
