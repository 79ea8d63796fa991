"""Encoder families (one per file) and heads. Every encoder maps ``x`` to ``(embedding, features)``.

>>> import jax, jax.numpy as jnp
>>> enc = build("cnn", "tiny")
>>> variables = enc.init(jax.random.PRNGKey(0), jnp.zeros((2, 40)))
>>> emb, feats = enc.apply(variables, jnp.zeros((2, 40)))
>>> emb.shape, sorted(feats)
((2, 16), ['layers', 'pooled', 'pre_head', 'tokens'])
"""

from __future__ import annotations

import difflib

import flax.linen as nn

from repr_jax.encoders import cnn, lstm, mixer, mlp, resnet, text_transformer, vit
from repr_jax.encoders.heads import MLPHead

FAMILIES = {"mlp": (mlp.MLP, mlp.VARIANTS), "cnn": (cnn.CNN, cnn.VARIANTS),
            "resnet": (resnet.ResNet, resnet.VARIANTS), "vit": (vit.ViT, vit.VARIANTS),
            "mixer": (mixer.Mixer, mixer.VARIANTS),
            "text_transformer": (text_transformer.TextTransformer, text_transformer.VARIANTS),
            "lstm": (lstm.LSTMEncoder, lstm.VARIANTS)}
TOKEN_FAMILIES = ("text_transformer", "lstm")  # read integer token ids
IMAGE_FAMILIES = ("resnet", "vit", "mixer")  # read images [B, H, W, C]
REMAT_FAMILIES = ("vit", "text_transformer", "resnet", "mixer")  # take remat=True (per block)


def _choose(kind: str, name: str, valid) -> None:
    if name not in valid:
        close = difflib.get_close_matches(str(name), list(valid), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown {kind} {name!r}{hint}; choose from: {', '.join(valid)}")


def build(name: str, variant: str | None = None, **overrides) -> nn.Module:
    """The encoder module of family ``name``, sized by ``variant`` and then ``overrides``."""
    _choose("encoder", name, FAMILIES)
    cls, variants = FAMILIES[name]
    kwargs = {}
    if variant is not None:
        _choose(f"{name} variant", variant, variants)
        kwargs.update(variants[variant])
    kwargs.update(overrides)
    return cls(**kwargs)


__all__ = ["FAMILIES", "IMAGE_FAMILIES", "MLPHead", "REMAT_FAMILIES", "TOKEN_FAMILIES", "build"]
