"""Supervised contrastive learning (Khosla et al. 2020): every same-label view is a positive; an
upper reference for what label information adds to contrastive learning.

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config supcon_mnist1d
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
        'method.name=supcon',
        'method.temperature=0.1',
    ])
