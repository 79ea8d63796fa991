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


# Which encoder-section size fields each family takes, and under which module field name.
_SIZE_FIELDS = {
    "vit": {"width": "width", "depth": "depth", "num_heads": "num_heads", "mlp_dim": "mlp_dim",
            "patch_size": "patch_size"},
    "mixer": {"width": "width", "depth": "depth", "patch_size": "patch_size"},
    "text_transformer": {"width": "width", "depth": "depth", "num_heads": "num_heads",
                         "mlp_dim": "mlp_dim"},
    "lstm": {"width": "hidden", "depth": "depth"},
}


def check_section(e) -> None:
    """Checks an encoder config section (``repr_jax.config.EncoderConfig``) against the families:
    the name, the variant, remat and head divisibility, naming the closest valid choice."""
    _choose("encoder", e.name, FAMILIES)
    if e.remat and e.name not in REMAT_FAMILIES:
        raise ValueError(f"encoder.remat=True: encoder {e.name!r} has no blocks to "
                         f"rematerialise; use it with {', '.join(REMAT_FAMILIES)}")
    variants = FAMILIES[e.name][1]
    if e.variant:
        _choose(f"{e.name} variant", e.variant, variants)
    sizes = dict(variants.get(e.variant or "tiny", {}))
    sizes.update({k: v for k, v in (("width", e.width), ("num_heads", e.num_heads)) if v})
    if "num_heads" in sizes and sizes["width"] % sizes["num_heads"]:
        raise ValueError(f"encoder width {sizes['width']} is not divisible by "
                         f"encoder.num_heads={sizes['num_heads']}")


def _check_shapes(e, input_shape: tuple[int, ...], dataset_name: str) -> None:
    """The size checks that need the input's shape, in the config's own key names."""
    if e.name == "cnn":
        spatial = input_shape if len(input_shape) == 1 else input_shape[:-1]
        if e.kernel_size > min(spatial):
            raise ValueError(f"encoder.kernel_size={e.kernel_size} is larger than the inputs of "
                             f"{dataset_name!r} ({'x'.join(map(str, spatial))}); use at most "
                             f"{min(spatial)}")
    if e.name in ("vit", "mixer"):
        p = e.patch_size or FAMILIES[e.name][1][e.variant or "tiny"]["patch_size"]
        h, w = input_shape[:2]
        if h % p or w % p:
            divisors = [d for d in range(1, min(h, w) + 1) if h % d == 0 and w % d == 0]
            raise ValueError(f"encoder.patch_size={p} does not divide the {h}x{w} images of "
                             f"{dataset_name!r}; choose one of {divisors}")


def from_section(e, *, input_shape: tuple[int, ...], vocab: tuple[str, ...] | None,
                 dataset_name: str = "the dataset", population: bool = False) -> nn.Module:
    """The encoder an encoder config section describes, for inputs of ``input_shape`` (token
    encoders take their vocabulary from ``vocab``). ``population``: it will be vmapped over
    per-member weights (``conv=auto`` then computes CNN convolutions as patch matmuls)."""
    check_section(e)
    is_text = e.name in TOKEN_FAMILIES
    if is_text != (vocab is not None):
        raise ValueError(
            f"encoder {e.name!r} reads token ids, but dataset {dataset_name!r} has no vocabulary "
            f"(use a text dataset such as latent_topics)" if is_text else
            f"dataset {dataset_name!r} holds token ids; use a token encoder "
            f"({', '.join(TOKEN_FAMILIES)})")
    if e.name in IMAGE_FAMILIES and len(input_shape) != 3:
        raise ValueError(f"encoder {e.name!r} reads images [H, W, C], but {dataset_name!r} has "
                         f"inputs of shape {tuple(input_shape)} (try data.name=digits)")
    _check_shapes(e, tuple(input_shape), dataset_name)
    kwargs = {"embed_dim": e.embed_dim}
    if e.remat:
        kwargs["remat"] = True
    kwargs.update({module_field: getattr(e, field)
                   for field, module_field in _SIZE_FIELDS.get(e.name, {}).items()
                   if getattr(e, field)})
    if is_text:
        t = input_shape[0]
        kwargs.update(vocab_size=len(vocab), pooling=e.pooling,
                      max_len=max(t + -(-t // e.landmark_chunk), 8))
        if e.name == "text_transformer":
            kwargs.update(landmark_chunk=e.landmark_chunk, landmark_id=vocab.index("[SEP]"))
    if e.name in ("mlp", "cnn"):
        kwargs["norm"] = e.norm
        if not e.variant:
            kwargs["widths"] = e.widths
        if e.name == "cnn":
            kwargs["kernel_size"] = e.kernel_size
            kwargs["im2col"] = e.conv == "im2col" or (e.conv == "auto" and population)
    default_variant = None if e.name in ("mlp", "cnn") else "tiny"
    return build(e.name, e.variant or default_variant, **kwargs)


def load_exported(path):
    """``(module, variables)`` of an encoder exported with ``repr-jax export --format
    safetensors`` (:func:`repr_jax.encoders.pretrained.load_exported`)."""
    from repr_jax.encoders.pretrained import load_exported as load
    return load(path)


__all__ = ["FAMILIES", "IMAGE_FAMILIES", "MLPHead", "REMAT_FAMILIES", "TOKEN_FAMILIES", "build",
           "check_section", "from_section", "load_exported"]
