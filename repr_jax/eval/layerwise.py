"""Any evaluator per encoder layer: intermediate layers often beat the last one (e.g. for BERT's
lexical tasks, Tenney et al. 2019; for self-supervised ViTs, the layer before the head)."""

from __future__ import annotations

from typing import Any

from repr_jax.config import config, static
from repr_jax.eval.base import Embedder, Evaluator


def protocol_evaluator(protocol: str) -> type[Evaluator]:
    """The evaluator class that layerwise / matryoshka run per layer / prefix."""
    from repr_jax.eval import EVALUATORS, PROTOCOLS  # the registry imports this module
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r}; choose from {list(PROTOCOLS)}")
    return EVALUATORS[protocol]


@config
class LayerwiseOptions:
    """``eval.layerwise.*``: the options of :class:`Layerwise` (its keyword arguments)."""
    protocol: str = static("linear_probe", doc="the evaluator run on every layer (with its own "
                                               "section's options)")


class Layerwise(Evaluator):
    """Runs ``protocol`` (an evaluator name) on each encoder layer's pooled features and on the final
    embedding; yields ``layer_{i}/{metric}`` and ``embedding/{metric}``.

    Cost: the protocol's, once per layer (each at that layer's width)."""

    name = "layerwise"
    options = LayerwiseOptions

    def __init__(self, embedder: Embedder, *, protocol: str = "linear_probe", **options: Any):
        super().__init__(embedder)
        self.protocol, self.options = protocol_evaluator(protocol), options

    def run(self, variables):
        if not self.embedder.has_layers:
            return
        layers = self.embedder.embed(variables, self.embedder.splits["test"]["x"][:1], "layers")
        for i in range(len(layers)):
            name = "embedding" if i == len(layers) - 1 else f"layer_{i}"
            view = self.embedder.view(lambda t, i=i: t[i], which="layers")
            for metric, value in self.protocol(view, **self.options).run(variables):
                yield f"{name}/{metric}", value
