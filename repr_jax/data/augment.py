"""The standard self-supervised image augmentations, on device in JAX, with torchvision's semantics.

Each op is a pure function of one float image ``[H, W, C]`` in ``[0, 1]`` and its parameters, a
transcription of ``torchvision.transforms.functional`` on float tensors (``_functional_tensor.py``):
:func:`resized_crop` (bilinear, ``align_corners=False``, antialias off), :func:`hflip`,
:func:`adjust_brightness`, :func:`adjust_contrast`, :func:`adjust_saturation`, :func:`adjust_hue`,
:func:`rgb_to_grayscale`, :func:`gaussian_blur` (reflect padding) and :func:`solarize`. A
:class:`Recipe` (the parameters of ``RandomResizedCrop``, ``RandomHorizontalFlip``,
``RandomApply(ColorJitter)``, ``RandomGrayscale``, ``RandomApply(GaussianBlur)`` and
``RandomSolarize``, under torchvision's names) samples each image's parameters from one key
(:func:`sample_view`), so a batch is ``jax.vmap(view)(keys, images)``; :data:`PRESETS` holds the
published recipes.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax.scipy import ndimage

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's (and TF's) luma weights


# --------------------------------------------------------------------------------------------------
# Ops on one image [H, W, C], float in [0, 1]
# --------------------------------------------------------------------------------------------------

def resized_crop(img: jax.Array, top, left, height, width, size: tuple[int, int]) -> jax.Array:
    """``F.resized_crop(img, top, left, height, width, size, BILINEAR, antialias=False)``: the
    crop's box may be traced (one per example); source coordinates follow
    ``align_corners=False`` and are clamped to the crop, as torch's upsampling does."""
    out_h, out_w = size
    ys = (jnp.arange(out_h) + 0.5) * (height / out_h) - 0.5
    xs = (jnp.arange(out_w) + 0.5) * (width / out_w) - 0.5
    ys = top + jnp.clip(ys, 0.0, height - 1.0)
    xs = left + jnp.clip(xs, 0.0, width - 1.0)
    yy, xx = jnp.meshgrid(ys, xs, indexing="ij")
    return jnp.stack([ndimage.map_coordinates(img[..., c], [yy, xx], order=1, mode="nearest")
                      for c in range(img.shape[-1])], axis=-1)


def hflip(img: jax.Array) -> jax.Array:
    return img[:, ::-1, :]


def rgb_to_grayscale(img: jax.Array, num_output_channels: int = 1) -> jax.Array:
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    gray = (GRAY_WEIGHTS[0] * r + GRAY_WEIGHTS[1] * g + GRAY_WEIGHTS[2] * b)[..., None]
    return jnp.broadcast_to(gray, img.shape[:-1] + (num_output_channels,))


def _blend(img1, img2, ratio):
    return jnp.clip(ratio * img1 + (1.0 - ratio) * img2, 0.0, 1.0)


def adjust_brightness(img, factor):
    return _blend(img, jnp.zeros_like(img), factor)


def adjust_contrast(img, factor):
    return _blend(img, jnp.mean(rgb_to_grayscale(img)), factor)


def adjust_saturation(img, factor):
    return _blend(img, rgb_to_grayscale(img), factor)


def _rgb_to_hsv(img):
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    maxc, minc = img.max(-1), img.min(-1)
    eqc = maxc == minc
    cr = maxc - minc
    ones = jnp.ones_like(maxc)
    s = cr / jnp.where(eqc, ones, maxc)
    cr_divisor = jnp.where(eqc, ones, cr)
    rc, gc, bc = (maxc - r) / cr_divisor, (maxc - g) / cr_divisor, (maxc - b) / cr_divisor
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = jnp.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return h, s, maxc


