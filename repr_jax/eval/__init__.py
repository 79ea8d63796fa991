"""Downstream evaluation: plain functions on arrays, and evaluators with one interface."""

from repr_jax.eval.base import Embedder, Evaluator
from repr_jax.eval.knn import KNN, knn_classifier
from repr_jax.eval.linear_probe import LinearProbe, linear_probe

EVALUATORS = {"linear_probe": LinearProbe, "knn": KNN}

__all__ = ["EVALUATORS", "Embedder", "Evaluator", "KNN", "LinearProbe", "knn_classifier",
           "linear_probe"]
