"""Supervised baseline: cross-entropy of a linear classifier on the embedding of one view."""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax.numpy as jnp
import optax

from repr_jax.encoders import MLPHead
from repr_jax.methods.base import Method, apply_train
from repr_jax.methods.simclr import EncoderWithHead


def supervised(encoder: nn.Module, views_fn: Callable, *, num_classes: int) -> Method:
    model = EncoderWithHead(encoder, MLPHead(num_classes))  # hidden=0: a linear classifier

    def loss(params, model_state, batch, key, hp):
        x = views_fn(key, batch["x"])
        (_, _, logits), model_state = apply_train(model, params, model_state, x)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
        acc = jnp.mean(jnp.argmax(logits, -1) == batch["label"])
        return hp.loss_weight * ce, (model_state, {"train_accuracy": acc})

    return Method("supervised", model, loss)
