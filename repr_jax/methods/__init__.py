"""Methods: how views, encoders, heads and an objective make one training loss.

| name | file | what |
| --- | --- | --- |
| simclr, supcon, vicreg, barlow_twins, simsiam | siamese.py | two views, one encoder |
| byol, moco | momentum.py | EMA teacher (and MoCo's queue) |
| clip, siglip, biencoder | dual_encoder.py | two towers over paired inputs |
| mae, mlm | masked.py | masked-patch reconstruction, masked language modelling |
| mntp | mntp.py | LLM2Vec's masked next-token prediction: a decoder LLM read bidirectionally |
| supervised | supervised.py | cross-entropy baseline |
| cross_encoder | cross_encoder.py | a reranker reading query and document together |
| colbert | colbert.py | late interaction: a vector per token, MaxSim |
| sae | sae.py | a sparse autoencoder on activation vectors (topk, batchtopk, jumprelu, relu) |
| splade | splade.py | learned sparse term weights: BERT's MLM head, pooled, FLOPS-regularised |

Each method's file declares its config section (the ``method`` fields it has, e.g. VICReg's three
loss weights) and its builder, bundled as a :class:`MethodSpec`; adding a method is that file plus
one line in ``METHODS``. Matryoshka (``matryoshka_dims``) and 2D Matryoshka (``matryoshka_layers``)
wrap the pair objective of the methods whose sections have those fields.
"""

from repr_jax.config import ConfigError
from repr_jax.methods import (colbert, cross_encoder, dual_encoder, masked, momentum, mntp,
                              sae, siamese, splade, supervised)
from repr_jax.methods.base import BuildContext, Method, MethodSpec
from repr_jax.sections import choose_section

METHODS: dict[str, MethodSpec] = {
    "simclr": siamese.SIMCLR, "supcon": siamese.SUPCON, "vicreg": siamese.VICREG,
    "barlow_twins": siamese.BARLOW_TWINS, "simsiam": siamese.SIMSIAM,
    "byol": momentum.BYOL, "moco": momentum.MOCO,
    "clip": dual_encoder.CLIP, "siglip": dual_encoder.SIGLIP, "biencoder": dual_encoder.BIENCODER,
    "mae": masked.MAE, "mlm": masked.MLM, "mntp": mntp.MNTP,
    "supervised": supervised.SUPERVISED,
    "cross_encoder": cross_encoder.CROSS_ENCODER, "colbert": colbert.COLBERT,
    "sae": sae.SAE, "splade": splade.SPLADE,
}


def method_config(name: str | None):
    """The config section class of method ``name`` (what ``MethodConfig(name=...)`` builds);
    ``None``: every method's."""
    return choose_section(METHODS, "method.name", name, lambda spec: spec.config)


def check_method(section, *, grad_cache_chunk: int = 0) -> None:
    """What can be checked of a method section before anything is built."""
    if grad_cache_chunk and not METHODS[section.name].grad_cache:
        cached = [n for n, spec in METHODS.items() if spec.grad_cache]
        raise ConfigError(f"train.grad_cache_chunk: method {section.name!r} has no in-batch-"
                          f"negative objective to cache; use one of {', '.join(cached)}")


def reads_scores(section) -> bool:
    """Whether method ``section`` trains on a teacher's scores of each pair (a bi-encoder's or
    SPLADE's ``margin_mse``, or ``kl_distill`` over hard negatives): the data must carry them."""
    return section.name in ("biencoder", "splade") and (
        section.objective == "margin_mse"
        or (section.objective == "kl_distill" and section.negatives_per_query > 0))


def build_method(section, ctx: BuildContext) -> Method:
    """Method ``section.name`` built from its section and the run's context."""
    check_method(section, grad_cache_chunk=ctx.grad_cache_chunk)
    return METHODS[section.name].build(section, ctx)


__all__ = ["BuildContext", "METHODS", "Method", "MethodSpec", "build_method", "check_method",
           "method_config", "reads_scores"]
