"""MoCo v2 (He et al. 2020; Chen et al. 2020b): a momentum (EMA) key encoder and a FIFO queue of
past keys as extra InfoNCE negatives.

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config moco_mnist1d
Hardware:  2 CPU cores.
Runtime:   48 s for the whole command (training and evaluation), measured 2026-12-04
           on a 2-core Intel(R) Xeon(R) Processor (AVX-512) with no other work on the cores.
Expected (test split, 2,000 signals):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.2425        0.5730
    random-init encoder                 0.7680        0.6490
    moco encoder                        0.8975        0.8245
"""

from simclr_mnist1d import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        f"train.steps={200 if arg == 'quick' else 2000}",
        'method.name=moco',
        'method.temperature=0.2',
        'method.momentum=0.99',
        'method.queue_size=4096',
    ])
