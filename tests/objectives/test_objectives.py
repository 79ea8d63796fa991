"""The conformance suite every objective passes: hand-computed values, its reference convention on
random inputs (1e-5), batch-permutation and documented symmetries, temperature/scale behaviour, finite
gradients, jit == eager, vmap over a leading axis, and (batch-coupled ones) 8-device sharding."""

import dataclasses
from typing import Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import reference_impls as R
from repr_jax import objectives as O

E = np.e


# ----------------------------------------------------------------------------- hand-computed values
HAND = {
    # z1 = z2 = I_2, tau = 1: each anchor sees {1 (positive), 0, 0} -> log(e + 2) - 1.
    "nt_xent": (lambda: O.nt_xent(jnp.eye(2), jnp.eye(2), 1.0), np.log(E + 2) - 1),
    # q = k = I_2, tau = 1: logits [[1, 0], [0, 1]] -> log(e + 1) - 1 per query.
    "info_nce": (lambda: O.info_nce(jnp.eye(2), jnp.eye(2), 1.0), [np.log(E + 1) - 1] * 2),
    # an extra negative equal to e1 adds e^1 to query 0's denominator and e^0 to query 1's.
    "info_nce_neg": (lambda: O.info_nce(jnp.eye(2), jnp.eye(2), 1.0, negatives=jnp.eye(2)[:1]),
                     [np.log(2 * E + 1) - 1, np.log(E + 2) - 1]),
    # dot products (sparse encoders), q = k = 2 I_2: logits [[4, 0], [0, 4]].
    "info_nce_dot": (lambda: O.info_nce(2 * jnp.eye(2), 2 * jnp.eye(2), 1.0, normalize=False),
                     [np.log(E ** 4 + 1) - 4] * 2),
    "clip_loss": (lambda: O.clip_loss(jnp.eye(2), jnp.eye(2), 1.0), np.log(E + 1) - 1),
    # diagonal logits 1 (label +1), off-diagonal 0 (label -1): (2 log(1 + e^-1) + 2 log 2) / 2.
    "siglip_loss": (lambda: O.siglip_loss(jnp.eye(2), jnp.eye(2), 1.0, 0.0),
                    np.log1p(np.exp(-1)) + np.log(2)),
    # two examples (labels 0, 1), both views of example b equal e_b: like nt_xent's case.
    "supcon": (lambda: O.supcon(jnp.stack([jnp.eye(2), jnp.eye(2)], axis=1), jnp.array([0, 1]),
                                1.0), [np.log(E + 2) - 1] * 2),
    # d(a, p) = 5, d(a, n) = 1, margin 1 -> 5 (eps = 1e-6 shifts it by ~1e-6).
    "triplet": (lambda: O.triplet(jnp.zeros((1, 2)), jnp.array([[3.0, 4.0]]),
                                  jnp.array([[0.0, 1.0]]), 1.0), [5.0]),
    # points 0, 1 (label 0) and 3 (label 1), margin 5: anchors get 1-3+5, 1-2+5, 0-2+5.
    "batch_hard_triplet": (lambda: O.batch_hard_triplet(jnp.array([[0.0], [1.0], [3.0]]),
                                                        jnp.array([0, 0, 1]), 5.0), [3, 4, 3]),
    "negative_cosine": (lambda: O.negative_cosine(jnp.array([[1.0, 0.0]]),
                                                  jnp.array([[1.0, 1.0]])), [-1 / np.sqrt(2)]),
    # z = [[1, 0], [-1, 0]] twice: no invariance or covariance term; dim 0 has std ~1.414 (no
    # penalty), dim 1 std sqrt(1e-4) = 0.01 -> variance term 0.99 / 2 per view -> 25 * 0.495.
    "vicreg": (lambda: O.vicreg(jnp.array([[1.0, 0.0], [-1.0, 0.0]]),
                                jnp.array([[1.0, 0.0], [-1.0, 0.0]])), 25 * 0.495),
    # each column has biased variance 1 and standardises to +-1/sqrt(1 + 1e-5) (BatchNorm's eps), so
    # C = c everywhere with c = 1 / (1 + 1e-5): 2 (1 - c)^2 + lambda * 2 c^2.
    "barlow_twins": (lambda: O.barlow_twins(jnp.array([[1.0, 1.0], [-1.0, -1.0]]),
                                            jnp.array([[1.0, 1.0], [-1.0, -1.0]]), 0.1),
                     2 * (1 - 1 / (1 + 1e-5)) ** 2 + 0.1 * 2 / (1 + 1e-5) ** 2),
    # pred 0, target 1, only the first patch masked: mean squared error 1.
    "mae_loss": (lambda: O.mae_loss(jnp.zeros((1, 2, 3)), jnp.ones((1, 2, 3)),
                                    jnp.array([[1.0, 0.0]]), norm_pix=False), 1.0),
    # uniform logits over 4 tokens: log 4 at the masked position.
    "mlm_loss": (lambda: O.mlm_loss(jnp.zeros((1, 3, 4)), jnp.array([[1, 2, 3]]),
                                    jnp.array([[0, 1, 0]])), np.log(4)),
    # q = d = I_2, tau = 1: diagonal -log sigmoid(1), off-diagonal -log(1 - sigmoid(0)) = log 2.
    "graded_bce": (lambda: O.graded_bce(jnp.eye(2), jnp.eye(2), jnp.eye(2), 1.0),
                   [(np.log1p(np.exp(-1)) + np.log(2)) / 2] * 2),
    "margin_mse": (lambda: O.margin_mse(jnp.array([3.0]), jnp.array([1.0]), jnp.array([2.0]),
                                        jnp.array([1.0])), [1.0]),
    # teacher softmax (3/4, 1/4), student (1/2, 1/2).
    "kl_distill": (lambda: O.kl_distill(jnp.zeros((1, 2)), jnp.array([[np.log(3.0), 0.0]])),
                   [0.75 * np.log(1.5) + 0.25 * np.log(0.5)]),
    # pair 0 has cos 1 and gold 0, pair 1 cos 0 and gold 1 (scale 1): one violated order.
    "cosent": (lambda: O.cosent(jnp.array([[1.0, 0.0], [1.0, 0.0]]),
                                jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([0.0, 1.0]), 1.0),
               np.log1p(E)),
    # column means (1, 0, 1, 1): 1 + 0 + 1 + 1.
    "flops_regularizer": (lambda: O.flops_regularizer(jnp.array(
        [[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 1.0, 3.0], [2.0, 0.0, 0.0, 0.0]])), 3.0),
    # identical rows: every off-diagonal cosine is 1 -> (mean_term, second_moment) = (1, 1).
    "spread_out": (lambda: jnp.stack(O.spread_out(jnp.ones((3, 2)))), [1.0, 1.0]),
    # old head = identity: logits (log 3, 0) -> p(class 0) = 3/4.
    "bct_influence": (lambda: O.bct_influence(jnp.array([[np.log(3.0), 0.0]]),
                                              {"kernel": jnp.eye(2), "bias": jnp.zeros(2)},
                                              jnp.array([0])), [np.log(4 / 3)]),
    # prefixes of width 1 and 2 of I_2 (weights 1, 2), tau = 1. Width 1: rows (1) and (0); query 0
    # sees logits (1, 0) -> log(e + 1) - 1, query 1 is all zero -> log 2. Width 2: log(e + 1) - 1.
    "matryoshka": (lambda: O.matryoshka(O.info_nce, (1, 2), (1.0, 2.0))(
        jnp.eye(2), jnp.eye(2), temperature=1.0),
        [3 * (np.log(E + 1) - 1), np.log(2) + 2 * (np.log(E + 1) - 1)]),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_computed(name):
    fn, expect = HAND[name]
    np.testing.assert_allclose(fn(), expect, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- the common suite
@dataclasses.dataclass
class Case:
    fn: Callable                       # fn(*args) -> loss
    args: Callable                     # rng -> tuple of numpy arrays (batch-first)
    reference: Callable                # (*args) -> the reference's reduced value (float)
    batch_args: tuple = None           # which args carry the batch axis (default: all)
    swap: Callable | None = None       # args -> args with the documented symmetry applied
    scale: Callable | None = None      # args -> args with a change the loss must not see
    coupled: bool = True               # couples examples (checked under sharding)


def _f32(*xs):
    return tuple(np.asarray(x, np.float32) for x in xs)


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


B, D = 16, 8
CASES = {
    "nt_xent": Case(
        lambda a, b: O.nt_xent(a, b, 0.3), lambda r: _f32(*r.normal(size=(2, B, D))),
        lambda a, b: R.lightly_ntxent(a, b, 0.3), swap=lambda a, b: (b, a),
        scale=lambda a, b: (3 * a, 0.5 * b)),
    "info_nce": Case(
        lambda q, k, n: O.info_nce(q, k, 0.05, negatives=n),
        lambda r: _f32(*r.normal(size=(2, B, D)), r.normal(size=(B, 2, D))),
        lambda q, k, n: R.st_multiple_negatives_ranking(q, k, n, 20.0), batch_args=(0, 1),
        scale=lambda q, k, n: (2 * q, 3 * k, 0.1 * n)),
    "clip_loss": Case(
        lambda a, b: O.clip_loss(a, b, 14.0), lambda r: _f32(*_unit(r.normal(size=(2, B, D)))),
        lambda a, b: R.openclip_clip(a, b, 14.0), swap=lambda a, b: (b, a)),
    "siglip_loss": Case(
        lambda a, b: O.siglip_loss(a, b, 10.0, -5.0),
        lambda r: _f32(*_unit(r.normal(size=(2, B, D)))),
        lambda a, b: R.openclip_siglip(a, b, 10.0, -5.0), swap=lambda a, b: (b, a)),
    "supcon": Case(
        lambda z, y: O.supcon(z, y, 0.1),
        lambda r: (np.float32(r.normal(size=(B, 2, D))), r.integers(0, 4, B)),
        lambda z, y: R.hobbitlong_supcon(z, y, 0.1), scale=lambda z, y: (5 * z, y)),
    "triplet": Case(
        lambda a, p, n: O.triplet(a, p, n, 1.0), lambda r: _f32(*r.normal(size=(3, B, D))),
        lambda a, p, n: R.torch_triplet_margin(a, p, n, 1.0).mean(), coupled=False),
    "batch_hard_triplet": Case(
        lambda z, y: O.batch_hard_triplet(z, y, 5.0),
        lambda r: (np.float32(r.normal(size=(B, D))), r.integers(0, 4, B)),
        lambda z, y: R.st_batch_hard_triplet(z, y, 5.0)),
    "negative_cosine": Case(
        O.negative_cosine, lambda r: _f32(*r.normal(size=(2, B, D))),
        lambda p, z: -(_unit(p) * _unit(z)).sum(-1).mean(), swap=lambda p, z: (z, p),
        scale=lambda p, z: (2 * p, 7 * z), coupled=False),
    "vicreg": Case(
        O.vicreg, lambda r: _f32(*r.normal(size=(2, B, D))),
        lambda a, b: R.lightly_vicreg(a, b, 25.0, 25.0, 1.0, 1e-4), swap=lambda a, b: (b, a)),
    "barlow_twins": Case(
        O.barlow_twins, lambda r: _f32(*r.normal(size=(2, B, D))),
        lambda a, b: R.official_barlow_twins(a, b, 5e-3), swap=lambda a, b: (b, a),
        scale=lambda a, b: (3 * a + 1, 0.5 * b - 2)),  # standardised per dimension
    "mae_loss": Case(
        lambda p, t, m: O.mae_loss(p, t, m, norm_pix=True),
        lambda r: (*_f32(*r.normal(size=(2, B, 6, 4))), np.float32(r.random((B, 6)) < 0.75)),
        lambda p, t, m: R.mae_forward_loss(p, t, m, True)),
    "mlm_loss": Case(
        O.mlm_loss, lambda r: (np.float32(r.normal(size=(B, 5, 11))), r.integers(0, 11, (B, 5)),
                               np.float32((r.random((B, 5)) < 0.3) | np.eye(B, 5, dtype=bool))),
        R.torch_mlm_cross_entropy),
    "graded_bce": Case(
        lambda q, d, rel: O.graded_bce(q, d, rel, 0.05),
        lambda r: (*_f32(*r.normal(size=(2, B, D))), np.float32(
            np.eye(B) * 0.5 + 0.5 * (r.random((B, B)) < 0.1) * r.random((B, B)))),
        lambda q, d, rel: R.bce_with_logits_graded(q, d, rel, 0.05), batch_args=(0, 2),
        scale=lambda q, d, rel: (4 * q, 0.25 * d, rel)),
    "margin_mse": Case(
        O.margin_mse, lambda r: _f32(*r.normal(size=(4, B))), R.st_margin_mse, coupled=False),
    "kl_distill": Case(
        lambda s, t: O.kl_distill(s, t, 2.0), lambda r: _f32(*r.normal(size=(2, B, 5))),
        lambda s, t: R.st_distill_kldiv(s, t, 2.0), coupled=False),
    "cosent": Case(
        lambda a, b, y: O.cosent(a, b, y, 20.0),
        lambda r: (*_f32(*r.normal(size=(2, B, D))), np.float32(r.integers(0, 5, B))),
        lambda a, b, y: R.st_cosent(a, b, y, 20.0), swap=lambda a, b, y: (b, a, y),
        scale=lambda a, b, y: (2 * a, 3 * b, y)),
    "bct_influence": Case(
        lambda z, y, k: O.bct_influence(z, {"kernel": k, "bias": jnp.arange(3.0)}, y),
        lambda r: (np.float32(r.normal(size=(B, D))), r.integers(0, 3, B),
                   np.float32(r.normal(size=(D, 3)))),
        lambda z, y, k: R.bct_cross_entropy(z, k, np.arange(3.0), y), batch_args=(0, 1),
        coupled=False),
    "flops_regularizer": Case(
        O.flops_regularizer, lambda r: (np.float32(np.maximum(r.normal(size=(B, D)), 0)),),
        R.st_flops),
    "spread_out": Case(
        lambda x: 0.5 * O.spread_out(x)[0] + O.spread_out(x)[1],
        lambda r: (np.float32(r.normal(size=(B, D))),), lambda x: _st_gor(x, 0.5, 1.0),
        scale=lambda x: (3 * x,)),
    "matryoshka": Case(
        lambda a, b: O.matryoshka(lambda x, y: O.info_nce(x, y, 0.1), (2, 4, 8),
                                  (1.0, 0.5, 0.25))(a, b),
        lambda r: _f32(*r.normal(size=(2, B, D))),
        lambda a, b: R.st_matryoshka(lambda x, y: R.st_multiple_negatives_ranking(x, y, None, 10.),
                                     (a, b), (2, 4, 8), (1.0, 0.5, 0.25))),
}


def _st_gor(x, mean_weight, second_moment_weight):
    """sentence-transformers' GlobalOrthogonalRegularizationLoss on one column, in float64."""
    u = _unit(np.asarray(x, np.float64))
    s = u @ u.T
    np.fill_diagonal(s, 0.0)
    n = len(s) * (len(s) - 1)
    return mean_weight * (s.sum() / n) ** 2 + second_moment_weight * (s ** 2).sum() / n


def _reduce(name, value):
    per_example = O.REDUCTION.get(name, "per_example") == "per_example"
    return value.mean() if per_example and value.ndim else value


def _batch_args(case):
    return case.batch_args if case.batch_args is not None else None


def _permute(case, args, perm):
    idx = _batch_args(case)
    return tuple(a[perm] if (idx is None or i in idx) else a for i, a in enumerate(args))


def test_every_public_objective_is_covered():
    assert set(O.REDUCTION) | {"matryoshka", "matryoshka_2d"} == set(O.__all__) - {
        "REDUCTION", "l2_normalize"}
    assert set(O.REDUCTION) <= set(CASES) | {"nt_xent"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_reference_convention(name):
    case = CASES[name]
    args = case.args(np.random.default_rng(0))
    value = _reduce(name, case.fn(*args))
    np.testing.assert_allclose(value, case.reference(*args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_reduction_and_batch_permutation(name):
    case = CASES[name]
    args = case.args(np.random.default_rng(1))
    out = case.fn(*args)
    perm = np.random.default_rng(2).permutation(B)
    out_perm = case.fn(*_permute(case, args, perm))
    if O.REDUCTION.get(name, "per_example") == "per_example":
        assert out.shape == (B,), f"{name} documents per-example [B] output, got {out.shape}"
        np.testing.assert_allclose(out_perm, out[perm], rtol=1e-5, atol=1e-6)
    else:
        assert out.shape == (), f"{name} documents a scalar, got {out.shape}"
        np.testing.assert_allclose(out_perm, out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n].swap or CASES[n].scale))
def test_documented_symmetry_and_scale_invariance(name):
    case = CASES[name]
    args = case.args(np.random.default_rng(3))
    out = case.fn(*args)
    for transform in (case.swap, case.scale):
        if transform is not None:
            np.testing.assert_allclose(case.fn(*transform(*args)), out, rtol=2e-5, atol=1e-5)


def test_temperature_enters_as_scale_of_similarities():
    """tau only rescales the similarity logits: clip with (a, b, s) equals (c*a, b, s/c), and for
    cosine losses a lower temperature sharpens: a perfectly aligned batch's loss falls with tau."""
    rng = np.random.default_rng(4)
    a, b = _f32(*_unit(rng.normal(size=(2, B, D))))
    np.testing.assert_allclose(O.clip_loss(a, b, 10.0), O.clip_loss(2 * a, b, 5.0), rtol=1e-5)
    np.testing.assert_allclose(O.siglip_loss(a, b, 10.0, 1.0), O.siglip_loss(a, 4 * b, 2.5, 1.0),
                               rtol=1e-5)
    z = _f32(_unit(rng.normal(size=(B, D))))[0]
    losses = [float(O.nt_xent(z, z, t)) for t in (1.0, 0.5, 0.1)]
    assert losses[0] > losses[1] > losses[2]
    losses = [float(O.info_nce(z, z, t).mean()) for t in (1.0, 0.5, 0.1)]
    assert losses[0] > losses[1] > losses[2]


@pytest.mark.parametrize("name", sorted(CASES))
def test_jit_equals_eager_finite_grads_and_vmap(name):
    case = CASES[name]
    args = case.args(np.random.default_rng(5))
    float_idx = [i for i, a in enumerate(args) if np.issubdtype(np.asarray(a).dtype, np.floating)]

    def scalar(*xs):
        return jnp.mean(case.fn(*xs))

    eager = case.fn(*args)
    chex.assert_trees_all_close(jax.jit(case.fn)(*args), eager, rtol=1e-5, atol=1e-6)
    grads = jax.grad(scalar, argnums=tuple(float_idx))(*args)
    chex.assert_tree_all_finite(grads)
    stacked = tuple(np.stack([a, a]) for a in args)
    chex.assert_trees_all_close(jax.vmap(case.fn)(*stacked), jnp.stack([eager, eager]),
                                rtol=1e-5, atol=1e-6)


def test_barlow_twins_standardises_like_batchnorm_not_unbiased_std():
    # Batch 64 of well-aligned views (a trained model's): BatchNorm's biased variance and eps give a
    # loss more than 1% away from the unbiased-std standardisation lightly < 1.5 used.
    noise = np.random.default_rng(3).normal(size=(2, 64, 32))
    z1, z2 = _f32(noise[0], noise[0] + 0.1 * noise[1])
    ours = float(O.barlow_twins(z1, z2, 5e-3))
    np.testing.assert_allclose(ours, R.official_barlow_twins(z1, z2, 5e-3), rtol=1e-5)
    unbiased = [(z - z.mean(0)) / z.std(0, ddof=1) for z in np.asarray([z1, z2], np.float64)]
    c = unbiased[0].T @ unbiased[1] / 64
    old = ((np.diag(c) - 1) ** 2).sum() + 5e-3 * (c[~np.eye(32, dtype=bool)] ** 2).sum()
    assert abs(ours - old) / old > 0.01


def test_matryoshka_2d_matches_reference():
    rng = np.random.default_rng(6)
    layers = [tuple(_f32(*rng.normal(size=(2, B, D)))) for _ in range(3)]
    kw = dict(last_layer_weight=1.0, prior_layers_weight=0.7, kl_div_weight=0.5, kl_temperature=0.3)
    ours = O.matryoshka_2d(lambda x, y: O.info_nce(x, y, 0.1), (2, 8), (1.0, 0.5), **kw)(layers)
    ref = R.st_matryoshka_2d(lambda x, y: R.st_multiple_negatives_ranking(x, y, None, 10.0),
                             layers, (2, 8), (1.0, 0.5), **kw)
    np.testing.assert_allclose(_reduce("info_nce", ours), ref, rtol=1e-5)
    # With one layer it is plain Matryoshka.
    one = O.matryoshka_2d(O.info_nce, (2, 8))([layers[0]])
    np.testing.assert_allclose(one, O.matryoshka(O.info_nce, (2, 8))(*layers[0]), rtol=1e-6)


def test_errors_quote_shapes():
    with pytest.raises(ValueError, match=r"\(4, 3\) and \(4, 2\)"):
        O.nt_xent(jnp.zeros((4, 3)), jnp.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"z \[B, V, D\].*\(4, 3\)"):
        O.supcon(jnp.zeros((4, 3)), jnp.zeros(4, int))
    with pytest.raises(ValueError, match="exceed the embedding width 4"):
        O.matryoshka(O.info_nce, (2, 8))(jnp.zeros((3, 4)), jnp.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"kernel \(5, 2\)"):
        O.bct_influence(jnp.zeros((3, 4)), {"kernel": jnp.zeros((5, 2))}, jnp.zeros(3, int))


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n].coupled) + ["nt_xent"])
def test_sharded_batch_equals_single_device(name):
    """Batch-coupled losses on the global batch sharded over 8 devices: same loss and gradients."""
    case = CASES[name]
    args = case.args(np.random.default_rng(7))
    idx = _batch_args(case)
    mesh = Mesh(np.asarray(jax.devices()[:8]), ("data",))
    shardings = tuple(NamedSharding(mesh, P("data") if (idx is None or i in idx) else P())
                      for i in range(len(args)))
    float_idx = tuple(i for i, a in enumerate(args) if np.issubdtype(np.asarray(a).dtype,
                                                                      np.floating))

    def value_and_grads(*xs):
        return jax.value_and_grad(lambda *ys: jnp.mean(case.fn(*ys)), argnums=float_idx)(*xs)

    single = jax.jit(value_and_grads)(*args)
    sharded_args = [jax.device_put(a, s) for a, s in zip(args, shardings)]
    sharded = jax.jit(value_and_grads, in_shardings=shardings)(*sharded_args)
    assert len(sharded_args[0].sharding.device_set) == 8
    chex.assert_trees_all_close(jax.device_get(sharded), jax.device_get(single), atol=1e-5,
                                rtol=1e-5)
