"""Supervised baseline: cross-entropy of a linear classifier on the embedding of one view."""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import optax

from repr_jax.methods.base import Method, SingleInput, Tower, apply_train, head


def supervised(encoder, views_fn: Callable, *, num_classes: int) -> Method:
    model = SingleInput(Tower(encoder, head(num_classes, 0, "none")))  # a linear classifier

    def loss(params, model_state, extra, batch, key, hp):
        x = views_fn(key, batch["x"])
        (_, _, logits, _), model_state = apply_train(model, params, model_state, x)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
        acc = jnp.mean(jnp.argmax(logits, -1) == batch["label"])
        return hp.loss_weight * ce, (model_state, extra, {"train_accuracy": acc})

    return Method("supervised", model, loss)
