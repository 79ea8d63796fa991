"""SAE maths (``repr_jax.objectives.sae``): parity with sae-lens 6.x through a committed fixture
(``tests/data/make_sae_reference.py`` writes it; CI has no torch), hand-computed small cases,
jit == eager, and the one-line errors."""

from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.objectives import sae as S

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "sae_reference.npz"
CASES = ("relu", "topk", "topk_norescale", "batchtopk", "jumprelu")
TOL = 1e-5  # max |ours - sae-lens| / max |sae-lens|, per quantity


@pytest.fixture(scope="module")
def ref():
    with np.load(FIXTURE) as f:
        return {n: f[n] for n in f.files}


def _case(ref, name):
    """(params, x, loss/encode kwargs, the case's stored arrays) of one fixture case."""
    r = {n.split("/", 1)[1]: v for n, v in ref.items() if n.startswith(name + "/")}
    params = {n[len("param_"):]: jnp.asarray(v) for n, v in r.items() if n.startswith("param_")}
    kind = name.removesuffix("_norescale")
    kw = {"activation": kind,
          "rescale_acts_by_decoder_norm": bool(r["cfg_rescale_acts_by_decoder_norm"])}
    kw.update({n[len("cfg_"):]: v.item() for n, v in r.items()
               if n.startswith("cfg_") and n != "cfg_rescale_acts_by_decoder_norm"})
    if kind in ("topk", "batchtopk"):
        kw["dead_mask"] = jnp.asarray(r["dead_mask"])
    return params, jnp.asarray(r["x"]), kw, r


def _encode_kw(kw):
    return {n: v for n, v in kw.items() if n in ("activation", "k", "bandwidth",
                                                   "rescale_acts_by_decoder_norm")}


def _rel(ours, theirs):
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return np.max(np.abs(ours - theirs)) / max(np.max(np.abs(theirs)), 1e-30)


def parity(ref, name):
    """{quantity: (max abs difference, relative difference)} of our functions vs sae-lens."""
    params, x, kw, r = _case(ref, name)
    z = S.encode(params, x, **_encode_kw(kw))
    x_hat = S.decode(params, z, rescale_acts_by_decoder_norm=kw["rescale_acts_by_decoder_norm"])
    loss_fn = lambda p: jnp.mean(S.loss(p, x, **kw)[0])
    total, grads = jax.value_and_grad(loss_fn)(params)
    _, aux = S.loss(params, x, **kw)
    pairs = {"encode": (z, r["z"]), "decode": (x_hat, r["decode"]), "loss": (total, r["loss"]),
             "mse": (aux["mse"].mean(), r["loss_mse_loss"]), "fvu": (S.fvu(x, x_hat), r["fvu"]),
             "l0": (S.l0(z), r["l0"])}
    part = {"relu": "loss_l1_loss", "jumprelu": "loss_l0_loss"}.get(
        kw["activation"], "loss_auxiliary_reconstruction_loss")
    pairs[part[len("loss_"):]] = (aux["auxk"].mean() + aux["sparsity"].mean(), r[part])
    pairs.update({f"grad_{n}": (g, r[f"grad_{n}"]) for n, g in grads.items()})
    return {q: (float(np.max(np.abs(np.asarray(a, np.float64) - b))), float(_rel(a, b)))
            for q, (a, b) in pairs.items()}


# ----------------------------------------------------------------------------- sae-lens parity
def test_fixture_versions(ref):
    assert str(ref["versions"]).startswith("sae-lens 6.")


@pytest.mark.parametrize("name", CASES)
def test_parity_with_sae_lens(ref, name):
    worst = {q: rel for q, (_, rel) in parity(ref, name).items() if rel > TOL}
    assert not worst, f"{name}: relative differences above {TOL}: {worst}"


def test_fixture_exercises_the_estimators(ref):
    """The JumpReLU case has pre-activations inside the STE window (nonzero threshold gradient),
    the AuxK cases have dead latents below and above k_aux = D // 2."""
    assert np.count_nonzero(ref["jumprelu/grad_threshold"]) > 0
    assert ref["topk/dead_mask"].sum() < 16 // 2 < ref["batchtopk/dead_mask"].sum()
    assert ref["topk/loss_auxiliary_reconstruction_loss"] > 0


