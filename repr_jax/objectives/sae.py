"""Sparse autoencoders (SAEs) as pure array functions: init, encode, decode and training losses.

Parameters are a dict pytree ``{"W_enc": [D, L], "b_enc": [L], "W_dec": [L, D], "b_dec": [D]}``
plus ``"threshold": [L]`` for JumpReLU. ``D`` is the input width, ``L`` the number of latents.
Four activations, each transcribed from sae-lens 6.x's training classes (``StandardTrainingSAE``,
``TopKTrainingSAE``, ``BatchTopKTrainingSAE``, ``JumpReLUTrainingSAE``; checked against sae-lens
6.54.12 by ``tests/objectives/test_sae.py``):

* ``"relu"``: ``z = relu(pre)``; penalty ``l1_coefficient * sum_i z_i ||W_dec_i||`` (Anthropic's
  April 2024 update; sae-lens ``lp_norm=1``).
* ``"topk"``: the ``k`` largest pre-activations of each row, ReLU on the kept values; AuxK loss on
  the dead latents (Gao et al. 2024).
* ``"batchtopk"``: ReLU, then the ``int(k * B)`` largest values of the whole batch (Bussmann et al.
  2024); AuxK loss as TopK. Batch-coupled: its ``encode`` and ``loss`` take the global batch.
* ``"jumprelu"``: ``z = pre * (pre > threshold)``, L0 penalty through the rectangle-kernel
  straight-through estimator of Rajamanoharan et al. 2024 (Gemma Scope; sae-lens
  ``jumprelu_sparsity_loss_mode="step"``, ``jumprelu_ste_to_input=False``).

Conventions shared with sae-lens: the encoder sees ``x - b_dec`` (``apply_b_dec_to_input=True``, its
default); the MSE sums over ``D`` (mean over the batch in sae-lens, per example here); the TopK
kinds by default measure pre-activations and decode latents as if the decoder rows had unit norm
(``rescale_acts_by_decoder_norm=True``, sae-lens's training default).

Reduction: ``loss`` returns per-example losses ``[B]``; their mean is sae-lens's scalar training
loss.

``k`` may be traced (a population's members, each with its own ``k``, in one compiled step) when a
static ``k_max >= k`` sizes the selection: ``lax.top_k`` takes the ``k_max`` largest and the ranks
from ``k`` on are zeroed, which keeps exactly the ``k`` largest (the same entries, ties included,
since ``top_k``'s order is the same at every size).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

ACTIVATIONS = ("relu", "topk", "batchtopk", "jumprelu")
_TOPK_KINDS = ("topk", "batchtopk")


# ----------------------------------------------------------------------------- checks
def _check_activation(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown SAE activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")


def _check_k(activation: str, k, latents: int, k_max: int | None = None) -> None:
    if activation not in _TOPK_KINDS:
        return
    if k_max is not None:  # k may be traced: its static bound is what is checked
        if not 0 < k_max < latents:
            raise ValueError(f"{activation} needs 0 < k_max < latents; got k_max={k_max}, "
                             f"latents={latents}")
        if isinstance(k, (int, float)) and not 0 < k <= k_max:
            raise ValueError(f"{activation} needs 0 < k <= k_max; got k={k}, k_max={k_max}")
        return
    if isinstance(k, jax.core.Tracer):
        raise ValueError(f"{activation}: a traced k needs a static bound k_max (lax.top_k's size)")
    if k is None or not 0 < k < latents:
        raise ValueError(f"{activation} needs 0 < k < latents; got k={k}, latents={latents}")


def _check_x(params: dict, x_BxD: jax.Array) -> None:
    w_shape = params["W_enc"].shape
    if "threshold" in params and params["threshold"].shape != (w_shape[1],):
        raise ValueError(f"SAE threshold must be [L]=({w_shape[1]},); got "
                         f"{params['threshold'].shape}")
    if x_BxD.ndim != 2 or x_BxD.shape[1] != w_shape[0]:
        raise ValueError(f"SAE expects x [B, D] with D = W_enc rows; got x {x_BxD.shape}, "
                         f"W_enc {w_shape}")


def _rescale_default(activation: str, rescale: bool | None) -> bool:
    if rescale is None:
        return activation in _TOPK_KINDS
    if rescale and activation not in _TOPK_KINDS:
        raise ValueError(f"rescale_acts_by_decoder_norm is a TopK option (sae-lens has it only for "
                         f"{_TOPK_KINDS}); got activation={activation!r}")
    return rescale


# ----------------------------------------------------------------------------- parameters
def init_sae(key: jax.Array, d_in: int, latents: int, *, activation: str,
             b_dec: jax.Array | None = None, decoder_init_norm: float | None = 0.1,
             jumprelu_init_threshold: float = 0.01) -> dict:
    """sae-lens's ``TrainingSAE.initialize_weights``: tied, small-norm decoder. O(D·L).

    Args:
      key: PRNG key.
      d_in: input width ``D``.
      latents: number of latents ``L``.
      activation: one of ``ACTIVATIONS`` (JumpReLU adds ``threshold [L]``).
      b_dec: optional ``[D]`` decoder bias, e.g. the data mean; zeros otherwise (sae-lens 6.x).
      decoder_init_norm: every row of ``W_dec`` gets this norm (sae-lens's default 0.1, Anthropic's
        April 2024 "heuristic" init); ``None`` keeps the Kaiming-uniform rows.
      jumprelu_init_threshold: the JumpReLU threshold's initial value.

    ``W_dec [L, D]`` is Kaiming-uniform (``U(-sqrt(6/D), sqrt(6/D))``, torch's
    ``kaiming_uniform_``), rows rescaled to ``decoder_init_norm``; ``W_enc = W_dec.T``;
    ``b_enc = 0``.
    """
    _check_activation(activation)
    if d_in <= 0 or latents <= 0:
        raise ValueError(f"init_sae needs d_in > 0 and latents > 0; got d_in={d_in}, "
                         f"latents={latents}")
    bound = math.sqrt(6.0 / d_in)
    w_dec_LxD = jax.random.uniform(key, (latents, d_in), jnp.float32, -bound, bound)
    if decoder_init_norm is not None:
        w_dec_LxD = decoder_init_norm * w_dec_LxD / jnp.linalg.norm(w_dec_LxD, axis=1,
                                                                    keepdims=True)
    if b_dec is None:
        b_dec_D = jnp.zeros((d_in,), jnp.float32)
    else:
        b_dec_D = jnp.asarray(b_dec, jnp.float32)
        if b_dec_D.shape != (d_in,):
            raise ValueError(f"init_sae: b_dec must be [D]=({d_in},); got {b_dec_D.shape}")
    params = {"W_enc": w_dec_LxD.T, "b_enc": jnp.zeros((latents,), jnp.float32),
              "W_dec": w_dec_LxD, "b_dec": b_dec_D}
    if activation == "jumprelu":
        params["threshold"] = jnp.full((latents,), jumprelu_init_threshold, jnp.float32)
    return params


def decoder_norms(params: dict) -> jax.Array:
    """``||W_dec_i||`` for every latent, ``[L]``. O(L·D)."""
    return jnp.linalg.norm(params["W_dec"], axis=1)


def normalize_decoder(params: dict, *, fold_into_encoder: bool = False) -> dict:
    """Unit-norm decoder rows; call after each optimiser step to keep them so. O(L·D).

    With ``fold_into_encoder`` the norms move into ``W_enc``'s columns, ``b_enc`` and ``threshold``
    (sae-lens's ``fold_W_dec_norm``), so ReLU and JumpReLU SAEs, and TopK kinds under
    ``rescale_acts_by_decoder_norm``, compute the same function before and after. Without it only
    ``W_dec`` changes (OpenAI's ``sparse_autoencoder`` habit). sae-lens 6.x itself never
    renormalises during training; it weights the L1 penalty by the norms (ReLU) or divides them
    out (TopK).
    """
    n_L = jnp.maximum(decoder_norms(params), 1e-8)
    out = dict(params, W_dec=params["W_dec"] / n_L[:, None])
    if fold_into_encoder:
        out["W_enc"] = params["W_enc"] * n_L[None, :]
        out["b_enc"] = params["b_enc"] * n_L
        if "threshold" in params:
            out["threshold"] = params["threshold"] * n_L
    return out


def scaling_factor(x_BxD: jax.Array) -> jax.Array:
    """sae-lens's input scale ``sqrt(D) / mean_b ||x_b||`` (``normalize_activations=
    "expected_average_only_in"``; Anthropic April 2024: ``E||x|| = sqrt(D)`` after scaling). Scalar.

    Multiply inputs by it during training. Note it is the mean *norm*, not the root mean squared
    norm ``sqrt(D / mean ||x||^2)``; the two agree only when all norms are equal. O(B·D).
    """
    if x_BxD.ndim != 2:
        raise ValueError(f"scaling_factor expects x [B, D]; got {x_BxD.shape}")
    x_BxD = x_BxD.astype(jnp.float32)
    return jnp.sqrt(x_BxD.shape[1]) / jnp.mean(jnp.linalg.norm(x_BxD, axis=1))


# ----------------------------------------------------------------------------- JumpReLU and its STE
def _rectangle(u):
    return ((u > -0.5) & (u < 0.5)).astype(u.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def jumprelu(pre_BxL: jax.Array, threshold_L: jax.Array, bandwidth: float) -> jax.Array:
    """``pre * (pre > threshold)`` with sae-lens's (Gemma Scope's) pseudo-derivative. ``[B, L]``.

    Backward: ``d/dpre = (pre > threshold)``; ``d/dthreshold = -(threshold / bandwidth) *
    rect((pre - threshold) / bandwidth)`` summed over the batch, ``rect(u) = 1[-1/2 < u < 1/2]``.
    """
    return pre_BxL * (pre_BxL > threshold_L[None, :]).astype(pre_BxL.dtype)


def _jumprelu_fwd(pre_BxL, threshold_L, bandwidth):
    return jumprelu(pre_BxL, threshold_L, bandwidth), (pre_BxL, threshold_L)


def _jumprelu_bwd(bandwidth, res, g_BxL):
    pre_BxL, threshold_L = res
    thr_1xL = threshold_L[None, :]
    ste_BxL = (thr_1xL / bandwidth) * _rectangle((pre_BxL - thr_1xL) / bandwidth) * g_BxL
    return (pre_BxL > thr_1xL).astype(g_BxL.dtype) * g_BxL, -jnp.sum(ste_BxL, axis=0)


jumprelu.defvjp(_jumprelu_fwd, _jumprelu_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def heaviside_step(pre_BxL: jax.Array, threshold_L: jax.Array, bandwidth: float) -> jax.Array:
    """``1[pre > threshold]`` with the STE: no gradient to ``pre``; ``d/dthreshold = -(1 /
    bandwidth) * rect((pre - threshold) / bandwidth)`` summed over the batch. ``[B, L]``."""
    return (pre_BxL > threshold_L[None, :]).astype(pre_BxL.dtype)


def _step_fwd(pre_BxL, threshold_L, bandwidth):
    return heaviside_step(pre_BxL, threshold_L, bandwidth), (pre_BxL, threshold_L)


def _step_bwd(bandwidth, res, g_BxL):
    pre_BxL, threshold_L = res
    ste_BxL = (1.0 / bandwidth) * _rectangle((pre_BxL - threshold_L[None, :]) / bandwidth) * g_BxL
    return jnp.zeros_like(pre_BxL), -jnp.sum(ste_BxL, axis=0)


heaviside_step.defvjp(_step_fwd, _step_bwd)


# ----------------------------------------------------------------------------- encode / decode
def _scatter_rows(vals_BxK, idx_BxK, shape):
    rows_Bx1 = jnp.arange(shape[0])[:, None]
    return jnp.zeros(shape, vals_BxK.dtype).at[rows_Bx1, idx_BxK].set(vals_BxK)


def topk_activation(pre_BxL: jax.Array, k, *, k_max: int | None = None) -> jax.Array:
    """Keep each row's ``k`` largest entries, ReLU them, zero the rest (sae-lens ``TopK``).
    ``[B, L]``.

    Ties go to the lower index (``lax.top_k``). ``k_max``: a static bound on ``k``, which may then
    be traced (the ``k_max`` largest, ranks ``>= k`` zeroed). O(B·L·log k_max).

    >>> import jax.numpy as jnp
    >>> pre = jnp.array([[3.0, -1.0, 2.0, 0.5], [-1.0, -2.0, -3.0, -4.0]])
    >>> topk_activation(pre, 2).tolist()
    [[3.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    >>> topk_activation(pre, jnp.asarray(2), k_max=3).tolist()
    [[3.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    """
    vals_BxK, idx_BxK = topk_rows(pre_BxL, k, k_max=k_max)
    return _scatter_rows(vals_BxK, idx_BxK, pre_BxL.shape)


def topk_rows(pre_BxL: jax.Array, k, *, k_max: int | None = None
              ) -> tuple[jax.Array, jax.Array]:
    """:func:`topk_activation` as ``(values [B, K], latent indices [B, K])`` (``K = k_max or
    k``; values ReLU'd, ranks ``>= k`` zero): what :func:`decode_rows` reads. O(B·L·log K)."""
    vals_BxK, idx_BxK = jax.lax.top_k(pre_BxL, k if k_max is None else k_max)
    if k_max is not None:
        vals_BxK = jnp.where(jnp.arange(k_max)[None, :] < k, vals_BxK, 0.0)
    return jax.nn.relu(vals_BxK), idx_BxK


def batchtopk_activation(pre_BxL: jax.Array, k, *, k_max: float | None = None) -> jax.Array:
    """ReLU, then keep the ``int(k * B)`` largest values of the whole batch (sae-lens
    ``BatchTopK``).

    ``k`` is the mean number of active latents per row. Ties go to the lower row-major index.
    ``k_max``: a static bound on ``k``, which may then be traced (the ``int(k_max * B)`` largest,
    ranks ``>= floor(k * B)`` zeroed). ``[B, L]``; O(B·L·log(k_max·B)).
    """
    acts_N = jax.nn.relu(pre_BxL).reshape(-1)
    batch = pre_BxL.shape[0]
    vals_N, idx_N = jax.lax.top_k(acts_N, int((k if k_max is None else k_max) * batch))
    if k_max is not None:
        vals_N = jnp.where(jnp.arange(vals_N.shape[0]) < jnp.floor(k * batch), vals_N, 0.0)
    return jnp.zeros_like(acts_N).at[idx_N].set(vals_N).reshape(pre_BxL.shape)


def pre_activations(params: dict, x_BxD: jax.Array, *,
                    rescale_acts_by_decoder_norm: bool = False) -> jax.Array:
    """``(x - b_dec) @ W_enc + b_enc``, times ``||W_dec_i||`` when rescaling. ``[B, L]``;
    O(B·D·L)."""
    _check_x(params, x_BxD)
    x_BxD = x_BxD.astype(jnp.float32)
    pre_BxL = (x_BxD - params["b_dec"][None, :]) @ params["W_enc"] + params["b_enc"][None, :]
    if rescale_acts_by_decoder_norm:
        pre_BxL = pre_BxL * decoder_norms(params)[None, :]
    return pre_BxL


def _activate(params, pre_BxL, activation, k, bandwidth, k_max=None):
    if activation == "jumprelu" and "threshold" not in params:
        raise ValueError(f"jumprelu needs params['threshold'] [L]; params have {sorted(params)}")
    if activation == "relu":
        return jax.nn.relu(pre_BxL)
    if activation == "topk":
        return topk_activation(pre_BxL, k, k_max=k_max)
    if activation == "batchtopk":
        return batchtopk_activation(pre_BxL, k, k_max=k_max)
    return jumprelu(pre_BxL, params["threshold"], bandwidth)


def encode(params: dict, x_BxD: jax.Array, *, activation: str, k: float | None = None,
           bandwidth: float = 0.05, rescale_acts_by_decoder_norm: bool | None = None,
           k_max: float | None = None) -> jax.Array:
    """Latent activations ``z`` ``[B, L]`` of inputs ``x [B, D]``. O(B·D·L).

    Args:
      params: SAE parameters (see the module docstring).
      x_BxD: inputs; the encoder sees ``x - b_dec``.
      activation: one of ``ACTIVATIONS``.
      k: latents per row (``topk``, an int) or on average per row (``batchtopk``); ``0 < k < L``.
      bandwidth: JumpReLU's STE kernel width (sae-lens default 0.05); forward value unaffected.
      rescale_acts_by_decoder_norm: TopK kinds only; ``None`` means sae-lens's training default
        (``True`` for ``topk``/``batchtopk``). Irrelevant for unit-norm decoder rows.
      k_max: TopK kinds: a static bound on ``k``, which may then be traced (module docstring).

    ``batchtopk`` couples the rows (pass the global batch); its inference form is JumpReLU with one
    threshold for all latents (see ``update_batchtopk_threshold``). JumpReLU expects
    ``threshold >= 0`` (sae-lens clamps it before every step); then ``pre * (pre > threshold)``
    equals its inference ``relu(pre) * (pre > threshold)``.
    """
    _check_activation(activation)
    _check_k(activation, k, params["W_enc"].shape[1], k_max)
    rescale = _rescale_default(activation, rescale_acts_by_decoder_norm)
    pre_BxL = pre_activations(params, x_BxD, rescale_acts_by_decoder_norm=rescale)
    return _activate(params, pre_BxL, activation, k, bandwidth, k_max)


def decode(params: dict, z_BxL: jax.Array, *,
           rescale_acts_by_decoder_norm: bool = False) -> jax.Array:
    """``z @ W_dec + b_dec`` ``[B, D]``; with rescaling ``(z / ||W_dec_i||) @ W_dec + b_dec``
    (pass the same flag as ``encode``: ``True`` for TopK kinds trained the sae-lens way).
    O(B·L·D)."""
    if z_BxL.ndim != 2 or z_BxL.shape[1] != params["W_dec"].shape[0]:
        raise ValueError(f"decode expects z [B, L] with L = W_dec rows; got z {z_BxL.shape}, "
                         f"W_dec {params['W_dec'].shape}")
    if rescale_acts_by_decoder_norm:
        z_BxL = z_BxL / decoder_norms(params)[None, :]
    return z_BxL @ params["W_dec"] + params["b_dec"][None, :]


def decode_rows(params: dict, vals_BxK: jax.Array, idx_BxK: jax.Array, *,
                rescale_acts_by_decoder_norm: bool = False) -> jax.Array:
    """:func:`decode` of latents given as each row's ``K`` values and indices (TopK's): the
    ``K`` decoder rows gathered, ``[B, D]``. Time and memory O(B·K·D) instead of O(B·L·D), and
    so is the gradient (a scatter into ``K`` rows of ``W_dec`` per example, not a dense
    ``[L, D]`` product): the decoder's share of a TopK step, ``L / K`` times less work."""
    if rescale_acts_by_decoder_norm:
        vals_BxK = vals_BxK / decoder_norms(params)[idx_BxK]
    rows_BxKxD = params["W_dec"][idx_BxK]
    return jnp.einsum("bk,bkd->bd", vals_BxK, rows_BxKxD) + params["b_dec"][None, :]


# ----------------------------------------------------------------------------- losses
def auxk_loss(params: dict, x_BxD: jax.Array, x_hat_BxD: jax.Array, pre_BxL: jax.Array,
              dead_mask_L: jax.Array, *, aux_k: int | None = None, coefficient: float = 1.0,
              rescale_acts_by_decoder_norm: bool = True) -> jax.Array:
    """AuxK loss of Gao et al. 2024 as sae-lens's ``calculate_topk_aux_loss``. Per-example ``[B]``.

    The ``k_aux = aux_k`` (default ``D // 2``) largest pre-activations among the dead latents
    (``dead_mask_L`` true), not ReLU'd, are decoded without ``b_dec`` and fitted to the residual
    ``stop_gradient(x - x_hat)``: ``coefficient * min(n_dead / k_aux, 1) * ||e_hat - e||^2``. With
    fewer dead latents than ``k_aux`` all of them are used; none dead gives 0.
    O(B·L·(log k_aux + D)).
    """
    latents = pre_BxL.shape[1]
    if dead_mask_L.shape != (latents,):
        raise ValueError(f"auxk_loss: dead_mask must be [L]=({latents},); got {dead_mask_L.shape}")
    k_aux = x_BxD.shape[1] // 2 if aux_k is None else aux_k
    if k_aux <= 0:
        raise ValueError(f"auxk_loss needs aux_k > 0; got {k_aux} (x {x_BxD.shape})")
    dead_L = dead_mask_L.astype(bool)
    scale = jnp.minimum(jnp.sum(dead_L) / k_aux, 1.0)
    masked_BxL = jnp.where(dead_L[None, :], pre_BxL, -jnp.inf)
    vals_BxK, idx_BxK = jax.lax.top_k(masked_BxL, min(k_aux, latents))
    vals_BxK = jnp.where(jnp.isfinite(vals_BxK), vals_BxK, 0.0)  # live picks when n_dead < k_aux
    acts_BxL = _scatter_rows(vals_BxK, idx_BxK, pre_BxL.shape)
    if rescale_acts_by_decoder_norm:
        acts_BxL = acts_BxL / decoder_norms(params)[None, :]
    e_hat_BxD = acts_BxL @ params["W_dec"]
    e_BxD = jax.lax.stop_gradient(x_BxD.astype(jnp.float32) - x_hat_BxD)
    return coefficient * scale * jnp.sum((e_hat_BxD - e_BxD) ** 2, axis=1)


def loss(params: dict, x_BxD: jax.Array, *, activation: str, k: float | None = None,
         l1_coefficient: float = 1.0, l0_coefficient: float = 1.0, bandwidth: float = 0.05,
         aux_k: int | None = None, aux_k_coefficient: float = 1.0,
         dead_mask: jax.Array | None = None,
         rescale_acts_by_decoder_norm: bool | None = None,
         k_max: float | None = None) -> tuple[jax.Array, dict]:
    """sae-lens 6.x's training loss, per example ``[B]`` (its scalar is the batch mean). O(B·D·L).

    Args:
      params: SAE parameters.
      x_BxD: inputs (already multiplied by ``scaling_factor`` if you normalise them).
      activation: one of ``ACTIVATIONS``.
      k: see ``encode``.
      l1_coefficient: ``relu`` only: weight of ``sum_i z_i ||W_dec_i||``.
      l0_coefficient: ``jumprelu`` only: weight of ``sum_i 1[pre_i > threshold_i]`` (STE gradient).
      bandwidth: JumpReLU's STE kernel width.
      aux_k: TopK kinds: dead latents used by AuxK (default ``D // 2``, Gao et al.'s heuristic).
      aux_k_coefficient: TopK kinds: AuxK weight (sae-lens default 1; Gao et al. use 1/32).
      dead_mask: TopK kinds: ``[L]`` bool, latents that have not fired for a while; ``None``: no
        AuxK.
      rescale_acts_by_decoder_norm: see ``encode``.
      k_max: see ``encode``.

    Returns ``(loss_B, aux)``: ``loss_B = mse + sparsity + auxk``; ``aux`` holds each part ``[B]``
    (``mse = ||x_hat - x||^2``; ``sparsity`` the weighted L1 or L0 penalty, 0 for TopK kinds;
    ``auxk``, 0 unless TopK with a ``dead_mask`` holding a dead latent: only then is it computed,
    as sae-lens skips it) and ``l0``, the count of nonzero latents, and ``z [B, L]``, the latents
    (neither with a gradient). Every kind returns the same keys. For ``batchtopk`` the per-example split follows a
    batch-wide selection: padding rows compete for the ``k * B`` places, so drop them before.
    """
    _check_activation(activation)
    _check_k(activation, k, params["W_enc"].shape[1], k_max)
    rescale = _rescale_default(activation, rescale_acts_by_decoder_norm)
    pre_BxL = pre_activations(params, x_BxD, rescale_acts_by_decoder_norm=rescale)
    if activation == "topk":  # decoded from its k rows: O(B·k·D), gradient included
        vals_BxK, idx_BxK = topk_rows(pre_BxL, k, k_max=k_max)
        z_BxL = _scatter_rows(vals_BxK, idx_BxK, pre_BxL.shape)
        x_hat_BxD = decode_rows(params, vals_BxK, idx_BxK, rescale_acts_by_decoder_norm=rescale)
    else:
        z_BxL = _activate(params, pre_BxL, activation, k, bandwidth, k_max)
        x_hat_BxD = decode(params, z_BxL, rescale_acts_by_decoder_norm=rescale)
    x_BxD = x_BxD.astype(jnp.float32)
    mse_B = jnp.sum((x_hat_BxD - x_BxD) ** 2, axis=1)
    zeros_B = jnp.zeros_like(mse_B)
    sparsity_B, auxk_B = zeros_B, zeros_B
    if activation == "relu":
        weighted_BxL = z_BxL * decoder_norms(params)[None, :]
        sparsity_B = l1_coefficient * jnp.sum(jnp.abs(weighted_BxL), axis=1)
    elif activation == "jumprelu":
        step_BxL = heaviside_step(pre_BxL, params["threshold"], bandwidth)
        sparsity_B = l0_coefficient * jnp.sum(step_BxL, axis=1)
    elif dead_mask is not None:  # computed only when a latent is dead, as sae-lens does
        auxk_B = jax.lax.cond(
            jnp.any(dead_mask),
            lambda: auxk_loss(params, x_BxD, x_hat_BxD, pre_BxL, dead_mask, aux_k=aux_k,
                              coefficient=aux_k_coefficient,
                              rescale_acts_by_decoder_norm=rescale),
            lambda: zeros_B)
    aux = {"mse": mse_B, "sparsity": sparsity_B, "auxk": auxk_B,
           "l0": jax.lax.stop_gradient(l0(z_BxL)), "z": jax.lax.stop_gradient(z_BxL)}
    return mse_B + sparsity_B + auxk_B, aux


def update_batchtopk_threshold(threshold: jax.Array, z_BxL: jax.Array,
                               lr: float = 0.01) -> jax.Array:
    """BatchTopK's running inference threshold (sae-lens ``update_topk_threshold``). Scalar.

    ``(1 - lr) * threshold + lr * min(z[z > 0])``, unchanged when nothing fired. After training the
    BatchTopK SAE is a JumpReLU SAE with this threshold for every latent (with
    ``rescale_acts_by_decoder_norm``, after ``normalize_decoder(..., fold_into_encoder=True)``).
    O(B·L).
    """
    pos_BxL = z_BxL > 0
    min_pos = jnp.min(jnp.where(pos_BxL, z_BxL, jnp.inf))
    return jnp.where(jnp.any(pos_BxL), (1 - lr) * threshold + lr * min_pos, threshold)


# ----------------------------------------------------------------------------- metrics
def l0(z_BxL: jax.Array) -> jax.Array:
    """Number of nonzero latents per row, ``[B]`` float (sae-lens's ``l0`` metric). O(B·L)."""
    return jnp.sum(z_BxL != 0, axis=-1).astype(jnp.float32)


def fvu(x_BxD: jax.Array, x_hat_BxD: jax.Array) -> jax.Array:
    """Fraction of variance unexplained ``sum ||x - x_hat||^2 / sum ||x - mean_b x||^2``. Scalar.

    Equals ``1 - explained_variance`` of sae-lens's evals (``ExplainedVarianceCalculator`` on one
    batch): 0 for a perfect reconstruction, 1 for the batch mean. O(B·D).

    >>> import jax.numpy as jnp
    >>> x = jnp.array([[0.0, 1.0], [2.0, 3.0]])
    >>> float(fvu(x, x)), float(fvu(x, jnp.array([[1.0, 2.0], [1.0, 2.0]])))
    (0.0, 1.0)
    """
    if x_BxD.ndim != 2 or x_BxD.shape != x_hat_BxD.shape:
        raise ValueError(f"fvu expects x and x_hat [B, D] of equal shape; got {x_BxD.shape} and "
                         f"{x_hat_BxD.shape}")
    x_BxD = x_BxD.astype(jnp.float32)
    resid = jnp.sum((x_BxD - x_hat_BxD.astype(jnp.float32)) ** 2)
    total = jnp.sum((x_BxD - jnp.mean(x_BxD, axis=0, keepdims=True)) ** 2)
    return resid / total
