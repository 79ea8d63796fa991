"""The SSL image augmentations against float64 numpy transcriptions of torchvision's functional ops
(``tests/reference_impls.py``), and against torchvision itself where it is installed; the random
parameters against torchvision's sampling rules; views per example, keyed, shaped."""

import dataclasses
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


def test_multi_crop_makes_two_global_and_n_local_views_of_their_own_sizes():
    from repr_jax.data.views import make_views_fn
    images = jnp.asarray(np.stack([_image(32, 32)] * 4))
    dino = make_views_fn(preset="dino")
    assert dino.local_crops == A.LOCAL_CROPS["dino"] == 6
    key = jax.random.PRNGKey(0)
    local = dino.local_views(key, images)
    assert len(local) == 6 and {v.shape for v in local} == {(4, 14, 14, 3)}  # 96/224 of 32 px
    assert dino(key, images, view=1).shape == images.shape  # the global views keep the size
    assert len({np.asarray(v).tobytes() for v in local}) == 6  # each local view its own draw
    custom = make_views_fn(preset="simclr", local_crops=2, local_size=0.5, local_scale=(0.2, 0.5))
    per_view, n = A.recipes("simclr", local_crops=2, local_size=0.5, local_scale=(0.2, 0.5))
    assert n == custom.local_crops == 2 and len(per_view) == 3
    assert per_view[2].scale == (0.2, 0.5) and per_view[2].size == 0.5
    assert {v.shape for v in custom.local_views(key, images)} == {(4, 16, 16, 3)}
    assert make_views_fn(preset="dino", local_crops=0).local_crops == 0


def test_each_view_and_each_example_draws_its_own_parameters():
    """Brightness-only views of one flat grey image: each view's factor is the view's mean over the
    image's, so the factors of two views (and of two examples) must be uncorrelated."""
    from repr_jax.data.views import make_views_fn
    grey = jnp.full((512, 4, 4, 3), 0.25)
    views = make_views_fn(preset="simclr", crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0),
                          flip_p=0.0, jitter=(0.5, 0.0, 0.0, 0.0), jitter_p=1.0, grayscale_p=0.0,
                          blur_p=0.0)
    from repr_jax.methods.base import two_views
    v1, v2 = two_views(views, jax.random.PRNGKey(1), {"x": grey})  # as every siamese method does
    f1, f2 = (np.asarray(v).mean(axis=(1, 2, 3)) / 0.25 for v in (v1, v2))
    assert 0.5 <= f1.min() and f1.max() <= 1.5 and f1.std() > 0.2  # U(0.5, 1.5), per example
    assert abs(np.corrcoef(f1, f2)[0, 1]) < 0.15
    assert abs(np.corrcoef(f1[:256], f1[256:])[0, 1]) < 0.2  # examples: independent draws too
    local = make_views_fn(preset="simclr", local_crops=2, crop_scale=(1.0, 1.0),
                          jitter=(0.5, 0.0, 0.0, 0.0), jitter_p=1.0, grayscale_p=0.0,
                          blur_p=0.0).local_views(jax.random.PRNGKey(2), grey)
    l1, l2 = (np.asarray(v).mean(axis=(1, 2, 3)) for v in local)
    assert abs(np.corrcoef(l1, l2)[0, 1]) < 0.15


def test_data_views_options_override_every_view_of_a_preset():
    from repr_jax import config as C
    from repr_jax.data.views import make_views_fn
    per_view, _ = A.recipes("byol", blur_p=0.0, jitter=(0.1, 0.2, 0.3, 0.05), crop_scale=(0.5, 1))
    assert all(r.blur_p == 0.0 and r.jitter == (0.1, 0.2, 0.3, 0.05) and r.scale == (0.5, 1)
               for r in per_view)
    assert per_view[1].solarize_p == 0.2  # what is not overridden stays the preset's
    cfg = C.override(C.Config(), ["data.views.preset=byol", "data.views.solarize_p=0.0"])
    assert A.recipes("byol", **{k: v for k, v in dataclasses.asdict(cfg.data.views).items()
                                if k in A.OVERRIDABLE})[0][1].solarize_p == 0.0
    with pytest.raises(ValueError, match="data.views.jitter takes 4 numbers"):
        A.recipes("simclr", jitter=(0.1, 0.2))
    with pytest.raises(ValueError, match="data.views.local_scale takes 2"):
        A.recipes("dino", local_scale=(0.1,))
    with pytest.raises(ValueError, match="set data.views.preset"):
        make_views_fn(blur_p=0.5)(jax.random.PRNGKey(0), jnp.zeros((2, 8, 8, 3)))


@pytest.mark.slow
def test_multi_crop_trains_the_siamese_family_and_is_refused_by_two_view_methods(tmp_path):
    from conftest import tiny_config
    from repr_jax.config import DataConfig, EncoderConfig, MethodConfig, TrainConfig, ViewsConfig
    from repr_jax.train import train_and_evaluate
    cfg = tiny_config(
        data=DataConfig(name="shapes", num_examples=300, image_size=16, data_dir=str(tmp_path),
                        views=ViewsConfig(preset="dino", local_crops=2)),
        encoder=EncoderConfig(name="cnn", widths=(8,), kernel_size=3),
        train=TrainConfig(batch_size=32, steps=2, ckpt_every=0, log_every=1, num_devices=1))
    out = train_and_evaluate(cfg, tmp_path / "simclr", progress=False, verbose=False)
    assert np.isfinite(out["eval_rows"][0]["value"])
    byol = dataclasses.replace(cfg, method=MethodConfig(name="byol", proj_hidden=16,
                                                        proj_dim=8, pred_hidden=16))
    with pytest.raises(ValueError, match="takes two views.*local_crops=0"):
        train_and_evaluate(byol, tmp_path / "byol", progress=False, verbose=False)
    supervised = dataclasses.replace(cfg, method=MethodConfig(name="supervised"))
    with pytest.raises(ValueError, match="'supervised' takes two views"):  # not ignored silently
        train_and_evaluate(supervised, tmp_path / "supervised", progress=False, verbose=False)
