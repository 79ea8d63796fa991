"""Objectives: pure loss functions on arrays, each documenting shapes, reduction and reference.

``REDUCTION`` says what each returns: ``"per_example"`` (``[B]``; average it, e.g. under a mask) or
``"scalar"`` (a batch-statistic or whole-batch loss, already reduced as its reference does).
"""

from repr_jax.objectives.compatibility import bct_influence
from repr_jax.objectives.contrastive import (clip_loss, info_nce, l2_normalize, nt_xent,
                                             siglip_loss, supcon)
from repr_jax.objectives.matryoshka import matryoshka, matryoshka_2d
from repr_jax.objectives.noncontrastive import barlow_twins, negative_cosine, spread_out, vicreg
from repr_jax.objectives.ranking import (batch_hard_triplet, cosent, graded_bce, kl_distill,
                                         margin_mse, triplet)
from repr_jax.objectives.reconstruction import mae_loss, mlm_loss
from repr_jax.objectives.sparse import flops_regularizer

REDUCTION = {
    "nt_xent": "scalar", "info_nce": "per_example", "clip_loss": "scalar",
    "siglip_loss": "scalar", "supcon": "per_example", "triplet": "per_example",
    "batch_hard_triplet": "per_example", "negative_cosine": "per_example", "vicreg": "scalar",
    "barlow_twins": "scalar", "mae_loss": "scalar", "mlm_loss": "scalar",
    "graded_bce": "per_example", "margin_mse": "per_example", "kl_distill": "per_example",
    "cosent": "scalar", "bct_influence": "per_example", "flops_regularizer": "scalar",
    "spread_out": "scalar",  # two scalars: (mean_term, second_moment)
}

__all__ = ["REDUCTION", "barlow_twins", "batch_hard_triplet", "bct_influence", "clip_loss",
           "cosent", "flops_regularizer", "graded_bce", "info_nce", "kl_distill", "l2_normalize",
           "mae_loss", "margin_mse", "matryoshka", "matryoshka_2d", "mlm_loss", "negative_cosine",
           "nt_xent", "siglip_loss", "spread_out", "supcon", "triplet", "vicreg"]
