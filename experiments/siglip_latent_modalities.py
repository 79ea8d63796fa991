"""SigLIP (Zhai et al. 2023): the pairwise sigmoid loss with learned scale and bias on the same
two-modality data as clip_latent_modalities.

Base: _latent_modalities_base.py (MLP towers on latent_modalities data).
Command:   repr-jax train --config siglip_latent_modalities
Hardware:  2 CPU cores.
Runtime:   24 s for the whole command (training and evaluation), measured 2026-12-02
           with the other core partly busy.
Expected (test split, 1,200 examples; the probe reads tower A's embedding of x):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.7008        0.6992
    random-init encoder                 0.7075        0.7067
    siglip encoder                      0.7200        0.7150
Outcome: as clip_latent_modalities: the class probe is at this data's ceiling already.
"""

from _latent_modalities_base import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        'method.name=siglip',
    ])
