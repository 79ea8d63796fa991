"""What a method is: a Flax model, a loss, and (optionally) state that gradients do not train.

A method file declares, for each of its methods, a config section (a subclass of
:class:`~repr_jax.config.MethodConfig` holding only that method's fields) and a builder
``build(section, ctx) -> Method``, bundled as a :class:`MethodSpec`; ``repr_jax.methods.METHODS``
lists the specs by name.

A :class:`Method` is built once from structural choices (encoders, head sizes, views). Its ``loss`` is
a pure function

    loss(params, model_state, extra, batch, key, hp) -> (loss, (model_state, extra, metrics))

where ``hp`` is the method's config section (its numeric fields are pytree leaves, possibly traced),
``model_state`` the non-trained collections (``batch_stats``) and ``extra`` method state such as an
EMA teacher or a queue of keys. ``after_update(extra, params, hp)`` runs after each optimizer step
(EMA updates); ``project_params(params, hp) -> params`` too, before it, for methods whose
parameters live on a constraint set (an SAE's unit-norm decoder rows, thresholds >= 0).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax.config import ConfigError, MethodConfig, config, hyper, static
from repr_jax.encoders import MLPHead
from repr_jax.encoders.pooling import layer_summaries
from repr_jax.methods.grad_cache import grad_cached
from repr_jax.objectives import l2_normalize

Batch = dict[str, jax.Array]
LossFn = Callable[..., tuple[jax.Array, tuple[dict, dict, dict]]]


def _no_extra(key: jax.Array, variables: dict) -> dict:
    del key, variables
    return {}


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    model: nn.Module  # model.init(key, batch, train=False); model.embed(x) -> [B, E]
    loss: LossFn
    init_extra: Callable[[jax.Array, dict], dict] = _no_extra  # (key, variables) -> extra
    after_update: Callable[[dict, Any, Any], dict] | None = None
    project_params: Callable[[Any, Any], Any] | None = None  # (params, hp) -> params, each step
    local_views: bool = False  # its loss takes multi-crop's local views (data.views.local_crops)

    def init(self, key: jax.Array, batch: Batch) -> dict:
        """All variables (``params`` and e.g. ``batch_stats``) for batches shaped like ``batch``."""
        return self.model.init(key, batch, train=False)

    def embed(self, variables: dict, x: jax.Array) -> jax.Array:
        """The representation ``[B, E]`` (eval mode): the evaluators' ``predict_fn``."""
        return self.model.apply(variables, x, method=self.model.embed)

    def embed_query(self, variables: dict, x: jax.Array) -> jax.Array:
        """A pair's first input in the space where pairs are compared (a dual encoder's aligned
        projection), otherwise :meth:`embed`: what retrieval over pairs uses."""
        return self.model.apply(variables, x,
                                method=getattr(self.model, "embed_query", self.model.embed))

    def embed_pos(self, variables: dict, x_pos: jax.Array) -> jax.Array:
        """A pair's second input in that space: the second tower of a dual encoder, otherwise
        :meth:`embed`."""
        return self.model.apply(variables, x_pos,
                                method=getattr(self.model, "embed_pos", self.model.embed))

    def embed_layers(self, variables: dict, x: jax.Array) -> tuple[jax.Array, ...]:
        """Every encoder layer pooled to ``[B, D_l]``, then the representation (eval mode)."""
        return self.model.apply(variables, x, method=self.model.embed_layers)

    @property
    def scores_pairs(self) -> bool:
        """Whether the model scores a query with a document itself (a cross-encoder, ColBERT's
        MaxSim): what reranking needs."""
        return hasattr(self.model, "score")

    def score(self, variables: dict, q: jax.Array, d: jax.Array) -> jax.Array:
        """``[B]`` relevance scores of query ``q[i]`` with document ``d[i]`` (eval mode)."""
        return self.model.apply(variables, q, d, method=self.model.score)

    @property
    def reconstructs(self) -> bool:
        """Whether the model reconstructs its inputs from the representation (an SAE): what the
        ``sae`` evaluator reads."""
        return hasattr(self.model, "reconstruct")

    def reconstruct(self, variables: dict, x: jax.Array) -> jax.Array:
        """The model's reconstruction of ``x``, shaped like it (eval mode)."""
        return self.model.apply(variables, x, method=self.model.reconstruct)

    @property
    def has_token_vectors(self) -> bool:
        """Whether the model gives one vector per token (ColBERT): late-interaction search."""
        return hasattr(self.model, "embed_tokens_query")

    def token_vectors(self, side: str):
        """``f(variables, ids) -> (vectors [B, T, d], mask [B, T])`` of queries (``side=
        "query"``) or documents (``"doc"``), eval mode; the same function object each call, so
        that a compiled copy of it is found again (a new one would compile every shape anew)."""
        return self._token_fns[side]

    @functools.cached_property
    def _token_fns(self) -> dict[str, Callable]:
        def side_fn(name):
            return lambda variables, x: self.model.apply(variables, x,
                                                         method=getattr(self.model, name))
        return {"query": side_fn("embed_tokens_query"), "doc": side_fn("embed_tokens_doc")}


