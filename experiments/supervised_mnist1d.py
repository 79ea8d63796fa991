"""Supervised cross-entropy baseline with the same encoder and views (Greydanus 2020 reports ~0.9
for a CNN on MNIST-1D).

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config supervised_mnist1d
Hardware:  2 CPU cores.
Runtime:   42 s for the whole command (training and evaluation), measured 2026-12-04
           on a 2-core Intel(R) Xeon(R) Processor (AVX-512) with no other work on the cores.
Expected (test split, 2,000 signals):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.2425        0.5730
    random-init encoder                 0.7680        0.6490
    supervised encoder                  0.9775        0.9755
"""

from simclr_mnist1d import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        f"train.steps={200 if arg == 'quick' else 2000}",
        'method.name=supervised',
    ])
