"""SimCLR (Chen et al. 2020): two views through one encoder and projector, NT-Xent on projections."""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax.encoders import MLPHead
from repr_jax.methods.base import Method, apply_train
from repr_jax.objectives import nt_xent


class EncoderWithHead(nn.Module):
    """An encoder followed by a head on its embedding; ``embed`` skips the head."""
    encoder: nn.Module
    head: nn.Module

    def __call__(self, x, *, train: bool = False):
        emb, features = self.encoder(x, train=train)
        return emb, features, self.head(emb, train=train)

    def embed(self, x):
        return self.encoder(x, train=False)[0]


def two_views(views_fn: Callable, key: jax.Array, batch: dict) -> tuple[jax.Array, jax.Array]:
    """Two augmented views of each example; a paired dataset's ``x_pos`` is the second view's source."""
    k1, k2 = jax.random.split(key)
    return views_fn(k1, batch["x"]), views_fn(k2, batch.get("x_pos", batch["x"]))


def simclr(encoder: nn.Module, views_fn: Callable, *, proj_hidden: int, proj_dim: int) -> Method:
    model = EncoderWithHead(encoder, MLPHead(proj_dim, proj_hidden, norm="none"))

    def loss(params, model_state, batch, key, hp):
        v1, v2 = two_views(views_fn, key, batch)
        b = v1.shape[0]
        (emb, _, z), model_state = apply_train(model, params, model_state,
                                               jnp.concatenate([v1, v2], axis=0))
        value = hp.loss_weight * nt_xent(z[:b], z[b:], hp.temperature)
        metrics = {"emb_std": jnp.std(emb / jnp.linalg.norm(emb, axis=-1, keepdims=True), axis=0)
                   .mean()}
        return value, (model_state, metrics)

    return Method("simclr", model, loss)
