"""CLIP (Radford et al. 2021): two towers over two synthetic modalities of one latent instance
(x: 32-d, x_pos: 24-d), symmetric InfoNCE with a learned temperature.

Base: _latent_modalities_base.py (MLP towers on latent_modalities data).
Command:   repr-jax train --config clip_latent_modalities
Hardware:  2 CPU cores.
Runtime:   MEASURED_RUNTIME
Expected (test split, 1,200 examples; the probe reads tower A's embedding of x):
MEASURED_TABLE
"""

from _latent_modalities_base import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        'method.name=clip',
    ])
