"""Objectives: pure loss functions on arrays, each documenting shapes, reduction and reference."""

from repr_jax.objectives.contrastive import nt_xent

__all__ = ["nt_xent"]
