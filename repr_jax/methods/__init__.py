"""Methods: how views, encoders, heads and an objective make one training loss.

Each method is a builder ``method(encoder, views_fn, **sizes) -> Method``; the training code picks one
by ``method.name`` (see ``repr_jax.train.build``).
"""

from repr_jax.methods.base import Method
from repr_jax.methods.simclr import simclr
from repr_jax.methods.supervised import supervised

METHODS = {"simclr": simclr, "supervised": supervised}

__all__ = ["METHODS", "Method", "simclr", "supervised"]