def _hsv_to_rgb(h, s, v):
    i = jnp.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.astype(jnp.int32) % 6
    p = jnp.clip(v * (1.0 - s), 0.0, 1.0)
    q = jnp.clip(v * (1.0 - s * f), 0.0, 1.0)
    t = jnp.clip(v * (1.0 - s * (1.0 - f)), 0.0, 1.0)
    r = jnp.choose(i, [v, q, p, p, t, v], mode="clip")
    g = jnp.choose(i, [t, v, v, q, p, p], mode="clip")
    b = jnp.choose(i, [p, p, t, v, v, q], mode="clip")
    return jnp.stack([r, g, b], axis=-1)


def adjust_hue(img, factor):
    """Rotates hue by ``factor`` turns (in [-0.5, 0.5]) through HSV, as torchvision."""
    h, s, v = _rgb_to_hsv(img)
    return _hsv_to_rgb(jnp.mod(h + factor, 1.0), s, v)


def gaussian_kernel1d(kernel_size: int, sigma) -> jax.Array:
    half = (kernel_size - 1) * 0.5
    x = jnp.linspace(-half, half, kernel_size)
    pdf = jnp.exp(-0.5 * (x / sigma) ** 2)
    return pdf / pdf.sum()


def gaussian_blur(img: jax.Array, kernel_size: int, sigma) -> jax.Array:
    """``F.gaussian_blur(img, [k, k], [sigma, sigma])``: reflect padding, the separable kernel
    (torchvision's 2-D kernel is the outer product of the same 1-D one)."""
    k = gaussian_kernel1d(kernel_size, sigma)
    pad = kernel_size // 2
    x = jnp.pad(img, ((pad, pad), (pad, pad), (0, 0)), mode="reflect")
    h, w = img.shape[:2]
    x = sum(k[i] * x[i:i + h] for i in range(kernel_size))
    return sum(k[i] * x[:, i:i + w] for i in range(kernel_size))


def solarize(img, threshold):
    return jnp.where(img >= threshold, 1.0 - img, img)


# --------------------------------------------------------------------------------------------------
# Random parameters, as torchvision's transforms draw them
# --------------------------------------------------------------------------------------------------

def crop_box(key, height: int, width: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
             tries: int = 10):
    """``RandomResizedCrop.get_params``: ``(top, left, h, w)`` from up to ``tries`` proposals of
    area fraction ``U(scale)`` and log-uniform aspect ratio; the central crop (ratio clamped)
    when none fits."""
    k_area, k_ratio, k_top, k_left = jax.random.split(key, 4)
    area = height * width
    target = area * jax.random.uniform(k_area, (tries,), minval=scale[0], maxval=scale[1])
    aspect = jnp.exp(jax.random.uniform(k_ratio, (tries,), minval=math.log(ratio[0]),
                                        maxval=math.log(ratio[1])))
    w = jnp.round(jnp.sqrt(target * aspect))
    h = jnp.round(jnp.sqrt(target / aspect))
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = jnp.argmax(ok)
    in_ratio = width / height
    if in_ratio < min(ratio):
        fw, fh = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        fw, fh = round(height * max(ratio)), height
    else:
        fw, fh = width, height
    h = jnp.where(ok.any(), h[first], fh)
    w = jnp.where(ok.any(), w[first], fw)
    top = jnp.where(ok.any(), jnp.floor(jax.random.uniform(k_top) * (height - h + 1)),
                    (height - fh) // 2)
    left = jnp.where(ok.any(), jnp.floor(jax.random.uniform(k_left) * (width - w + 1)),
                     (width - fw) // 2)
    return top, left, h, w


def color_jitter(key, img, brightness: float, contrast: float, saturation: float, hue: float):
    """``ColorJitter(brightness, contrast, saturation, hue)``: each factor drawn uniformly
    (``[max(0, 1 - b), 1 + b]``, hue ``[-h, h]``), the four applied in a random order."""
    k_order, k_b, k_c, k_s, k_h = jax.random.split(key, 5)
    factors = [jax.random.uniform(k, minval=max(0.0, 1 - v), maxval=1 + v)
               for k, v in ((k_b, brightness), (k_c, contrast), (k_s, saturation))]
    factors.append(jax.random.uniform(k_h, minval=-hue, maxval=hue))
    ops = (adjust_brightness, adjust_contrast, adjust_saturation, adjust_hue)
    active = [v > 0 for v in (brightness, contrast, saturation, hue)]
    order = jax.random.permutation(k_order, 4)
    for position in range(4):
        branches = [(lambda x, op=op, f=f: op(x, f)) if on else (lambda x: x)
                    for op, f, on in zip(ops, factors, active)]
        img = jax.lax.switch(order[position], branches, img)
    return img


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One view's augmentation, in torchvision's terms. ``size``: the output side in pixels, a
    fraction of the input's side when below 1 (multi-crop's local views), 0 = the input's."""
    size: float = 0
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)
    jitter_p: float = 0.8
    grayscale_p: float = 0.2
    blur_p: float = 0.5
    blur_kernel: float = 0.1  # a fraction of the size (odd, at least 3 pixels), or pixels if > 1
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    solarize_p: float = 0.0
    solarize_threshold: float = 0.5

    def kernel_size(self, size: int) -> int:
        k = int(self.blur_kernel) if self.blur_kernel > 1 else int(round(self.blur_kernel * size))
        return max(3, k | 1)


