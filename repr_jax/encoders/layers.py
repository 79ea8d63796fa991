"""Small building blocks shared by encoder families."""

from __future__ import annotations

import flax.linen as nn


def norm_layer(kind: str, *, train: bool, name: str | None = None):
    """``batch`` (running stats in ``batch_stats``), ``layer`` or ``none`` normalisation."""
    if kind == "batch":
        return nn.BatchNorm(use_running_average=not train, momentum=0.9, name=name)
    if kind == "layer":
        return nn.LayerNorm(name=name)
    if kind == "none":
        return lambda x: x
    raise ValueError(f"unknown norm {kind!r}; choose from: 'batch', 'layer', 'none'")