# --------------------------------------------------------------------------------------------------
# Config sections several methods share, and the registry's entry
# --------------------------------------------------------------------------------------------------

@config
class ProjectedConfig(MethodConfig):
    """A method with a projection head on the embedding."""
    proj_hidden: int = static(256, ">=0", "projection head hidden width (0 = linear head)")
    proj_dim: int = static(128, ">0", "projection output width")


@config
class MatryoshkaConfig(MethodConfig):
    """A method whose pair objective Matryoshka can wrap (nested prefixes of the embedding)."""
    matryoshka_dims: tuple[int, ...] = static((), doc="nested prefix widths (Matryoshka); () = off")
    matryoshka_layers: bool = static(False, doc="also every encoder layer (2D Matryoshka)")

    def _validate(self):
        dims = self.matryoshka_dims
        if dims and (min(dims) <= 0 or list(dims) != sorted(set(dims))):
            raise ConfigError(f"method.matryoshka_dims must be increasing positive widths, got "
                              f"{dims!r}")
        if self.matryoshka_layers and not dims:
            raise ConfigError("method.matryoshka_layers=True needs method.matryoshka_dims")


@config
class PairConfig(ProjectedConfig, MatryoshkaConfig):
    """Two views, a projection head, a pair objective (that Matryoshka can wrap)."""


@config
class ContrastiveConfig(PairConfig):
    """A contrastive pair method (SimCLR, SupCon)."""
    temperature: float = hyper(0.5, ">0", "softmax temperature of the contrastive objective")


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """What a builder gets besides its section: a factory of fresh encoders for the data's inputs,
    the views function, the dataset (shapes, vocabulary, classes), the gradient-cache chunk
    (``train.grad_cache_chunk``, 0 = off), ``trained(run_dir) -> (method_name, params)``, which
    restores a trained run (a method that trains against an old model), and ``encoder.init_from``
    (what the encoder's weights are read from, '' = fresh)."""
    encoder: Callable[[], nn.Module]
    views_fn: Callable
    dataset: Any
    grad_cache_chunk: int = 0
    trained: Callable[[str], tuple[str, Any]] | None = None
    init_from: str = ""


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """A method as the registry lists it: its config section and its builder. ``grad_cache``:
    it has an in-batch objective that ``train.grad_cache_chunk`` can cache."""
    config: type
    build: Callable[[Any, BuildContext], Method]
    grad_cache: bool = False


def text_pairs_vocab(name: str, ctx: BuildContext) -> tuple[str, ...]:
    """The vocabulary of the run's query/document text pairs; a one-line ConfigError for data
    without text or without pairs (a method that reads both texts: cross_encoder, colbert)."""
    vocab = ctx.dataset.vocab
    if vocab is None or "x_pos" not in ctx.dataset.splits["train"]:
        raise ConfigError(f"method {name!r} reads query/document text pairs (data.name="
                          f"pairs:FILE or beir:DIR); {ctx.dataset.name!r} has "
                          f"{'no text' if vocab is None else 'no x_pos'}")
    return tuple(vocab)


def pair_options(section: Any, ctx: BuildContext) -> dict[str, Any]:
    """The Matryoshka and gradient-cache options of a :class:`PairConfig` method."""
    return dict(matryoshka_dims=section.matryoshka_dims,
                matryoshka_layers=section.matryoshka_layers,
                **({"grad_cache_chunk": ctx.grad_cache_chunk} if ctx.grad_cache_chunk else {}))


def apply_train(model: nn.Module, params: Any, model_state: dict, *args, **kwargs):
    """``model.apply`` in train mode, returning ``(outputs, new_model_state)``.

    Mutable collections (``batch_stats``) are updated only when the model has them.
    """
    variables = {"params": params, **model_state}
    if model_state:
        out, new_state = model.apply(variables, *args, train=True, mutable=list(model_state),
                                     **kwargs)
        return out, dict(new_state)
    return model.apply(variables, *args, train=True, **kwargs), model_state


