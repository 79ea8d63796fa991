"""Two views through one encoder (+ heads): SimCLR, SimSiam, VICReg, Barlow Twins, SupCon.

Each builder returns a :class:`Method`. Pair objectives (all but SimSiam) can be wrapped in the
Matryoshka losses: with ``matryoshka_dims`` the objective is applied to nested prefixes of the
*embedding* (the representation that is evaluated and truncated downstream) instead of the projection;
``matryoshka_layers=True`` adds every encoder layer (2DMSE), which needs layers of one width.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from repr_jax import objectives as O
from repr_jax.config import config, hyper, static
from repr_jax.methods.base import (BuildContext, ContrastiveConfig, Method, MethodSpec,
                                   PairConfig, ProjectedConfig, SingleInput, Tower, apply_train,
                                   grad_cache_loss, head, normalized_std, pair_options, pooled,
                                   two_views)

PairObjective = Callable[[jax.Array, jax.Array, dict, object], jax.Array]  # (a, b, batch, hp)


def _mean(x):
    return jnp.mean(x) if x.ndim else x


def matryoshka_objective(objective: PairObjective, dims: Sequence[int], layers: bool):
    """Wraps a pair objective in ``matryoshka`` (or ``matryoshka_2d`` when ``layers``).

    Returns ``f(emb_a, emb_b, layers_a, layers_b, batch, hp)``.
    """
    def pair(batch, hp):
        return lambda a, b: objective(a, b, batch, hp)

    def loss(emb_a, emb_b, layers_a, layers_b, batch, hp):
        if not layers:
            return _mean(O.matryoshka(pair(batch, hp), dims)(emb_a, emb_b))
        per_layer = [(pooled(a), pooled(b)) for a, b in zip(layers_a, layers_b)]
        widths = {a.shape[-1] for a, _ in per_layer} | {emb_a.shape[-1]}
        if len(widths) != 1:
            raise ValueError(f"matryoshka_layers needs every layer and the embedding to share one "
                             f"width (e.g. encoder.widths=(64, 64, 64), embed_dim=0); got widths "
                             f"{sorted(widths)}")
        return _mean(O.matryoshka_2d(pair(batch, hp), dims)(per_layer[:-1] + [(emb_a, emb_b)]))

    return loss


def siamese(name: str, encoder, views_fn: Callable, objective: PairObjective | None, *,
            projector=None, predictor=None, matryoshka_dims: Sequence[int] = (),
            matryoshka_layers: bool = False, predictor_loss: Callable | None = None,
            grad_cache_chunk: int = 0) -> Method:
    """Two augmented views → one tower → ``objective(z1, z2, batch, hp)`` on the projections.

    ``predictor_loss(z1, z2, p1, p2, hp)`` replaces the objective for predictor methods (SimSiam).
    ``grad_cache_chunk``: compute the objective's gradient with a gradient cache, embedding that
    many examples at a time (:func:`repr_jax.methods.grad_cache.grad_cached`).
    """
    model = SingleInput(Tower(encoder, projector, predictor))
    if matryoshka_dims and objective is None:
        raise ValueError(f"method {name!r} has no pair objective to wrap in Matryoshka")
    nested = matryoshka_objective(objective, tuple(matryoshka_dims), matryoshka_layers) \
        if matryoshka_dims else None
    cached = None
    if grad_cache_chunk:
        def embed(params, x):
            return model.apply({"params": params}, x, train=True)[2]

        cached = grad_cache_loss(name, (embed, embed), lambda params, aux, z1, z2: _mean(
            objective(z1, z2, *aux)), grad_cache_chunk, objective is None or bool(matryoshka_dims))

    n_local = getattr(views_fn, "local_crops", 0)
    if n_local and (cached is not None or nested is not None or predictor_loss is not None):
        raise ValueError(f"method {name!r}: multi-crop (data.views.local_crops={n_local}) does not "
                         f"combine with grad_cache_chunk, Matryoshka or a predictor")

    def loss(params, model_state, extra, batch, key, hp):
        if n_local:
            return multi_crop_loss(params, model_state, extra, batch, key, hp)
        v1, v2 = two_views(views_fn, key, batch)
        if cached is not None:
            return hp.loss_weight * cached(params, model_state, (v1, v2), (batch, hp)), (
                model_state, extra, {})
        b = v1.shape[0]
        (emb, feats, z, p), model_state = apply_train(model, params, model_state,
                                                      jnp.concatenate([v1, v2], axis=0))
        if nested is not None:
            layers = feats.get("layers", ())
            value = nested(emb[:b], emb[b:], [h[:b] for h in layers], [h[b:] for h in layers],
                           batch, hp)
        elif predictor_loss is not None:
            value = predictor_loss(z[:b], z[b:], p[:b], p[b:], hp)
        else:
            value = _mean(objective(z[:b], z[b:], batch, hp))
        return hp.loss_weight * value, (model_state, extra, {"emb_std": normalized_std(emb)})

    def multi_crop_loss(params, model_state, extra, batch, key, hp):
        """Two global views and ``n_local`` small ones (Caron et al. 2020, SwAV's multi-crop): the
        objective's mean over the pairs (global, any other view), 1 + 2 * n_local of them."""
        k_global, k_local = jax.random.split(key)
        g1, g2 = two_views(views_fn, k_global, batch)
        b = g1.shape[0]
        (emb, _, z, _), model_state = apply_train(model, params, model_state,
                                                  jnp.concatenate([g1, g2], axis=0))
        (_, _, z_local, _), model_state = apply_train(
            model, params, model_state,
            jnp.concatenate(views_fn.local_views(k_local, batch["x"]), axis=0))
        zs = [z[:b], z[b:]] + [z_local[i * b:(i + 1) * b] for i in range(n_local)]
        pairs = [(0, 1)] + [(g, j) for g in (0, 1) for j in range(2, 2 + n_local)]
        value = sum(_mean(objective(zs[i], zs[j], batch, hp)) for i, j in pairs) / len(pairs)
        return hp.loss_weight * value, (model_state, extra, {"emb_std": normalized_std(emb)})

    return Method(name, model, loss, local_views=bool(n_local))


def simclr(encoder, views_fn, *, proj_hidden: int, proj_dim: int, **options) -> Method:
    """SimCLR (Chen et al. 2020): NT-Xent between the projections of two views."""
    return siamese("simclr", encoder, views_fn,
                   lambda a, b, batch, hp: O.nt_xent(a, b, hp.temperature),
                   projector=head(proj_dim, proj_hidden, "none"), **options)


def supcon(encoder, views_fn, *, proj_hidden: int, proj_dim: int, **options) -> Method:
    """Supervised contrastive learning (Khosla et al. 2020): positives are all same-label views."""
    return siamese("supcon", encoder, views_fn,
                   lambda a, b, batch, hp: O.supcon(jnp.stack([a, b], axis=1), batch["label"],
                                                    hp.temperature),
                   projector=head(proj_dim, proj_hidden, "none"), **options)


def vicreg(encoder, views_fn, *, proj_hidden: int, proj_dim: int, **matryoshka) -> Method:
    """VICReg (Bardes et al. 2022): invariance + variance + covariance on an expander's output."""
    return siamese("vicreg", encoder, views_fn,
                   lambda a, b, batch, hp: O.vicreg(a, b, hp.sim_weight, hp.var_weight,
                                                    hp.cov_weight),
                   projector=head(proj_dim, proj_hidden, "batch"), **matryoshka)


def barlow_twins(encoder, views_fn, *, proj_hidden: int, proj_dim: int, **matryoshka) -> Method:
    """Barlow Twins (Zbontar et al. 2021): cross-correlation of the two views' projections → I."""
    return siamese("barlow_twins", encoder, views_fn,
                   lambda a, b, batch, hp: O.barlow_twins(a, b, hp.redundancy_weight),
                   projector=head(proj_dim, proj_hidden, "batch"), **matryoshka)


def simsiam(encoder, views_fn, *, proj_hidden: int, proj_dim: int, pred_hidden: int) -> Method:
    """SimSiam (Chen & He 2021): predictor + stop-gradient, symmetric negative cosine."""
    def predictor_loss(z1, z2, p1, p2, hp):
        del hp
        return 0.5 * (O.negative_cosine(p1, z2).mean() + O.negative_cosine(p2, z1).mean())

    return siamese("simsiam", encoder, views_fn, None,
                   projector=head(proj_dim, proj_hidden, "batch"),
                   predictor=head(proj_dim, pred_hidden, "batch"), predictor_loss=predictor_loss)


# --------------------------------------------------------------------------------------------------
# Config sections and registry entries
# --------------------------------------------------------------------------------------------------

@config
class VICRegConfig(PairConfig):
    sim_weight: float = hyper(25.0, ">=0", "invariance weight")
    var_weight: float = hyper(25.0, ">=0", "variance weight")
    cov_weight: float = hyper(1.0, ">=0", "covariance weight")


@config
class BarlowTwinsConfig(PairConfig):
    redundancy_weight: float = hyper(5e-3, ">=0", "off-diagonal weight (lambda)")


@config
class SimSiamConfig(ProjectedConfig):
    pred_hidden: int = static(64, ">0", "predictor hidden width")


def _projected(builder):
    """``build(section, ctx)`` for a pair method whose builder takes the projection sizes."""
    def build(section, ctx: BuildContext) -> Method:
        return builder(ctx.encoder(), ctx.views_fn, proj_hidden=section.proj_hidden,
                       proj_dim=section.proj_dim, **pair_options(section, ctx))
    return build


SIMCLR = MethodSpec(ContrastiveConfig, _projected(simclr), grad_cache=True)
SUPCON = MethodSpec(ContrastiveConfig, _projected(supcon), grad_cache=True)
VICREG = MethodSpec(VICRegConfig, _projected(vicreg))
BARLOW_TWINS = MethodSpec(BarlowTwinsConfig, _projected(barlow_twins))
SIMSIAM = MethodSpec(SimSiamConfig, lambda m, ctx: simsiam(
    ctx.encoder(), ctx.views_fn, proj_hidden=m.proj_hidden, proj_dim=m.proj_dim,
    pred_hidden=m.pred_hidden))
