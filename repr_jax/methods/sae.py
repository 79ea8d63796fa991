"""Sparse autoencoders (``method.name=sae``): a dictionary of ``L`` latents trained to reconstruct
activation vectors ``x [B, D]`` (the batch's ``x``, as every vector dataset has it).

The maths is :mod:`repr_jax.objectives.sae` (sae-lens 6.x's four training SAEs); this file is the
method around it: the parameters as one Flax variable, the state that gradients do not train, and
the checks. The encoder section of the config is not used: the model *is* the SAE on the raw input.

State, in three places by who needs it:

* ``params["sae"]``: ``W_enc [D, L]``, ``b_enc [L]``, ``W_dec [L, D]``, ``b_dec [D]`` (plus
  ``threshold [L]`` for JumpReLU), :func:`~repr_jax.objectives.sae.init_sae`'s tied init.
* ``batch_stats`` (the non-trained collection the run keeps beside the params, so that ``embed``,
  the evaluators and checkpoints see it): ``scale``, the input scaling factor (1 unless
  ``scale_inputs``); for BatchTopK ``threshold``, the running inference threshold that
  :func:`~repr_jax.objectives.sae.update_batchtopk_threshold` moves after every forward pass; for
  TopK ``k``, the ``method.k`` the latents are taken at (every step writes its ``hp``'s, so a
  population member's ``embed`` keeps its own ``k``).
* ``extra["forward_passes_since_fired"] [L]`` (training only): forward passes since each latent
  was last nonzero; a latent is dead for AuxK after more than ``dead_feature_window`` of them
  (sae-lens's counter and window; ``dead_feature_window x train.batch_size`` tokens, a
  micro-batch's tokens under ``train.grad_accum``).

Inputs are multiplied by ``scale`` everywhere (training, ``embed``, ``reconstruct``); the scale
and a ``b_dec_init="mean"`` decoder bias are estimated once, when the method is built, from a fixed
sample of up to ``INIT_SAMPLE`` training examples (seed 0): sae-lens's
``estimate_norm_scaling_factor`` before training, not the stream's first batches.

Populations (:mod:`repr_jax.train.population`) vmap members that differ in ``method.k`` too: it
is an integer hyper leaf, read traced from ``hp`` by the loss, and ``lax.top_k`` is sized by the
static ``k`` the method is built with (a single run's own; a population's members' largest), the
ranks past a member's ``k`` zeroed (:func:`~repr_jax.objectives.sae.topk_activation`'s ``k_max``).
The fields that shape the parameters or the program (``latents``, ``expansion``, ``activation``,
...) stay static; the population's refusal names them and the sweep that trains them instead.

``embed(x)`` returns the latent activations ``z [B, L]`` (eval mode; BatchTopK as the JumpReLU
with its running threshold, so rows do not compete), so the evaluation battery runs on the
latents; ``reconstruct(x)`` returns ``x_hat [B, D]`` in the input's units (what the ``sae``
evaluator reads). Cost: O(B·D·L) time and O(B·(D + L) + D·L) memory per step and per embedded
batch.
"""

from __future__ import annotations

from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import ConfigError, MethodConfig, config, hyper, static
from repr_jax.methods.base import BuildContext, Method, MethodSpec
from repr_jax.objectives import sae as sae_lib

INIT_SAMPLE = 16384  # training examples read to estimate the input scale and mean
_TOPK_KINDS = ("topk", "batchtopk")
_NEVER = 2 ** 30  # forward passes since firing saturate here (no int32 overflow)


# --------------------------------------------------------------------------------------------------
# Config section
# --------------------------------------------------------------------------------------------------

