"""An evaluator written the way a contributor adds one: this file (its options section and the
evaluator) plus one line in ``repr_jax.eval.EVALUATORS`` — here the test's
``monkeypatch.setitem``."""

from __future__ import annotations

import jax.numpy as jnp

from repr_jax.config import config, static
from repr_jax.eval.base import Evaluator


@config
class NormOptions:
    power: float = static(1.0, ">0", "the mean of ||z||^power over the test split")


class Norm(Evaluator):
    """The test split's mean embedding norm, raised to ``power``. Cost: ``O(N D)``."""

    name = "norm"
    options = NormOptions

    def __init__(self, embedder, *, power: float = 1.0):
        super().__init__(embedder)
        self.power = power

    def run(self, variables):
        z = self.embedder.embed(variables, self.embedder.splits["test"]["x"])
        yield "mean_norm", float(jnp.mean(jnp.linalg.norm(z, axis=1) ** self.power))
