"""Supervised baseline: cross-entropy of a linear classifier on the embedding of one view; with an
old model's classifier, plus the BCT influence loss (Shen et al. 2020) that keeps the new embedding
compatible with the old one."""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import optax

from repr_jax import objectives as O
from repr_jax.config import ConfigError, MethodConfig, config, hyper, static
from repr_jax.methods.base import (BuildContext, Method, MethodSpec, SingleInput, Tower,
                                   apply_train, head)


def classifier_params(params: dict) -> dict:
    """The linear classifier ``{"kernel" [D, C], "bias" [C]}`` of a supervised model's params."""
    return dict(params["tower"]["projector"]["out"])


def supervised(encoder, views_fn: Callable, *, num_classes: int,
               old_classifier: dict | None = None) -> Method:
    """``old_classifier`` (an old supervised model's :func:`classifier_params`): add
    ``compat_weight * bct_influence`` — the old, frozen classifier's cross-entropy on the new
    embeddings — so that new embeddings can be compared with an old gallery."""
    model = SingleInput(Tower(encoder, head(num_classes, 0, "none")))  # a linear classifier

    def loss(params, model_state, extra, batch, key, hp):
        x = views_fn(key, batch["x"])
        (emb, _, logits, _), model_state = apply_train(model, params, model_state, x)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
        acc = jnp.mean(jnp.argmax(logits, -1) == batch["label"])
        metrics = {"train_accuracy": acc}
        if old_classifier is not None:
            influence = O.bct_influence(emb, old_classifier, batch["label"]).mean()
            ce = ce + hp.compat_weight * influence
            metrics["bct_influence"] = influence
        return hp.loss_weight * ce, (model_state, extra, metrics)

    return Method("supervised", model, loss)


@config
class SupervisedConfig(MethodConfig):
    compat_run: str = static("", doc="directory of an old supervised run whose frozen classifier "
                                     "the new embeddings must stay compatible with (BCT "
                                     "influence loss); '' = off")
    compat_weight: float = hyper(1.0, ">=0", "weight of the BCT influence loss")


def _build(section: SupervisedConfig, ctx: BuildContext) -> Method:
    old = None
    if section.compat_run:
        name, params = ctx.trained(section.compat_run)
        if name != "supervised":
            raise ConfigError(f"method.compat_run={section.compat_run!r} is a {name} run: BCT "
                              f"needs an old supervised model's classifier")
        old = classifier_params(params)
    return supervised(ctx.encoder(), ctx.views_fn, num_classes=ctx.dataset.num_classes,
                      old_classifier=old)


SUPERVISED = MethodSpec(SupervisedConfig, _build)
