"""Methods with a momentum (EMA) teacher: BYOL and MoCo v2.

The teacher's parameters live in ``TrainState.extra["target"]`` and follow the online parameters by
``target <- momentum * target + (1 - momentum) * online`` after every optimizer step
(``after_update``); MoCo's queue of past keys lives in ``extra["queue"]`` and is updated inside the
loss (first in, first out). Neither receives gradients.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from repr_jax import objectives as O
from repr_jax.config import config, hyper, static
from repr_jax.methods.base import (Method, MethodSpec, ProjectedConfig, SingleInput, Tower,
                                   apply_train, head, normalized_std, two_views)


def _ema_update(extra, params, hp):
    target = optax.incremental_update(params, extra["target"], step_size=1.0 - hp.momentum)
    return dict(extra, target=target)


def _copy_params(key, variables):
    del key
    return {"target": jax.tree.map(jnp.copy, variables["params"])}


def _teacher(model, extra, model_state, x):
    """The EMA teacher's outputs (train-mode BatchNorm on this batch; its stats are not kept)."""
    (emb, _, z, _), _ = apply_train(model, jax.lax.stop_gradient(extra["target"]), model_state, x)
    return jax.lax.stop_gradient(emb), jax.lax.stop_gradient(z)


def byol(encoder, views_fn: Callable, *, proj_hidden: int, proj_dim: int, pred_hidden: int
         ) -> Method:
    """BYOL (Grill et al. 2020): the online predictor regresses the EMA target's projection of the
    other view; symmetric negative cosine (equal to BYOL's ``2 - 2 cos`` up to an affine map)."""
    model = SingleInput(Tower(encoder, head(proj_dim, proj_hidden, "batch"),
                              head(proj_dim, pred_hidden, "batch")))

    def loss(params, model_state, extra, batch, key, hp):
        v1, v2 = two_views(views_fn, key, batch)
        b = v1.shape[0]
        x = jnp.concatenate([v1, v2], axis=0)
        (emb, _, _, p), new_state = apply_train(model, params, model_state, x)
        _, zt = _teacher(model, extra, model_state, x)
        value = 0.5 * (O.negative_cosine(p[:b], zt[b:]).mean()
                       + O.negative_cosine(p[b:], zt[:b]).mean())
        return hp.loss_weight * value, (new_state, extra, {"emb_std": normalized_std(emb)})

    return Method("byol", model, loss, init_extra=_copy_params, after_update=_ema_update)


def moco(encoder, views_fn: Callable, *, proj_hidden: int, proj_dim: int, queue_size: int
         ) -> Method:
    """MoCo v2 (He et al. 2020; Chen et al. 2020b): queries from the online encoder, keys from its EMA,
    ``info_nce`` with the queue of past keys as extra negatives (in-batch keys count as negatives too,
    the ``info_nce`` convention; with a queue much larger than the batch the difference is small)."""
    model = SingleInput(Tower(encoder, head(proj_dim, proj_hidden, "none")))

    def init_extra(key, variables):
        queue = jax.random.normal(key, (queue_size, proj_dim))
        return dict(_copy_params(key, variables), queue=O.l2_normalize(queue))

    def loss(params, model_state, extra, batch, key, hp):
        v1, v2 = two_views(views_fn, key, batch)
        (emb, _, q, _), new_state = apply_train(model, params, model_state, v1)
        _, k = _teacher(model, extra, model_state, v2)
        k = O.l2_normalize(k)
        value = O.info_nce(q, k, hp.temperature, negatives=extra["queue"]).mean()
        queue = jnp.concatenate([k, extra["queue"]], axis=0)[:queue_size]
        return hp.loss_weight * value, (new_state, dict(extra, queue=queue),
                                        {"emb_std": normalized_std(emb)})

    return Method("moco", model, loss, init_extra=init_extra, after_update=_ema_update)


@config
class BYOLConfig(ProjectedConfig):
    momentum: float = hyper(0.99, "[0,1)", "EMA decay of the teacher")
    pred_hidden: int = static(64, ">0", "predictor hidden width")


@config
class MoCoConfig(ProjectedConfig):
    temperature: float = hyper(0.5, ">0", "softmax temperature")
    momentum: float = hyper(0.99, "[0,1)", "EMA decay of the teacher")
    queue_size: int = static(4096, ">0", "number of past keys used as negatives")


BYOL = MethodSpec(BYOLConfig, lambda m, ctx: byol(
    ctx.encoder(), ctx.views_fn, proj_hidden=m.proj_hidden, proj_dim=m.proj_dim,
    pred_hidden=m.pred_hidden))
MOCO = MethodSpec(MoCoConfig, lambda m, ctx: moco(
    ctx.encoder(), ctx.views_fn, proj_hidden=m.proj_hidden, proj_dim=m.proj_dim,
    queue_size=m.queue_size))
