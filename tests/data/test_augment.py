"""The SSL image augmentations against float64 numpy transcriptions of torchvision's functional ops
(``tests/reference_impls.py``), and against torchvision itself where it is installed; the random
parameters against torchvision's sampling rules; views per example, keyed, shaped."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_impls as ref

from repr_jax.data import augment as A

RNG = np.random.default_rng(0)
TOL = dict(atol=2e-5, rtol=0)  # float32 ops against float64 references on [0, 1] pixels


def _image(h=12, w=10):
    img = RNG.uniform(0, 1, (h, w, 3)).astype(np.float32)
    img[0, 0] = img[0, 0, 0]  # a grey pixel (max == min: the HSV special case)
    img[1, 1] = (1.0, 0.2, 1.0)  # ties between channels
    return img


@pytest.mark.parametrize("op, reference, factors", [
    (A.adjust_brightness, ref.tv_adjust_brightness, (0.0, 0.3, 1.0, 1.7)),
    (A.adjust_contrast, ref.tv_adjust_contrast, (0.0, 0.5, 1.0, 1.8)),
    (A.adjust_saturation, ref.tv_adjust_saturation, (0.0, 0.4, 1.0, 2.0)),
    (A.adjust_hue, ref.tv_adjust_hue, (-0.5, -0.2, 0.0, 0.13, 0.5)),
    (A.solarize, ref.tv_solarize, (0.0, 0.5, 0.9)),
])
def test_colour_ops_equal_torchvisions_convention(op, reference, factors):
    img = _image()
    for f in factors:
        np.testing.assert_allclose(op(jnp.asarray(img), f), reference(img, f), **TOL,
                                   err_msg=f"{op.__name__}({f})")


def test_grayscale_has_torchvisions_weights_and_channels():
    img = _image()
    np.testing.assert_allclose(A.rgb_to_grayscale(jnp.asarray(img)), ref.tv_rgb_to_grayscale(img),
                               **TOL)
    three = A.rgb_to_grayscale(jnp.asarray(img), 3)
    assert three.shape == img.shape and np.all(three[..., 0] == three[..., 2])


@pytest.mark.parametrize("kernel_size, sigma", [(3, 0.1), (5, 1.0), (7, 2.0), (9, 0.7)])
def test_gaussian_blur_equals_torchvisions_convention(kernel_size, sigma):
    img = _image()
    np.testing.assert_allclose(A.gaussian_blur(jnp.asarray(img), kernel_size, sigma),
                               ref.tv_gaussian_blur(img, kernel_size, sigma), **TOL)


@pytest.mark.parametrize("box, size", [((2, 1, 8, 6), (8, 6)), ((0, 0, 12, 10), (5, 7)),
                                       ((3, 2, 4, 5), (16, 9)), ((1, 3, 9, 7), (12, 10))])
def test_resized_crop_equals_torchvisions_bilinear_without_antialias(box, size):
    img = _image()
    out = A.resized_crop(jnp.asarray(img), *[jnp.float32(v) for v in box], size)
    assert out.shape == (*size, 3)
    np.testing.assert_allclose(out, ref.tv_resized_crop(img, *box, size), **TOL)


def test_crop_boxes_follow_random_resized_crop_rules():
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    top, left, h, w = jax.vmap(lambda k: A.crop_box(k, 32, 24, (0.2, 0.9), (0.5, 2.0)))(keys)
    top, left, h, w = map(np.asarray, (top, left, h, w))
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 32).all() and (left + w <= 24).all()
    assert (h == np.round(h)).all() and (w == np.round(w)).all()  # whole pixels
    frac, aspect = h * w / (32 * 24), w / h
    assert frac.min() > 0.15 and frac.max() < 0.97  # the scale range, up to rounding
    assert aspect.min() > 0.4 and aspect.max() < 2.3
    assert len(np.unique(top)) > 10 and len(np.unique(left)) > 10
    # No proposal can fit: the central crop, its ratio clamped into range (torchvision's fallback).
    top, left, h, w = A.crop_box(jax.random.PRNGKey(1), 10, 40, scale=(5.0, 6.0), ratio=(0.5, 2.0))
    assert (int(h), int(w), int(top), int(left)) == (10, 20, 0, 10)


def test_color_jitter_draws_factors_in_range_and_orders_at_random():
    img = jnp.asarray(_image())
    keys = jax.random.split(jax.random.PRNGKey(0), 200)
    out = jax.vmap(lambda k: A.color_jitter(k, img, 0.5, 0.0, 0.0, 0.0))(keys)
    ratio = np.asarray(out[:, 2:, 2:]) / np.asarray(img[2:, 2:])  # brightness only: one factor
    ratio = ratio[np.asarray(out[:, 2:, 2:]) < 0.999]  # not clipped
    assert ratio.min() >= 0.5 - 1e-5 and ratio.max() <= 1.5 + 1e-5
    # Brightness then contrast differs from contrast then brightness only through clipping; with
    # hue and saturation the order shows: many distinct outcomes for equal factors' ranges.
    both = jax.vmap(lambda k: A.color_jitter(k, img, 0.0, 0.0, 0.9, 0.3))(keys[:20])
    assert len({np.asarray(b).round(4).tobytes() for b in both}) == 20


def test_views_are_per_example_keyed_and_sized():
    images = jnp.asarray(np.stack([_image(16, 16)] * 4))  # four equal images
    recipe = A.PRESETS["simclr"][0]
    a = A.views(jax.random.PRNGKey(0), images, recipe)
    b = A.views(jax.random.PRNGKey(0), images, recipe)
    c = A.views(jax.random.PRNGKey(1), images, recipe)
    assert a.shape == images.shape and np.array_equal(a, b) and not np.array_equal(a, c)
    assert len({np.asarray(v).tobytes() for v in a}) == 4  # equal images, independent views
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    small = A.views(jax.random.PRNGKey(0), images, A.Recipe(size=8))
    assert small.shape == (4, 8, 8, 3)
    gray = A.views(jax.random.PRNGKey(0), images[..., :1], recipe)  # colour ops skipped
    assert gray.shape == (4, 16, 16, 1)


def test_ops_equal_torchvision_itself():
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed (not a dependency): the float64 transcriptions "
                    "above stand in for it")
    try:
        import torch
        from torchvision.transforms import functional as F
    except Exception as e:  # noqa: BLE001 - a torch/torchvision build mismatch
        pytest.skip(f"torchvision does not import here ({type(e).__name__}: {e})")
    img = _image()
    chw = torch.from_numpy(img).permute(2, 0, 1)

    def hwc(t):
        return t.permute(1, 2, 0).numpy()
    jimg = jnp.asarray(img)
    np.testing.assert_allclose(A.adjust_hue(jimg, 0.2), hwc(F.adjust_hue(chw, 0.2)), atol=1e-5)
    np.testing.assert_allclose(A.adjust_contrast(jimg, 0.5), hwc(F.adjust_contrast(chw, 0.5)),
                               atol=1e-5)
    np.testing.assert_allclose(A.gaussian_blur(jimg, 5, 1.0),
                               hwc(F.gaussian_blur(chw, [5, 5], [1.0, 1.0])), atol=1e-5)
    np.testing.assert_allclose(
        A.resized_crop(jimg, 2.0, 1.0, 8.0, 6.0, (16, 12)),
        hwc(F.resized_crop(chw, 2, 1, 8, 6, [16, 12], antialias=False)), atol=1e-5)


def test_presets_reach_the_views_and_per_view_recipes_differ():
    from repr_jax import config as C
    from repr_jax.data.views import make_views_fn
    images = jnp.asarray(np.stack([_image(16, 16)] * 3))
    byol = make_views_fn(preset="byol")
    key = jax.random.PRNGKey(3)
    first, second = byol(key, images), byol(key, images, view=1)
    assert first.shape == second.shape == images.shape and not np.array_equal(first, second)
    np.testing.assert_array_equal(first, A.views(jax.random.split(key)[1], images,
                                                 A.PRESETS["byol"][0]))
    with pytest.raises(C.ConfigError, match="data.views.preset"):
        C.override(C.Config(), ["data.views.preset=simclr_v9"])
    with pytest.raises(ValueError, match="preset='simclr' needs images"):
        make_views_fn(preset="simclr")(key, jnp.zeros((2, 40)))