def two_views(views_fn: Callable, key: jax.Array, batch: Batch) -> tuple[jax.Array, jax.Array]:
    """Two augmented views of each example; a paired dataset's ``x_pos`` is the second view's source.
    Methods that take multi-crop's local views too make them with ``views_fn.local_views``."""
    k1, k2 = jax.random.split(key)
    second = batch.get("x_pos", batch["x"])
    if second.shape != batch["x"].shape:
        raise ValueError(f"this method makes two views of one input, but the data's x_pos "
                         f"{second.shape} differs from x {batch['x'].shape} (a second modality); "
                         f"use a dual-encoder method: clip, siglip or biencoder")
    return views_fn(k1, batch["x"]), views_fn(k2, second, view=1)


def hard_negatives(batch: Batch, k: int | None = None) -> jax.Array:
    """The batch's hard negatives ``[B, K, ...]`` (the first ``k`` of each query's when given);
    one line when the data has none (``method.negatives_per_query`` on pairs without them)."""
    if "negatives" not in batch:
        raise ValueError("method.negatives_per_query needs a 'negatives' feature: "
                         "data.name=pairs:FILE with negatives on its lines")
    return batch["negatives"] if k is None else batch["negatives"][:, :k]


def documents_and_negatives(batch: Batch, k: int) -> jax.Array:
    """``x_pos`` ``[B, ...]`` with, when ``k``, the first ``k`` hard negatives of each query as
    ``B k`` more rows after them: ``[B (1 + k), ...]``."""
    if not k:
        return batch["x_pos"]
    n = hard_negatives(batch, k)
    return jnp.concatenate([batch["x_pos"], n.reshape(-1, *n.shape[2:])])


def pooled(h: jax.Array) -> jax.Array:
    """``[B, ..., C]`` → ``[B, C]`` by mean over every axis between batch and channels."""
    return h.reshape(h.shape[0], -1, h.shape[-1]).mean(axis=1) if h.ndim > 2 else h


class Tower(nn.Module):
    """An encoder with an optional projector and predictor on its embedding.

    ``__call__(x)`` returns ``(embedding, features, projection, prediction)`` (the last two ``None``
    when absent); ``embed(x)`` is the encoder's embedding in eval mode.
    """
    encoder: nn.Module
    projector: nn.Module | None = None
    predictor: nn.Module | None = None

    def __call__(self, x, *, train: bool = False, **encoder_kwargs):
        emb, features = self.encoder(x, train=train, **encoder_kwargs)
        z = self.projector(emb, train=train) if self.projector is not None else emb
        p = self.predictor(z, train=train) if self.predictor is not None else None
        return emb, features, z, p

    def embed(self, x):
        return self.encoder(x, train=False)[0]

    def embed_layers(self, x):
        return layer_summaries(*self.encoder(x, train=False))


class SingleInput(nn.Module):
    """Adapts a tower that reads ``x`` to ``init(key, batch)``: the batch's ``x`` initialises it."""
    tower: Tower

    def __call__(self, batch_or_x, *, train: bool = False):
        x = batch_or_x["x"] if isinstance(batch_or_x, dict) else batch_or_x
        return self.tower(x, train=train)

    def embed(self, x):
        return self.tower.embed(x)

    def embed_layers(self, x):
        return self.tower.embed_layers(x)


def head(out_dim: int, hidden: int, norm: str) -> MLPHead:
    return MLPHead(out_dim, hidden, norm=norm)


def normalized_std(emb: jax.Array) -> jax.Array:
    """Mean over dimensions of the std of L2-normalised embeddings (1/sqrt(D) healthy, 0 collapsed)."""
    return jnp.std(l2_normalize(emb), axis=0).mean()


def grad_cache_loss(name: str, embed_fns, loss_fn, chunk_size: int, unsupported: bool):
    """``f(params, model_state, inputs, aux)``: ``loss_fn`` over the embeddings of ``inputs``,
    differentiated with a gradient cache of ``chunk_size`` examples (see :func:`grad_cached`);
    refuses models with batch statistics (a chunk's statistics differ from the batch's)."""
    if unsupported:
        raise ValueError(f"train.grad_cache_chunk: method {name!r} with these options has no "
                         f"single in-batch objective over embeddings to cache (Matryoshka and "
                         f"predictor losses are not supported)")
    cached = grad_cached(embed_fns, loss_fn, chunk_size=chunk_size)

    def f(params, model_state, inputs, aux):
        if model_state:
            raise ValueError(f"train.grad_cache_chunk needs a model without batch statistics "
                             f"(chunks would normalise differently from the batch), but "
                             f"{name!r} has {sorted(model_state)}: use encoder.norm=layer or "
                             f"a family without BatchNorm")
        return cached(params, inputs, aux)

    return f
