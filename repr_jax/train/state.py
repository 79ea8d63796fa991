"""The train state: one immutable pytree holding everything a resumed run needs."""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax


@flax.struct.dataclass
class TrainState:
    """``step`` counts completed updates; ``rng`` is the loop key (folded with ``step`` each step).

    The optimizer (``tx``) is *not* stored here, unlike ``flax.training.train_state.TrainState``: it
    is built once per run (``repr_jax.train.optim``) and takes the learning rate and weight decay
    as arguments of each update, so hyperparameters can be traced and vmapped across a population
    while the state keeps one structure.
    """
    step: jax.Array
    params: Any
    batch_stats: dict
    opt_state: optax.OptState
    rng: jax.Array
    extra: dict  # method state that is not trained by gradients (EMA teachers, queues)

    @property
    def variables(self) -> dict:
        """What ``model.apply`` takes: params plus the non-trained collections."""
        return {"params": self.params, **({"batch_stats": self.batch_stats}
                                          if self.batch_stats else {})}


def create_train_state(variables: dict, tx: optax.GradientTransformation, rng: jax.Array,
                       extra: dict | None = None, trainable=None) -> TrainState:
    """``trainable``: :func:`repr_jax.train.optim.trainable_filter`'s (None: all train); the
    optimizer state covers the trainable parameters only."""
    from repr_jax.train.optim import split_trainable
    params = variables["params"]
    train = params if trainable is None else split_trainable(params, trainable)[0]
    return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                      batch_stats=dict(variables.get("batch_stats", {})),
                      opt_state=tx.init(train), rng=rng, extra=extra or {})
