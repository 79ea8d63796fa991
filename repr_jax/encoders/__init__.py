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

from repr_jax.encoders import (cnn, decoder_lm, lstm, mixer, mlp, resnet, text_transformer,
                               vit)
from repr_jax.encoders.family import Family
from repr_jax.encoders.heads import MLPHead
from repr_jax.encoders.lora import LoRA
from repr_jax.sections import choose_section

# One line a family: its file declares the module, the sizes, the config section (FAMILY).
FAMILIES: dict[str, Family] = {
    "mlp": mlp.FAMILY, "cnn": cnn.FAMILY, "resnet": resnet.FAMILY, "vit": vit.FAMILY,
    "mixer": mixer.FAMILY, "text_transformer": text_transformer.FAMILY, "lstm": lstm.FAMILY,
    "decoder_lm": decoder_lm.FAMILY}
TOKEN_FAMILIES = tuple(n for n, f in FAMILIES.items() if f.reads == "tokens")  # read token ids
IMAGE_FAMILIES = tuple(n for n, f in FAMILIES.items() if f.reads == "images")  # [B, H, W, C]
REMAT_FAMILIES = tuple(n for n, f in FAMILIES.items() if f.remat)  # take remat=True (per block)


def encoder_config(name: str | None):
    """The config section class of family ``name`` (what ``EncoderConfig(name=...)`` builds);
    ``None``: every family's."""
    return choose_section(FAMILIES, "encoder.name", name, lambda family: family.section)


def _choose(kind: str, name: str, valid) -> None:
    if name not in valid:
        close = difflib.get_close_matches(str(name), list(valid), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown {kind} {name!r}{hint}; choose from: {', '.join(valid)}")


def build(name: str, variant: str | None = None, **overrides) -> nn.Module:
    """The encoder module of family ``name``, sized by ``variant`` and then ``overrides``."""
    _choose("encoder", name, FAMILIES)
    family = FAMILIES[name]
    kwargs = {}
    if variant is not None:
        _choose(f"{name} variant", variant, family.variants)
        kwargs.update(family.variants[variant])
    kwargs.update(overrides)
    return family.module(**kwargs)


def check_section(e) -> None:
    """Checks an encoder config section (a family's ``EncoderConfig``) against its family: the
    variant, remat and head divisibility, naming the closest valid choice."""
    _choose("encoder", e.name, FAMILIES)
    family = FAMILIES[e.name]
    if e.remat and not family.remat:
        raise ValueError(f"encoder.remat=True: encoder {e.name!r} has no blocks to "
                         f"rematerialise; use it with {', '.join(REMAT_FAMILIES)}")
    if e.variant:
        _choose(f"{e.name} variant", e.variant, family.variants)
    sizes = dict(family.variants.get(e.variant or "tiny", {}))
    sizes.update({k: getattr(e, k) for k in ("width", "num_heads") if getattr(e, k, 0)})
    if "num_heads" in sizes and sizes["width"] % sizes["num_heads"]:
        raise ValueError(f"encoder width {sizes['width']} is not divisible by "
                         f"encoder.num_heads={sizes['num_heads']}")


def lora_for(name: str, rank: int = 0, alpha: float = 0.0, targets: tuple[str, ...] = ()
             ) -> LoRA | None:
    """The adapters ``optim.lora_*`` ask of encoder family ``name`` (None: rank 0); a family
    without adapters or a target it lacks is a one-line ValueError."""
    if not rank:
        return None
    family = FAMILIES[name]
    if not family.lora_layers:
        with_lora = [n for n, f in FAMILIES.items() if f.lora_layers]
        raise ValueError(f"optim.lora_rank={rank}: encoder {name!r} takes no LoRA adapters; "
                         f"use one of {', '.join(with_lora)}")
    wrong = [t for t in targets if t not in family.lora_layers]
    if wrong:
        raise ValueError(f"optim.lora_targets {wrong} are not dense layers of {name!r}; choose "
                         f"from: {', '.join(family.lora_layers)}")
    return LoRA(rank, alpha, tuple(targets) or family.lora_default)


def from_section(e, *, input_shape: tuple[int, ...], vocab: tuple[str, ...] | None,
                 dataset_name: str = "the dataset", population: bool = False,
                 lora: LoRA | None = None) -> nn.Module:
    """The encoder an encoder config section describes, for inputs of ``input_shape`` (token
    encoders take their vocabulary from ``vocab``). ``population``: it will be vmapped over
    per-member weights (``conv=auto`` then computes CNN convolutions as patch matmuls);
    ``lora``: adapters (:func:`lora_for`)."""
    check_section(e)
    family = FAMILIES[e.name]
    is_text = family.reads == "tokens"
    if is_text != (vocab is not None):
        raise ValueError(
            f"encoder {e.name!r} reads token ids, but dataset {dataset_name!r} has no vocabulary "
            f"(use a text dataset such as latent_topics)" if is_text else
            f"dataset {dataset_name!r} holds token ids; use a token encoder "
            f"({', '.join(TOKEN_FAMILIES)})")
    if family.reads == "images" and len(input_shape) != 3:
        raise ValueError(f"encoder {e.name!r} reads images [H, W, C], but {dataset_name!r} has "
                         f"inputs of shape {tuple(input_shape)} (try data.name=digits)")
    if family.check is not None:
        family.check(e, tuple(input_shape), dataset_name)
    kwargs = {"embed_dim": e.embed_dim}
    if e.remat:
        kwargs["remat"] = True
    kwargs.update(family.fields(e, input_shape=tuple(input_shape), vocab=vocab,
                                population=population))
    module = build(e.name, e.variant or family.default_variant, **kwargs)
    if lora is not None:
        if lora.rank > module.width:
            raise ValueError(f"optim.lora_rank={lora.rank} is larger than the encoder's width "
                             f"{module.width}: a low-rank adapter needs rank < width")
        module = module.clone(lora=lora)
    return module


def load_exported(path):
    """``(module, variables)`` of an encoder exported with ``repr-jax export --format
    safetensors`` (:func:`repr_jax.encoders.pretrained.load_exported`)."""
    from repr_jax.encoders.pretrained import load_exported as load
    return load(path)


__all__ = ["FAMILIES", "Family", "IMAGE_FAMILIES", "MLPHead", "REMAT_FAMILIES", "TOKEN_FAMILIES",
           "build", "check_section", "encoder_config", "from_section", "load_exported",
           "lora_for"]
