"""Methods: how views, encoders, heads and an objective make one training loss.

| name | file | what |
| --- | --- | --- |
| simclr, supcon, vicreg, barlow_twins, simsiam | siamese.py | two views, one encoder |
| byol, moco | momentum.py | EMA teacher (and MoCo's queue) |
| clip, siglip, biencoder | dual_encoder.py | two towers over paired inputs |
| mae, mlm | masked.py | masked-patch reconstruction, masked language modelling |
| supervised | supervised.py | cross-entropy baseline |

Matryoshka (``matryoshka_dims``) and 2D Matryoshka (``matryoshka_layers``) wrap the pair objective of
simclr, supcon, vicreg, barlow_twins, clip, siglip and biencoder.
"""

from repr_jax.methods.base import Method
from repr_jax.methods.dual_encoder import biencoder, clip, siglip
from repr_jax.methods.masked import mae, mlm
from repr_jax.methods.momentum import byol, moco
from repr_jax.methods.siamese import barlow_twins, simclr, simsiam, supcon, vicreg
from repr_jax.methods.supervised import supervised

METHODS = {"simclr": simclr, "supcon": supcon, "vicreg": vicreg, "barlow_twins": barlow_twins,
           "simsiam": simsiam, "byol": byol, "moco": moco, "clip": clip, "siglip": siglip,
           "biencoder": biencoder, "mae": mae, "mlm": mlm, "supervised": supervised}
MATRYOSHKA_METHODS = ("simclr", "supcon", "vicreg", "barlow_twins", "clip", "siglip", "biencoder")
DUAL_ENCODER_METHODS = ("clip", "siglip", "biencoder")
GRAD_CACHE_METHODS = ("simclr", "supcon", "clip", "siglip", "biencoder")  # train.grad_cache_chunk

__all__ = ["DUAL_ENCODER_METHODS", "GRAD_CACHE_METHODS", "MATRYOSHKA_METHODS", "METHODS", "Method", *METHODS]
