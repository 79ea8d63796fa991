"""Matryoshka representations (Kusupati et al. 2022): the NT-Xent objective on every nested
prefix (8, 16, 32, 64, 128) of the embedding, so a prefix is itself a usable embedding.

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config matryoshka_simclr_mnist1d
Hardware:  2 CPU cores.
Runtime:   MEASURED_RUNTIME
Expected (test split, 2,000 signals):
MEASURED_TABLE
"""

from simclr_mnist1d import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        f"train.steps={200 if arg == 'quick' else 2000}",
        'method.matryoshka_dims=(8, 16, 32, 64, 128)',
    ])