def view(key: jax.Array, img: jax.Array, recipe: Recipe) -> jax.Array:
    """One random view of one image ``[H, W, C]`` under ``recipe`` (grayscale images skip the
    colour ops, as torchvision does)."""
    h, w, c = img.shape
    size = (output_side(recipe, h), output_side(recipe, w))
    ks = jax.random.split(key, 8)
    top, left, ch, cw = crop_box(ks[0], h, w, recipe.scale, recipe.ratio)
    img = resized_crop(img, top, left, ch, cw, size)
    img = jnp.where(jax.random.bernoulli(ks[1], recipe.flip_p), hflip(img), img)
    if c == 3 and recipe.jitter_p > 0 and any(recipe.jitter):
        img = jnp.where(jax.random.bernoulli(ks[2], recipe.jitter_p),
                        color_jitter(ks[3], img, *recipe.jitter), img)
    if c == 3 and recipe.grayscale_p > 0:
        img = jnp.where(jax.random.bernoulli(ks[4], recipe.grayscale_p),
                        rgb_to_grayscale(img, 3), img)
    if recipe.blur_p > 0:
        sigma = jax.random.uniform(ks[5], minval=recipe.blur_sigma[0], maxval=recipe.blur_sigma[1])
        img = jnp.where(jax.random.bernoulli(ks[6], recipe.blur_p),
                        gaussian_blur(img, recipe.kernel_size(size[0]), sigma), img)
    if recipe.solarize_p > 0:
        img = jnp.where(jax.random.bernoulli(ks[7], recipe.solarize_p),
                        solarize(img, recipe.solarize_threshold), img)
    return img


def output_side(recipe: Recipe, side: int) -> int:
    """The side of ``recipe``'s output for an input side of ``side`` pixels."""
    if not recipe.size:
        return side
    return max(1, round(recipe.size * side)) if recipe.size < 1 else int(recipe.size)


def views(key: jax.Array, images: jax.Array, recipe: Recipe) -> jax.Array:
    """One view of each image of ``[B, H, W, C]``: one key per example."""
    return jax.vmap(lambda k, x: view(k, x, recipe))(jax.random.split(key, images.shape[0]),
                                                      images)


