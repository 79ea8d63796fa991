"""Barlow Twins (Zbontar et al. 2021): make the views' cross-correlation matrix the identity.

Each view is standardised as the official code's BatchNorm does (since 2026-12-03; the probe
read 0.8560 with the unbiased-std standardisation before).

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config barlow_twins_mnist1d
Hardware:  2 CPU cores.
Runtime:   72 s for the whole command (training and evaluation), measured 2026-12-04
           on a 2-core Intel(R) Xeon(R) Processor (AVX-512) with no other work on the cores.
Expected (test split, 2,000 signals):
    representation        linear_probe/accuracy  knn/accuracy
    raw inputs                           0.2425        0.5730
    random-init encoder                  0.7680        0.6490
    barlow_twins encoder                 0.8445        0.7705
"""

from simclr_mnist1d import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        f"train.steps={200 if arg == 'quick' else 2000}",
        'method.name=barlow_twins',
        'method.proj_hidden=512',
        'method.proj_dim=512',
    ])