@pytest.mark.parametrize("name", ["relu", "jumprelu"])
def test_fold_matches_sae_lens(ref, name):
    params, _, _, r = _case(ref, name)
    folded = S.normalize_decoder(params, fold_into_encoder=True)
    for n, v in folded.items():
        assert _rel(v, r[f"folded_{n}"]) < TOL, n


def test_scaling_factor_matches_sae_lens(ref):
    x = jnp.asarray(ref["relu/x"])
    assert _rel(S.scaling_factor(x), ref["relu/scaling_factor"]) < TOL


def test_batchtopk_threshold_update_matches_sae_lens(ref):
    params, x, kw, _ = _case(ref, "batchtopk")
    z = S.encode(params, x, **_encode_kw(kw))
    got = S.update_batchtopk_threshold(jnp.float32(0.1), z, lr=0.01)
    assert _rel(got, ref["batchtopk/topk_threshold_after"]) < TOL


# ----------------------------------------------------------------------------- hand-computed
def _identity_params(n, w_dec_scale=None, threshold=None):
    p = {"W_enc": jnp.eye(n), "b_enc": jnp.zeros(n), "W_dec": jnp.eye(n), "b_dec": jnp.zeros(n)}
    if w_dec_scale is not None:
        p["W_dec"] = jnp.diag(jnp.asarray(w_dec_scale, jnp.float32))
    if threshold is not None:
        p["threshold"] = jnp.asarray(threshold, jnp.float32)
    return p


def test_topk_keeps_the_k_largest_then_relus():
    p = _identity_params(4)
    z = S.encode(p, jnp.array([[3.0, -1.0, 2.0, 0.5]]), activation="topk", k=2)
    np.testing.assert_allclose(z, [[3.0, 0.0, 2.0, 0.0]])
    # the two largest are negative: kept, then ReLU'd to zero
    z = S.encode(p, jnp.array([[-1.0, -2.0, -3.0, -4.0]]), activation="topk", k=2)
    np.testing.assert_allclose(z, np.zeros((1, 4)))


def test_topk_uses_unit_norm_decoder_by_default():
    """sae-lens's TopKTrainingSAE ranks pre * ||W_dec_i|| and decodes z / ||W_dec_i||."""
    p = _identity_params(2, w_dec_scale=[1.0, 3.0])
    x = jnp.array([[2.0, 1.0]])
    np.testing.assert_allclose(S.encode(p, x, activation="topk", k=1), [[0.0, 3.0]])
    np.testing.assert_allclose(S.encode(p, x, activation="topk", k=1,
                                        rescale_acts_by_decoder_norm=False), [[2.0, 0.0]])
    _, aux = S.loss(p, x, activation="topk", k=1)
    np.testing.assert_allclose(aux["mse"], [2.0 ** 2 + (1.0 - 3.0) ** 2])  # x_hat = (0, 3)


