"""SigLIP (Zhai et al. 2023): the pairwise sigmoid loss with learned scale and bias on the same
two-modality data as clip_latent_modalities.

Base: _latent_modalities_base.py (MLP towers on latent_modalities data).
Command:   repr-jax train --config siglip_latent_modalities
Hardware:  2 CPU cores.
Runtime:   MEASURED_RUNTIME
Expected (test split, 1,200 examples; the probe reads tower A's embedding of x):
MEASURED_TABLE
"""

from _latent_modalities_base import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        'method.name=siglip',
    ])
