"""2D Matryoshka (2DMSE; Li et al. 2024): Matryoshka prefixes at every encoder layer plus a KL
term pulling each layer towards the last; needs layers of one width.

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config matryoshka2d_simclr_mnist1d
Hardware:  2 CPU cores.
Runtime:   85 s for the whole command (training and evaluation), measured 2026-12-04
           on a 2-core Intel(R) Xeon(R) Processor (AVX-512) with no other work on the cores.
Expected (test split, 2,000 signals):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.2425        0.5730
    random-init encoder                 0.6930        0.6190
    simclr encoder                      0.7720        0.7790
"""

from simclr_mnist1d import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        f"train.steps={200 if arg == 'quick' else 2000}",
        'encoder.widths=(64, 64, 64)',
        'method.matryoshka_dims=(8, 16, 32, 64)',
        'method.matryoshka_layers=True',
    ])