@config
class SAEConfig(MethodConfig):
    """A sparse autoencoder on the input vectors (sae-lens's defaults unless said)."""
    activation: str = static("topk", sae_lib.ACTIVATIONS,
                             "topk | batchtopk | jumprelu | relu (sae-lens's four training SAEs)")
    latents: int = static(0, ">=0", "number of latents L; wins over expansion when > 0")
    expansion: int = static(8, ">0", "L = expansion x the input width D when latents=0")
    k: int = hyper(100, ">0", "topk: latents per row; batchtopk: per row on average (0 < k < L); "
                              "a population may vary it (lax.top_k sized by its largest k)")
    l1_coefficient: float = hyper(1.0, ">=0", "relu: weight of the decoder-norm-weighted L1")
    l0_coefficient: float = hyper(1.0, ">=0", "jumprelu: weight of the L0 penalty (STE)")
    aux_k_coefficient: float = hyper(1.0, ">=0", "topk, batchtopk: weight of the AuxK loss on "
                                                 "dead latents (Gao et al. use 1/32)")
    bandwidth: float = static(0.05, ">0", "jumprelu: width of the STE's rectangle kernel")
    dead_feature_window: int = static(1000, ">0", "forward passes without firing after which a "
                                                  "latent is dead (AuxK, training metrics)")
    b_dec_init: str = static("zeros", ("zeros", "mean"),
                             "decoder bias at init: zeros (sae-lens 6.x) or the mean of a fixed "
                             "sample of training inputs")
    normalize_decoder: bool = static(False, doc="unit-norm decoder rows at init and after every "
                                                "step, folded into the encoder (False: sae-lens "
                                                "6.x, norm-weighted L1 / rescaled TopK)")
    scale_inputs: bool = static(False, doc="multiply inputs by sqrt(D) / mean ||x|| estimated "
                                           "once from the training inputs (sae-lens's "
                                           "normalize_activations='expected_average_only_in')")

    # Why a population's members may not differ in these (repr_jax.train.population says so).
    _population_refusals: ClassVar[dict[str, str]] = {
        "latents": "changes the SAE's parameter shapes (W_enc [D, L], W_dec [L, D])",
        "expansion": "changes the SAE's parameter shapes (L = expansion x D)",
        "activation": "changes the SAE's function and state (JumpReLU's threshold [L] parameter, "
                      "BatchTopK's running threshold)",
    }

    def _validate(self):
        if self.activation in _TOPK_KINDS and self.latents and not self.k < self.latents:
            raise ConfigError(f"method.k={self.k} must be below method.latents={self.latents} "
                              f"(0 < k < L)")


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------

class SparseAutoencoder(nn.Module):
    """The SAE as a Flax module: ``params["sae"]`` and ``batch_stats`` ``{"scale"[, "threshold"]
    [, "k"]}``.

    ``__call__(batch_or_x)`` and ``embed(x)`` give ``z [B, L]`` (eval mode), ``reconstruct(x)``
    ``x_hat [B, D]`` in the input's units. ``k``: TopK's static bound (``lax.top_k``'s size); the
    ``k`` in ``batch_stats`` (initially this one) is the one applied. O(B·D·L).
    """
    d_in: int
    latents: int
    activation: str
    k: int
    bandwidth: float = 0.05
    unit_decoder: bool = False
    b_dec_init: tuple[float, ...] | None = None  # [D] in scaled units; None: zeros
    scale_init: float = 1.0

    def setup(self):
        def init(key):
            b_dec = None if self.b_dec_init is None else jnp.asarray(self.b_dec_init, jnp.float32)
            return sae_lib.init_sae(key, self.d_in, self.latents, activation=self.activation,
                                    b_dec=b_dec,
                                    decoder_init_norm=1.0 if self.unit_decoder else 0.1)
        self.sae = self.param("sae", init)
        self.scale = self.variable("batch_stats", "scale",
                                   lambda: jnp.asarray(self.scale_init, jnp.float32))
        if self.activation == "batchtopk":
            self.threshold = self.variable("batch_stats", "threshold",
                                           lambda: jnp.zeros((), jnp.float32))
        if self.activation == "topk":
            self.k_used = self.variable("batch_stats", "k",
                                        lambda: jnp.asarray(self.k, jnp.int32))

    @property
    def rescale(self) -> bool:
        return self.activation in _TOPK_KINDS  # sae-lens's training default for TopK kinds

    def __call__(self, batch_or_x, *, train: bool = False):
        del train  # the same function in both modes
        x = batch_or_x["x"] if isinstance(batch_or_x, dict) else batch_or_x
        return self.embed(x)

    def embed(self, x_BxD):
        """Latent activations ``z [B, L]`` of inputs ``x [B, D]``; BatchTopK by its threshold."""
        x_BxD = x_BxD.reshape(x_BxD.shape[0], -1).astype(jnp.float32) * self.scale.value
        if self.activation == "topk":
            return sae_lib.encode(self.sae, x_BxD, activation="topk", k=self.k_used.value,
                                  k_max=self.k)
        if self.activation != "batchtopk":
            return sae_lib.encode(self.sae, x_BxD, activation=self.activation,
                                  bandwidth=self.bandwidth)
        pre_BxL = sae_lib.pre_activations(self.sae, x_BxD, rescale_acts_by_decoder_norm=True)
        return jax.nn.relu(pre_BxL) * (pre_BxL > self.threshold.value)

    def reconstruct(self, x_BxD):
        """``x_hat [B, D]``: the decoded latents, in the input's units (divided by the scale)."""
        z_BxL = self.embed(x_BxD)
        x_hat_BxD = sae_lib.decode(self.sae, z_BxL, rescale_acts_by_decoder_norm=self.rescale)
        return x_hat_BxD / self.scale.value


