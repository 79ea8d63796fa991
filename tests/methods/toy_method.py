"""A method written the way a contributor adds one: this file (config section, objective, builder)
plus one line in ``repr_jax.methods.METHODS`` — here the test's ``monkeypatch.setitem``."""

import jax
import jax.numpy as jnp

from repr_jax.config import MethodConfig, config, hyper
from repr_jax.methods.base import (BuildContext, Method, MethodSpec, SingleInput, Tower,
                                   apply_train, two_views)


@config
class ToyConfig(MethodConfig):
    spread: float = hyper(0.5, ">=0", "weight of the term that pushes embeddings apart")


def align_and_spread(a_BxD: jax.Array, b_BxD: jax.Array, spread: float) -> jax.Array:
    """Mean squared distance of the pairs' unit embeddings, minus ``spread`` times the mean
    squared distance between all embeddings (a scalar)."""
    a = a_BxD / jnp.linalg.norm(a_BxD, axis=-1, keepdims=True)
    b = b_BxD / jnp.linalg.norm(b_BxD, axis=-1, keepdims=True)
    align = jnp.mean(jnp.sum((a - b) ** 2, axis=-1))
    apart = jnp.mean(jnp.sum((a[:, None] - a[None]) ** 2, axis=-1))
    return align - spread * apart


def build(section: ToyConfig, ctx: BuildContext) -> Method:
    model = SingleInput(Tower(ctx.encoder()))

    def loss(params, model_state, extra, batch, key, hp):
        v1, v2 = two_views(ctx.views_fn, key, batch)
        (emb, _, _, _), model_state = apply_train(model, params, model_state,
                                                  jnp.concatenate([v1, v2]))
        a, b = jnp.split(emb, 2)
        return hp.loss_weight * align_and_spread(a, b, hp.spread), (model_state, extra, {})

    return Method("toy", model, loss)


TOY = MethodSpec(ToyConfig, build)
