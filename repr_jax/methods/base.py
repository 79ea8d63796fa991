"""What a method is: a Flax model plus a loss that turns a batch into one scalar.

A :class:`Method` is built once from structural choices (encoder, head sizes, views). Its ``loss`` is a
pure function ``loss(params, model_state, batch, key, hp) -> (loss, (new_model_state, metrics))``
where ``hp`` holds the method's numeric hyperparameters (pytree leaves, possibly traced) and
``model_state`` holds non-trained collections such as ``batch_stats``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax

Batch = dict[str, jax.Array]
LossFn = Callable[[Any, dict, Batch, jax.Array, Any], tuple[jax.Array, tuple[dict, dict]]]


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    model: nn.Module  # __call__(x, train) -> (embedding, features, head_output); .embed(x)
    loss: LossFn

    def init(self, key: jax.Array, x: jax.Array) -> dict:
        """All variables (``params`` and e.g. ``batch_stats``) for inputs shaped like ``x``."""
        return self.model.init(key, x, train=False)

    def embed(self, variables: dict, x: jax.Array) -> jax.Array:
        """The representation ``[B, E]`` (encoder output, eval mode): the evaluators' predict_fn."""
        return self.model.apply(variables, x, method=self.model.embed)


def apply_train(model: nn.Module, params: Any, model_state: dict, x: jax.Array, **kwargs):
    """``model.apply`` in train mode, returning ``(outputs, new_model_state)``.

    Mutable collections (``batch_stats``) are updated only when the model has them.
    """
    variables = {"params": params, **model_state}
    if model_state:
        out, new_state = model.apply(variables, x, train=True, mutable=list(model_state), **kwargs)
        return out, dict(new_state)
    return model.apply(variables, x, train=True, **kwargs), model_state
