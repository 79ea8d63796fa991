"""What an encoder family is to the registry: its module, its named sizes, its config section and
how that section becomes the module's fields. Each family's file declares these beside its module
and ends with ``FAMILY = Family(...)``; adding a family is that file plus one line in
``repr_jax.encoders.FAMILIES``."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

READS = ("any", "tokens", "images")


@dataclasses.dataclass(frozen=True)
class Family:
    """An encoder family.

    ``fields(section, *, input_shape, vocab, population)`` gives the module's fields beyond the
    variant's (and ``embed_dim`` / ``remat``, which every family takes); ``reads``: what inputs it
    takes (``tokens``: token ids with a vocabulary, ``images``: ``[H, W, C]``, ``any``: vectors,
    signals or images); ``default_variant``: its sizes when ``encoder.variant`` is empty (None:
    the section's own fields); ``check(section, input_shape, dataset_name)`` raises a one-line
    ValueError for sizes the inputs refute, in the config's key names; ``lora_layers``: the
    dense layers that can take LoRA adapters (``lora_default`` when ``optim.lora_targets`` is
    empty); none: the family takes no adapters; ``mixed_precision``: its GEMMs follow
    ``encoders.precision``'s policy, so ``train.compute_dtype=bfloat16`` keeps its parameters
    float32 and takes bfloat16 GEMMs with float32 results (else the step casts parameters and
    inputs to bfloat16)."""
    module: type
    variants: dict[str, dict[str, Any]]
    section: type
    fields: Callable[..., dict[str, Any]]
    reads: str = "any"
    default_variant: str | None = "tiny"
    remat: bool = False
    check: Callable[..., None] | None = None
    lora_layers: tuple[str, ...] = ()
    lora_default: tuple[str, ...] = ()
    mixed_precision: bool = False

    def __post_init__(self):
        if self.reads not in READS:
            raise ValueError(f"Family.reads={self.reads!r}; choose from {READS}")


def sizes(section: Any, names: dict[str, str]) -> dict[str, Any]:
    """``{module field: value}`` of the section's size fields that are set (non-zero): what
    overrides the variant's sizes. ``names`` maps a section field to its module field."""
    return {module_field: getattr(section, field) for field, module_field in names.items()
            if getattr(section, field)}


def patch_check(default_patch: Callable[[Any], int]) -> Callable[..., None]:
    """A ``check`` for patch-based families (vit, mixer): the patch must divide the images."""
    def check(e, input_shape: tuple[int, ...], dataset_name: str) -> None:
        p = e.patch_size or default_patch(e)
        h, w = input_shape[:2]
        if h % p or w % p:
            divisors = [d for d in range(1, min(h, w) + 1) if h % d == 0 and w % d == 0]
            raise ValueError(f"encoder.patch_size={p} does not divide the {h}x{w} images of "
                             f"{dataset_name!r}; choose one of {divisors}")
    return check