# The published recipes (per view where the two views differ). Sizes are the input's unless set.
PRESETS: dict[str, tuple[Recipe, ...]] = {
    # SimCLR (Chen et al. 2020, appendix A): colour strength s = 1.
    "simclr": (Recipe(jitter=(0.8, 0.8, 0.8, 0.2)),),
    # MoCo v2 (Chen et al. 2020b): crop scale from 0.2.
    "moco_v2": (Recipe(scale=(0.2, 1.0)),),
    # The SimCLR ablations of its central finding (crop + colour is what matters).
    "simclr_no_color": (Recipe(jitter_p=0.0, grayscale_p=0.0),),
    "simclr_no_crop": (Recipe(scale=(1.0, 1.0), ratio=(1.0, 1.0), jitter=(0.8, 0.8, 0.8, 0.2)),),
    # BYOL (Grill et al. 2020, table 6): asymmetric blur and solarisation.
    "byol": (Recipe(jitter=(0.4, 0.4, 0.2, 0.1), blur_p=1.0),
             Recipe(jitter=(0.4, 0.4, 0.2, 0.1), blur_p=0.1, solarize_p=0.2)),
    # DINO (Caron et al. 2021, its main_dino.py DataAugmentationDINO): BYOL's two global views at
    # crop scale (0.4, 1), and LOCAL_CROPS[preset] small views.
    "dino": (Recipe(scale=(0.4, 1.0), jitter=(0.4, 0.4, 0.2, 0.1), blur_p=1.0),
             Recipe(scale=(0.4, 1.0), jitter=(0.4, 0.4, 0.2, 0.1), blur_p=0.1, solarize_p=0.2)),
}

# Multi-crop: the recipe of the local views and how many a preset makes by default (DINO: 6 views of
# 96 px for 224 px inputs at crop scale (0.05, 0.4)). Any preset takes local views via
# data.views.local_crops; the others' default is none.
LOCAL = Recipe(size=96 / 224, scale=(0.05, 0.4), jitter=(0.4, 0.4, 0.2, 0.1), blur_p=0.5)
LOCAL_CROPS = {"dino": 6}

# Recipe fields that data.views.* can override in every view of a preset (the names are the
# config's; data.views.crop_scale is Recipe.scale, and so on).
OVERRIDABLE = {"crop_scale": "scale", "crop_ratio": "ratio", "flip_p": "flip_p",
               "jitter": "jitter", "jitter_p": "jitter_p", "grayscale_p": "grayscale_p",
               "blur_p": "blur_p", "blur_sigma": "blur_sigma", "solarize_p": "solarize_p"}


def recipes(preset: str, *, local_crops: int = -1, local_size: float = 0.0,
            local_scale: tuple[float, ...] = (), **overrides) -> tuple[tuple[Recipe, ...], int]:
    """``(per-view recipes, number of local views)`` of ``preset`` with ``overrides`` (the config's
    names, :data:`OVERRIDABLE`; ``-1``/``()`` = the preset's) applied to every view. The last recipe
    is the local views' when there are any."""
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise ValueError(f"views: unknown recipe options {unknown}; choose from "
                         f"{sorted(OVERRIDABLE)}")
    given = {k: v for k, v in overrides.items() if v != -1 and v != ()}
    if local_scale:
        given["local_scale"] = local_scale
    for key, value in given.items():
        want = getattr(Recipe(), OVERRIDABLE.get(key, "scale"))
        if isinstance(want, tuple) and len(value) != len(want):
            raise ValueError(f"data.views.{key} takes {len(want)} numbers (like {want}), not "
                             f"{value}")
    changes = {OVERRIDABLE[k]: tuple(v) if isinstance(v, (tuple, list)) else v
               for k, v in given.items() if k in OVERRIDABLE}
    per_view = tuple(dataclasses.replace(r, **changes) for r in PRESETS[preset])
    n_local = LOCAL_CROPS.get(preset, 0) if local_crops < 0 else local_crops
    if n_local:
        local = dataclasses.replace(LOCAL, **changes)
        local = dataclasses.replace(local, **({"scale": tuple(local_scale)} if local_scale else {}),
                                    **({"size": local_size} if local_size else {}))
        per_view = (per_view if len(per_view) > 1 else per_view * 2) + (local,)
    return per_view, n_local
