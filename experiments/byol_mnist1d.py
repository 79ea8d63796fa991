"""BYOL (Grill et al. 2020): no negatives; an online predictor regresses an EMA target's projection.

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config byol_mnist1d
Hardware:  2 CPU cores.
Runtime:   73 s for the whole command (training and evaluation), measured 2026-12-04
           on a 2-core Intel(R) Xeon(R) Processor (AVX-512) with no other work on the cores.
Expected (test split, 2,000 signals):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.2425        0.5730
    random-init encoder                 0.7680        0.6490
    byol encoder                        0.8640        0.7585
"""

from simclr_mnist1d import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        f"train.steps={200 if arg == 'quick' else 2000}",
        'method.name=byol',
        'method.momentum=0.99',
        'method.proj_dim=128',
        'method.pred_hidden=256',
    ])
