"""The evaluator interface shared by every downstream protocol.

An evaluator is built from a :class:`Embedder` (a ``predict_fn`` plus the labelled splits it is applied
to) and its own options; ``run(variables)`` yields ``(name, value)`` pairs. The ``predict_fn`` is
un-jitted and supplied by the caller (the training loop, ``repr-jax eval``, a notebook); the embedder
jits it once and pads the last batch so every batch has one shape (one compilation).
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

PredictFn = Callable[[Any, jax.Array], jax.Array]  # (variables, x_BxS) -> embedding_BxE


class Embedder:
    """Embeds the ``x`` of every split with ``predict_fn``; remembers the last variables' result so
    evaluators built on the same embedder share one feature pass."""

    def __init__(self, predict_fn: PredictFn, splits: dict[str, dict[str, np.ndarray]], *,
                 batch_size: int = 1024):
        self.splits = splits
        self.batch_size = batch_size
        self._predict = jax.jit(predict_fn)
        self._last: tuple[Any, dict] | None = None

    def _embed(self, variables: Any, x: np.ndarray) -> jax.Array:
        n, bs = len(x), self.batch_size
        outs = []
        for start in range(0, n, bs):
            chunk = x[start:start + bs]
            pad = bs - len(chunk)  # every batch has one shape: one compilation for all splits
            if pad:
                chunk = np.concatenate([chunk, np.zeros((pad,) + chunk.shape[1:], chunk.dtype)])
            out = self._predict(variables, jnp.asarray(chunk))
            outs.append(out[: len(chunk) - pad])
        return jnp.concatenate(outs).reshape(n, -1).astype(jnp.float32)

    def __call__(self, variables: Any) -> dict[str, tuple[jax.Array, jax.Array]]:
        """``{split: (features [N, E], labels [N])}``."""
        if self._last is not None and self._last[0] is variables:
            return self._last[1]
        feats = {name: (self._embed(variables, s["x"]), jnp.asarray(s["label"]))
                 for name, s in self.splits.items()}
        self._last = (variables, feats)
        return feats


class Evaluator(abc.ABC):
    """Base of every evaluator: ``Evaluator(embedder, **options).run(variables)``."""

    name: str = "evaluator"

    def __init__(self, embedder: Embedder):
        self.embedder = embedder

    @abc.abstractmethod
    def run(self, variables: Any) -> Iterator[tuple[str, float]]:
        """Yields ``(metric_name, value)`` pairs, e.g. ``("accuracy", 0.93)``."""