# --------------------------------------------------------------------------------------------------
# The method
# --------------------------------------------------------------------------------------------------

def sparse_autoencoder(d_in: int, latents: int, *, activation: str = "topk", k: int = 100,
                       bandwidth: float = 0.05, dead_feature_window: int = 1000,
                       normalize_decoder: bool = False, b_dec_init=None,
                       scale: float = 1.0) -> Method:
    """The ``sae`` method on inputs of width ``d_in``.

    Its loss is ``loss_weight * mean_b objectives.sae.loss(params["sae"], scale * x)`` with the
    section's coefficients and ``k`` (``hp.k``, traced; this ``k`` is its static bound, the size
    of ``lax.top_k``) and, for TopK kinds, AuxK on the latents dead before this batch; it also
    counts forward passes since each latent fired (``extra``), moves BatchTopK's inference
    threshold and records TopK's ``k`` (``batch_stats``). ``normalize_decoder``: after every
    optimizer step the decoder rows go back to unit norm with the norms folded into the encoder
    (the function is unchanged); JumpReLU thresholds are clamped at 0 after every step. Time
    O(B·D·L) per step (the firing counts read the loss's own latents; AuxK is computed only
    while a latent is dead, as sae-lens does).
    """
    if activation in _TOPK_KINDS and not 0 < k < latents:
        raise ValueError(f"sae: {activation} needs 0 < k < latents; got k={k}, latents={latents}")
    model = SparseAutoencoder(d_in, latents, activation, k, bandwidth, normalize_decoder,
                              None if b_dec_init is None else tuple(float(v) for v in b_dec_init),
                              float(scale))
    topk = activation in _TOPK_KINDS

    def init_extra(key, variables):
        del key, variables
        return {"forward_passes_since_fired": jnp.zeros((latents,), jnp.int32)}

    def loss(params, model_state, extra, batch, key, hp):
        del key  # deterministic
        p, stats = params["sae"], dict(model_state["batch_stats"])
        x_BxD = batch["x"].reshape(batch["x"].shape[0], -1).astype(jnp.float32) * stats["scale"]
        since_L = extra["forward_passes_since_fired"]
        dead_L = since_L > dead_feature_window
        k_kw = dict(k=hp.k, k_max=k) if topk else {}
        loss_B, aux = sae_lib.loss(p, x_BxD, activation=activation, **k_kw,
                                   l1_coefficient=hp.l1_coefficient,
                                   l0_coefficient=hp.l0_coefficient, bandwidth=bandwidth,
                                   aux_k_coefficient=hp.aux_k_coefficient,
                                   dead_mask=dead_L if topk else None)
        z_BxL = aux["z"]  # the loss's own latents (no second encoder pass)
        fired_L = jnp.any(z_BxL != 0, axis=0)
        since_L = jnp.where(fired_L, 0, jnp.minimum(since_L + 1, _NEVER)).astype(jnp.int32)
        if activation == "batchtopk":
            stats["threshold"] = sae_lib.update_batchtopk_threshold(stats["threshold"], z_BxL)
        if activation == "topk":
            stats["k"] = jnp.asarray(hp.k, jnp.int32)
        total_var = jnp.sum((x_BxD - jnp.mean(x_BxD, axis=0, keepdims=True)) ** 2)
        metrics = {"mse": aux["mse"].mean(), "sparsity": aux["sparsity"].mean(),
                   "auxk": aux["auxk"].mean(), "l0": aux["l0"].mean(),
                   "fvu": jax.lax.stop_gradient(aux["mse"].sum() / total_var),
                   "dead_fraction": jnp.mean(since_L > dead_feature_window)}
        return (hp.loss_weight * jnp.mean(loss_B),
                ({"batch_stats": stats}, {"forward_passes_since_fired": since_L}, metrics))

    def project(params, hp):
        del hp
        p = params["sae"]
        if normalize_decoder:
            p = sae_lib.normalize_decoder(p, fold_into_encoder=True)
        if activation == "jumprelu":
            p = dict(p, threshold=jnp.maximum(p["threshold"], 0.0))
        return dict(params, sae=p)

    needs_projection = normalize_decoder or activation == "jumprelu"
    return Method("sae", model, loss, init_extra=init_extra,
                  project_params=project if needs_projection else None)


