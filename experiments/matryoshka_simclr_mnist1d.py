"""Matryoshka representations (Kusupati et al. 2022): the NT-Xent objective on every nested
prefix (8, 16, 32, 64, 128) of the embedding, so a prefix is itself a usable embedding.

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config matryoshka_simclr_mnist1d
Hardware:  2 CPU cores.
Runtime:   160 s for the whole command (training and evaluation), measured 2026-12-02
           with the other core partly busy.
Expected (test split, 2,000 signals):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.2425        0.5730
    random-init encoder                 0.7680        0.6490
    simclr encoder                      0.8140        0.7920
Outcome: the full-width probe (0.814) is below plain SimCLR at 2,000 steps (0.8905): the loss
acts on the embedding itself rather than on a projection head, which costs linear separability; the
per-prefix accuracies (the point of Matryoshka) need the Matryoshka evaluator (evaluation issue).
"""

from simclr_mnist1d import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        f"train.steps={200 if arg == 'quick' else 2000}",
        'method.matryoshka_dims=(8, 16, 32, 64, 128)',
    ])
