"""Masked-patch reconstruction with MAE's loss (He et al. 2022): hide 75% of the 4-sample patches,
reconstruct them from the embedding (encoder sees zeroed patches, SimMIM-style).

Base: simclr_mnist1d (1-D CNN, MNIST-1D, the same views), 2,000 steps.
Command:   repr-jax train --config mae_mnist1d
Hardware:  2 CPU cores.
Runtime:   42 s for the whole command (training and evaluation), measured 2026-12-04
           on a 2-core Intel(R) Xeon(R) Processor (AVX-512) with no other work on the cores.
Expected (test split, 2,000 signals):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.2425        0.5730
    random-init encoder                 0.7535        0.6325
    mae encoder                         0.7030        0.5120
Outcome: below the random-init encoder. Reconstructing patches through one pooled embedding
keeps little class information a linear probe can read (MAE's linear probes are weak in the paper too;
it shines after fine-tuning, which this battery does not do).
"""

from simclr_mnist1d import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        f"train.steps={200 if arg == 'quick' else 2000}",
        'method.name=mae',
        'method.patch_size=4',
        'method.mask_ratio=0.75',
        'data.views.shift=0',
        'data.views.mask=0.0',
    ])
