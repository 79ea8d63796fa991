"""CLIP (Radford et al. 2021): two towers over two synthetic modalities of one latent instance
(x: 32-d, x_pos: 24-d), symmetric InfoNCE with a learned temperature.

Base: _latent_modalities_base.py (MLP towers on latent_modalities data).
Command:   repr-jax train --config clip_latent_modalities
Hardware:  2 CPU cores.
Runtime:   24 s for the whole command (training and evaluation), measured 2026-12-02
           with the other core partly busy.
Expected (test split, 1,200 examples; the probe reads tower A's embedding of x):
    representation       linear_probe/accuracy  knn/accuracy
    raw inputs                          0.7008        0.6992
    random-init encoder                 0.7075        0.7067
    clip encoder                        0.7100        0.7133
Outcome: no gain on the class probe, and none is possible: the latent class is only ~70%
recoverable on this data (noise 1.0), and raw inputs already reach it. What CLIP learns here is the
cross-modal alignment, which a retrieval evaluator (x -> x_pos recall@k; the evaluation issue) measures.
"""

from _latent_modalities_base import get_config as base_config

from repr_jax.config import override


def get_config(arg=None):
    return override(base_config(arg), [
        'method.name=clip',
    ])