# --------------------------------------------------------------------------------------------------
# Builder and registry entry
# --------------------------------------------------------------------------------------------------

def input_statistics(split: Any, n: int = INIT_SAMPLE, seed: int = 0) -> tuple[np.ndarray, float]:
    """``(mean [D], scaling factor)`` of up to ``n`` rows of ``split["x"]`` drawn without
    replacement (seed ``seed``, read in file order): the decoder bias init and sae-lens's
    ``sqrt(D) / mean ||x||``. Time O(n·D), memory O(n·D)."""
    total = len(split["x"])  # O(n) draw: no permutation of all the store's rows
    rows = np.sort(np.random.default_rng(seed).choice(total, min(n, total), replace=False))
    x_NxD = np.asarray(split["x"][rows], np.float64).reshape(len(rows), -1)
    norm = float(np.mean(np.linalg.norm(x_NxD, axis=1)))
    if not norm > 0:
        raise ConfigError(f"method.scale_inputs: the sampled training inputs have mean norm "
                          f"{norm}; nothing to scale by")
    return x_NxD.mean(axis=0), float(np.sqrt(x_NxD.shape[1]) / norm)


def check_vectors(dataset: Any) -> int:
    """The input width ``D`` of a dataset of float vectors; a one-line ConfigError otherwise."""
    x = dataset.splits["train"]["x"]
    shape = tuple(x.shape[1:])
    what = ("token ids" if dataset.vocab is not None or np.dtype(x.dtype).kind in "iu"
            else f"inputs of shape {shape}" if len(shape) != 1 else "")
    if what:
        raise ConfigError(f"method 'sae' trains on activation vectors (data.name=activations:DIR "
                          f"or another vector dataset); {dataset.name!r} has {what}")
    return shape[0]


def _build(section: SAEConfig, ctx: BuildContext) -> Method:
    d_in = check_vectors(ctx.dataset)
    active = {k: v for k, v in getattr(ctx.views_fn, "options", {}).items()
              if k in ("shift", "scale", "noise", "mask", "crop_pad", "flip", "preset") and v}
    if active:
        k, v = next(iter(active.items()))
        raise ConfigError(f"method 'sae' reconstructs the inputs as they are: data.views must be "
                          f"off (data.views.{k}={v!r})")
    latents = section.latents or section.expansion * d_in
    if section.activation in _TOPK_KINDS and not 0 < section.k < latents:
        size = ("method.latents" if section.latents
                else f"method.expansion x D = {section.expansion} x {d_in}")
        raise ConfigError(f"method.k={section.k} must be below the {latents} latents "
                          f"(0 < k < L; L = {size})")
    scale, b_dec = 1.0, None
    if section.scale_inputs or section.b_dec_init == "mean":
        mean_D, factor = input_statistics(ctx.dataset.splits["train"])
        scale = factor if section.scale_inputs else 1.0
        b_dec = mean_D * scale if section.b_dec_init == "mean" else None
    return sparse_autoencoder(d_in, latents, activation=section.activation, k=section.k,
                              bandwidth=section.bandwidth,
                              dead_feature_window=section.dead_feature_window,
                              normalize_decoder=section.normalize_decoder, b_dec_init=b_dec,
                              scale=scale)


SAE = MethodSpec(SAEConfig, _build)

__all__ = ["SAE", "SAEConfig", "SparseAutoencoder", "check_vectors", "input_statistics",
           "sparse_autoencoder"]
