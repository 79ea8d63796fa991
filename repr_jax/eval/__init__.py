"""Downstream evaluation: plain functions on arrays, and evaluators with one interface.

Functions (arrays in, numbers out): ``linear_probe``, ``knn_classifier``, ``fewshot``, ``retrieve``,
``retrieval_metrics``, ``topk_metrics``, ``class_qrels``, ``adaptive_retrieve``, ``rerank``,
``quantized_search``, ``sts_correlation``, ``bitext_mining``, ``xsim_error``, ``kmeans``, ``nmi``,
``ami``, ``v_measure``, ``alignment``, ``uniformity``, ``effective_rank``, ``anisotropy``,
``linear_cka``, ``coding_rate``, ``feature_std``, ``bootstrap_ci``, ``paired_bootstrap``, ``rrf``,
``convex``.

Evaluators (``EVALUATORS[name](embedder, **options).run(variables)`` yields ``(metric, value)``):
one per module, named like it.
"""

from repr_jax.eval.base import Embedder, EmbedderView, Evaluator, NoOptions
from repr_jax.eval.bitext import Bitext, bitext_mining, xsim_error
from repr_jax.eval.clustering import Clustering, ami, kmeans, nmi, v_measure
from repr_jax.eval.concepts import Concepts
from repr_jax.eval.fewshot import FewShot, fewshot
from repr_jax.eval.fusion import Fusion, convex, rrf
from repr_jax.eval.geometry import (Geometry, alignment, anisotropy, coding_rate, effective_rank,
                                    feature_std, linear_cka, uniformity)
from repr_jax.eval.knn import KNN, knn_classifier
from repr_jax.eval.layerwise import Layerwise
from repr_jax.eval.linear_probe import LinearProbe, linear_probe
from repr_jax.eval.matryoshka import Matryoshka, adaptive_retrieve
from repr_jax.eval.quantization import Quantization, quantized_search
from repr_jax.eval.late_interaction import LateInteraction
from repr_jax.eval.rerank import Rerank
from repr_jax.eval.retrieval import (Retrieval, class_qrels, rerank, retrieval_metrics,
                                     retrieve, topk_metrics)
from repr_jax.eval.sae import SAE
from repr_jax.eval.sparse_retrieval import SparseRetrieval
from repr_jax.eval.stats import Estimate, bootstrap_ci, paired_bootstrap
from repr_jax.eval.sts import STS, sts_correlation

EVALUATORS = {e.name: e for e in (LinearProbe, KNN, FewShot, Retrieval, Quantization, STS,
                                  Clustering, Geometry, Layerwise, Matryoshka, Rerank,
                                  LateInteraction, SAE, Concepts, SparseRetrieval, Fusion,
                                  Bitext)}
# What layerwise and matryoshka can run per layer / prefix: every evaluator but themselves (and
# rerank, late_interaction and sae, which use the whole model's pair scores, token vectors or
# reconstruction, concepts, which runs on every layer itself, and sparse_retrieval, whose
# features are vocabulary term weights, not a layer's or a prefix's vectors, and fusion, which
# fuses the whole run's retrieval with BM25). bitext is one: a view keeps the bitext sets.
PROTOCOLS = tuple(name for name in EVALUATORS
                  if name not in ("layerwise", "matryoshka", "rerank", "late_interaction", "sae",
                                   "concepts", "sparse_retrieval", "fusion"))


def option_classes() -> dict[str, type]:
    """``{evaluator name: its options section}``: the ``eval.<name>`` sections of the config
    (``repr_jax.config.EvalConfig`` gathers them on first use)."""
    return {name: getattr(e, "options", NoOptions) for name, e in EVALUATORS.items()}

__all__ = ["EVALUATORS", "PROTOCOLS", "option_classes", "Embedder", "EmbedderView", "Estimate", "Evaluator",
           "adaptive_retrieve", "alignment", "ami", "anisotropy", "bitext_mining", "bootstrap_ci",
           "class_qrels", "xsim_error",
           "coding_rate", "effective_rank", "feature_std", "fewshot",
           "kmeans", "knn_classifier", "linear_cka", "linear_probe", "nmi", "paired_bootstrap",
           "quantized_search", "rerank", "retrieval_metrics", "retrieve", "sts_correlation",
           "topk_metrics", "rrf", "convex",
           "uniformity", "v_measure"] + [e.__name__ for e in EVALUATORS.values()]