def test_batchtopk_is_batch_coupled_and_breaks_ties_by_index():
    p = _identity_params(4)
    # k = 1 per row on average -> the 2 largest of the whole batch, both in row 0
    z = S.encode(p, jnp.array([[5.0, 4.0, 3.0, 0.0], [1.0, 0.0, 0.0, 0.0]]),
                 activation="batchtopk", k=1)
    np.testing.assert_allclose(z, [[5.0, 4.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    # three tied 3s for two places: the lower row-major indices win
    z = S.encode(p, jnp.array([[3.0, 1.0, 0.0, 0.0], [3.0, 3.0, 0.0, 0.0]]),
                 activation="batchtopk", k=1)
    np.testing.assert_allclose(z, [[3.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]])


def test_jumprelu_straight_through_gradients():
    pre = jnp.array([[1.1], [0.5], [1.3]])
    thr, bw = jnp.array([1.0]), 0.5
    # (pre - thr) / bw = 0.2, -1.0, 0.6: only the first is inside the window (-1/2, 1/2)
    np.testing.assert_allclose(S.jumprelu(pre, thr, bw), [[1.1], [0.0], [1.3]], rtol=1e-6)
    g_pre, g_thr = jax.grad(lambda a, t: S.jumprelu(a, t, bw).sum(), argnums=(0, 1))(pre, thr)
    np.testing.assert_allclose(g_pre, [[1.0], [0.0], [1.0]])
    np.testing.assert_allclose(g_thr, [-thr[0] / bw])                    # -(theta / bw) * 1
    g_pre, g_thr = jax.grad(lambda a, t: S.heaviside_step(a, t, bw).sum(), argnums=(0, 1))(pre,
                                                                                          thr)
    np.testing.assert_allclose(g_pre, np.zeros((3, 1)))
    np.testing.assert_allclose(g_thr, [-1.0 / bw])


def test_jumprelu_loss_threshold_gradient_by_hand():
    # D = L = 1, W_enc = 1, W_dec = 2, threshold 1, bandwidth 0.5, x = 1.1: z = 1.1, x_hat = 2.2.
    # d mse / d z = 2 (x_hat - x) W_dec = 4.4; STE: d z / d theta = -theta / bw = -2;
    # d step / d theta = -1 / bw = -2. So d loss / d theta = -8.8 - 2 * l0_coefficient.
    p = _identity_params(1, w_dec_scale=[2.0], threshold=[1.0])
    grads = jax.grad(lambda q: S.loss(q, jnp.array([[1.1]]), activation="jumprelu",
                                      l0_coefficient=0.25, bandwidth=0.5)[0].sum())(p)
    np.testing.assert_allclose(grads["threshold"], [-8.8 - 0.5], rtol=1e-5)


def test_relu_l1_is_weighted_by_decoder_norms():
    p = _identity_params(2, w_dec_scale=[2.0, 1.0])
    loss, aux = S.loss(p, jnp.array([[1.0, 3.0]]), activation="relu", l1_coefficient=0.5)
    np.testing.assert_allclose(aux["sparsity"], [0.5 * (2.0 * 1.0 + 1.0 * 3.0)])
    np.testing.assert_allclose(aux["mse"], [(2.0 - 1.0) ** 2])        # x_hat = (2, 3)
    np.testing.assert_allclose(loss, aux["mse"] + aux["sparsity"])
    np.testing.assert_allclose(aux["l0"], [2.0])


def test_auxk_by_hand():
    # pre = (1, 0.5, 2); TopK k=1 keeps latent 2 -> x_hat = (2, 0), residual e = (-1, 0.5).
    # D = 2 -> k_aux = 1; latents 0 and 1 dead (scale min(2 / 1, 1) = 1): the larger dead
    # pre-activation is latent 0's (1) -> e_hat = (1, 0); ||e_hat - e||^2 = 4.25, times 0.5.
    p = {"W_enc": jnp.array([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]]), "b_enc": jnp.zeros(3),
         "W_dec": jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]), "b_dec": jnp.zeros(2)}
    x = jnp.array([[1.0, 0.5]])
    dead = jnp.array([True, True, False])
    _, aux = S.loss(p, x, activation="topk", k=1, dead_mask=dead, aux_k_coefficient=0.5)
    np.testing.assert_allclose(aux["mse"], [1.0 + 0.25])
    np.testing.assert_allclose(aux["auxk"], [0.5 * 4.25])
    _, aux = S.loss(p, x, activation="topk", k=1, dead_mask=jnp.zeros(3, bool))
    np.testing.assert_allclose(aux["auxk"], [0.0])


def test_fvu_of_perfect_and_mean_reconstructions():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)), jnp.float32)
    assert float(S.fvu(x, x)) == 0.0
    np.testing.assert_allclose(S.fvu(x, jnp.broadcast_to(x.mean(0, keepdims=True), x.shape)),
                               1.0, rtol=1e-6)


def test_scaling_factor_by_hand():
    # norms 3 and 5 (D = 4): sqrt(4) / 4
    x = jnp.array([[3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 5.0]])
    np.testing.assert_allclose(S.scaling_factor(x), 0.5)


def test_threshold_update_without_firing_is_unchanged():
    assert float(S.update_batchtopk_threshold(jnp.float32(0.3), jnp.zeros((2, 3)))) == \
        pytest.approx(0.3)


