"""Augmentations that make views of a batch, run inside the jitted step (keyed by ``fold_in``).

Inputs are batches ``x_BxL`` (1-D signals or vectors) or ``x_BxHxWxC`` (images). Every random choice
is per example and comes from the key, so the same key gives the same views.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from repr_jax.data import augment as recipes


def _shift_1d(key, x_BxL, max_shift: int):
    """Shifts each signal by an integer in [-max_shift, max_shift], filling with zeros."""
    b, length = x_BxL.shape
    s_B = jax.random.randint(key, (b,), -max_shift, max_shift + 1)
    padded = jnp.pad(x_BxL, ((0, 0), (max_shift, max_shift)))
    return jax.vmap(lambda row, s: jax.lax.dynamic_slice(row, (max_shift - s,), (length,)))(
        padded, s_B)


def _mask_1d(key, x_BxL, fraction: float):
    """Zeros one contiguous segment of ``round(fraction * L)`` positions per signal."""
    b, length = x_BxL.shape
    width = int(round(fraction * length))
    start_B = jax.random.randint(key, (b, 1), 0, length - width + 1)
    pos = jnp.arange(length)[None, :]
    return jnp.where((pos >= start_B) & (pos < start_B + width), 0.0, x_BxL)


def _crop_2d(key, x_BxHxWxC, pad: int):
    """Pads by ``pad`` pixels (zeros) and crops back to H×W at a random offset per image."""
    b, h, w, c = x_BxHxWxC.shape
    padded = jnp.pad(x_BxHxWxC, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    off_Bx2 = jax.random.randint(key, (b, 2), 0, 2 * pad + 1)
    return jax.vmap(lambda img, o: jax.lax.dynamic_slice(img, (o[0], o[1], 0), (h, w, c)))(
        padded, off_Bx2)


def augment(key: jax.Array, x: jax.Array, *, shift: int = 0, scale: float = 0.0,
            noise: float = 0.0, mask: float = 0.0, crop_pad: int = 0, flip: bool = False,
            preset: str = "", view: int = 0, **recipe_options) -> jax.Array:
    """One random view of each example of ``x`` (``[B, L]`` or ``[B, H, W, C]``); same shape out.

    1-D: shift (zero fill), mask (one zeroed segment). 2-D: crop after padding, horizontal flip.
    Both: amplitude scaling by ``U(1 - scale, 1 + scale)`` and additive Gaussian noise of std
    ``noise``. With every option at its default this is the identity.

    ``preset``: a published image recipe (:data:`repr_jax.data.augment.PRESETS`: random resized
    crop back to the input's size, flip, colour jitter, grayscale, blur, solarise), applied first;
    ``view`` picks the recipe of a preset whose views differ (BYOL's second view; from 2 on,
    multi-crop's local views); ``recipe_options`` override the preset's parameters
    (:func:`repr_jax.data.augment.recipes`).
    """
    if not preset and any(v != -1 and v != () and v != 0 for v in recipe_options.values()):
        raise ValueError(f"views: {sorted(recipe_options)} change a preset's recipe; set "
                         f"data.views.preset")
    if jnp.issubdtype(x.dtype, jnp.integer):
        if shift or scale or noise or mask or crop_pad or flip or preset:
            raise ValueError("views: inputs are integer token ids; signal/image augmentations "
                             "(shift, scale, noise, mask, crop_pad, flip, preset) do not apply")
        return x
    if preset:
        if x.ndim != 4:
            raise ValueError(f"views: preset={preset!r} needs images [B, H, W, C]; got shape "
                             f"{x.shape}")
        per_view, _ = recipes.recipes(preset, **recipe_options)
        key, k_preset = jax.random.split(key)
        x = recipes.views(k_preset, x, per_view[min(view, len(per_view) - 1)])
    if (shift or mask) and x.ndim != 2 or (crop_pad or flip) and x.ndim != 4:
        fix = (" (images: start from an image experiment, --config simclr_shapes or "
               "simclr_digits, or set data.views.shift=0 and data.views.mask=0)"
               if x.ndim == 4 else "")
        raise ValueError(f"views: shift/mask need inputs [B, L], crop_pad/flip need [B, H, W, C]; "
                         f"got shape {x.shape}{fix}")
    k_shift, k_mask, k_crop, k_flip, k_scale, k_noise = jax.random.split(key, 6)
    b = x.shape[0]
    if x.ndim == 2:
        if shift:
            x = _shift_1d(k_shift, x, shift)
        if mask:
            x = _mask_1d(k_mask, x, mask)
    elif x.ndim == 4:
        if crop_pad:
            x = _crop_2d(k_crop, x, crop_pad)
        if flip:
            flip_B = jax.random.bernoulli(k_flip, 0.5, (b, 1, 1, 1))
            x = jnp.where(flip_B, x[:, :, ::-1, :], x)
    bshape = (b,) + (1,) * (x.ndim - 1)
    if scale:
        x = x * jax.random.uniform(k_scale, bshape, minval=1 - scale, maxval=1 + scale)
    if noise:
        x = x + noise * jax.random.normal(k_noise, x.shape)
    return x


class ViewMaker:
    """``augment`` with its options fixed: ``views(key, x, view=0) -> view``. ``local_crops``: how
    many small local views (multi-crop) a method that takes them adds to its two global views."""

    def __init__(self, **options):
        self.options = options
        preset = options.get("preset", "")
        recipe_options = {k: v for k, v in options.items() if k.startswith("local_")
                          or k in recipes.OVERRIDABLE}
        self.local_crops = recipes.recipes(preset, **recipe_options)[1] if preset else 0

    def __call__(self, key: jax.Array, x: jax.Array, view: int = 0) -> jax.Array:
        return augment(key, x, view=view, **self.options)

    def local_views(self, key: jax.Array, x: jax.Array) -> list[jax.Array]:
        """The ``local_crops`` local views of each example (each ``[B, h, w, C]``, h < H)."""
        return [self(k, x, view=2) for k in jax.random.split(key, self.local_crops)]


def make_views_fn(**options) -> ViewMaker:
    """The views of a config's ``data.views`` options (see :func:`augment`)."""
    return ViewMaker(**options)