# ----------------------------------------------------------------------------- init and decoder
@pytest.mark.parametrize("activation", S.ACTIVATIONS)
def test_init_like_sae_lens(activation):
    mean = jnp.arange(16.0)
    p = S.init_sae(jax.random.PRNGKey(0), 16, 64, activation=activation, b_dec=mean)
    chex.assert_shape([p["W_enc"], p["b_enc"], p["W_dec"], p["b_dec"]],
                      [(16, 64), (64,), (64, 16), (16,)])
    np.testing.assert_array_equal(p["W_enc"], p["W_dec"].T)
    np.testing.assert_allclose(S.decoder_norms(p), 0.1, rtol=1e-6)
    np.testing.assert_array_equal(p["b_dec"], mean)
    assert ("threshold" in p) == (activation == "jumprelu")
    unit = S.normalize_decoder(p)
    np.testing.assert_allclose(S.decoder_norms(unit), 1.0, rtol=1e-6)


@pytest.mark.parametrize("name", ["relu", "topk", "jumprelu"])
def test_folding_the_decoder_norm_keeps_the_function(ref, name):
    params, x, kw, _ = _case(ref, name)
    rescale = kw["rescale_acts_by_decoder_norm"]
    run = lambda p: S.decode(p, S.encode(p, x, **_encode_kw(kw)),
                             rescale_acts_by_decoder_norm=rescale)
    folded = S.normalize_decoder(params, fold_into_encoder=True)
    np.testing.assert_allclose(S.decoder_norms(folded), 1.0, rtol=1e-6)
    np.testing.assert_allclose(run(folded), run(params), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- invariances, jit
@pytest.mark.parametrize("name", ["relu", "topk", "jumprelu", "batchtopk"])
def test_batch_permutation(ref, name):
    params, x, kw, _ = _case(ref, name)
    perm = np.random.default_rng(1).permutation(x.shape[0])
    loss, _ = S.loss(params, x, **kw)
    loss_p, _ = S.loss(params, x[perm], **kw)
    np.testing.assert_allclose(loss_p, loss[perm], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", CASES)
def test_jit_matches_eager(ref, name):
    params, x, kw, _ = _case(ref, name)
    dead = kw.pop("dead_mask", None)
    fn = lambda p, xx, d: S.loss(p, xx, dead_mask=d, **kw)
    grad_fn = jax.grad(lambda p, xx, d: fn(p, xx, d)[0].mean())
    eager = fn(params, x, dead), grad_fn(params, x, dead)
    jitted = jax.jit(fn)(params, x, dead), jax.jit(grad_fn)(params, x, dead)
    chex.assert_trees_all_close(jitted, eager, rtol=1e-5, atol=1e-6)
    chex.assert_tree_all_finite(eager)
    chex.assert_trees_all_equal_structs(eager[0][1], S.loss(params, x, activation="relu")[1])


# ----------------------------------------------------------------------------- errors
def test_errors_are_one_line_and_quote_shapes(ref):
    params, x, _, _ = _case(ref, "topk")
    with pytest.raises(ValueError, match=r"0 < k < latents; got k=64, latents=64"):
        S.encode(params, x, activation="topk", k=64)
    with pytest.raises(ValueError, match=r"0 < k < latents; got k=None"):
        S.loss(params, x, activation="batchtopk")
    with pytest.raises(ValueError, match=r"latents > 0; got d_in=16, latents=0"):
        S.init_sae(jax.random.PRNGKey(0), 16, 0, activation="relu")
    with pytest.raises(ValueError, match=r"got x \(32, 8\), W_enc \(16, 64\)"):
        S.encode(params, x[:, :8], activation="relu")
    with pytest.raises(ValueError, match=r"valid: relu, topk, batchtopk, jumprelu"):
        S.encode(params, x, activation="gelu")
    with pytest.raises(ValueError, match=r"dead_mask must be \[L\]=\(64,\); got \(3,\)"):
        S.loss(params, x, activation="topk", k=4, dead_mask=jnp.zeros(3, bool))
    with pytest.raises(ValueError, match=r"jumprelu needs params\['threshold'\]"):
        S.encode(params, x, activation="jumprelu")
    with pytest.raises(ValueError, match="TopK option"):
        S.encode(params, x, activation="relu", rescale_acts_by_decoder_norm=True)
