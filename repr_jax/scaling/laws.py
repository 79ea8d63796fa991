"""Scaling-law functional forms: pure functions of parameters and named inputs.

Each :class:`Law` predicts ``y`` from ``inputs`` (a dict of arrays) and an *internal* parameter vector
in which the fit is well conditioned (positive scales as logs; sums of positive terms predicted in log
space by log-sum-exp, as Hoffmann et al. 2022 App. D.2 do). ``public(theta)`` maps it to the
parameters as papers report them; ``LAWS`` holds the registered forms, with default initialisation
grids.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

Inputs = Mapping[str, jax.Array]


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: a static jit argument
class Law:
    """A functional form. ``log_predict(theta, inputs)`` is ``log y_hat`` (used for log-space fits;
    ``None`` when ``y`` may be non-positive); ``predict`` is ``y_hat``."""
    name: str
    inputs: tuple[str, ...]
    params: tuple[str, ...]          # internal parameter names, in theta order
    predict: Callable[[jax.Array, Inputs], jax.Array]
    public: Callable[[jax.Array], dict[str, jax.Array]]
    init_grid: Mapping[str, Sequence[float]]
    log_predict: Callable[[jax.Array, Inputs], jax.Array] | None = None
    source: str = ""

    def grid(self, init_grid: Mapping[str, Sequence[float]] | None = None) -> np.ndarray:
        """Every combination of the per-parameter initial values: ``[starts, params]``."""
        grid = dict(self.init_grid, **(init_grid or {}))
        missing = [p for p in self.params if p not in grid]
        if missing:
            raise ValueError(f"law {self.name!r}: no initial values for {missing}")
        return np.asarray(list(itertools.product(*(grid[p] for p in self.params))), np.float32)


def _lse(*terms):
    return jax.nn.logsumexp(jnp.stack(terms), axis=0)


# ---------------------------------------------------------------------------------------- power law

def _power_log(t, i):  # log(c + a x^-b) with t = (log a, b, log c)
    return _lse(t[0] - t[1] * jnp.log(i["x"]), jnp.broadcast_to(t[2], i["x"].shape))


POWER = Law(
    "power", ("x",), ("log_a", "b", "log_c"),
    predict=lambda t, i: jnp.exp(_power_log(t, i)),
    log_predict=_power_log,
    public=lambda t: {"a": jnp.exp(t[0]), "b": t[1], "c": jnp.exp(t[2])},
    init_grid={"log_a": (0.0, 5.0, 10.0), "b": (0.1, 0.5, 1.0), "log_c": (-2.0, 0.0, 1.0)},
    source="saturating power law y = c + a * x^(-b) (e.g. Kaplan et al. 2020; Hestness et al. 2017)")


# ---------------------------------------------------------------------------------------- Chinchilla

def _chinchilla_log(t, i):  # t = (a, b, e, alpha, beta): A = e^a, B = e^b, E = e^e
    return _lse(t[0] - t[3] * jnp.log(i["N"]), t[1] - t[4] * jnp.log(i["D"]),
                jnp.broadcast_to(t[2], i["N"].shape))


CHINCHILLA = Law(
    "chinchilla", ("N", "D"), ("a", "b", "e", "alpha", "beta"),
    predict=lambda t, i: jnp.exp(_chinchilla_log(t, i)),
    log_predict=_chinchilla_log,
    public=lambda t: {"E": jnp.exp(t[2]), "A": jnp.exp(t[0]), "B": jnp.exp(t[1]),
                      "alpha": t[3], "beta": t[4]},
    init_grid={"a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0), "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
               "e": (-1.0, -0.5, 0.0, 0.5, 1.0), "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
               "beta": (0.0, 0.5, 1.0, 1.5, 2.0)},
    source="L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022, App. D.2: fitted in "
           "log space by log-sum-exp from this 4,500-point grid)")


def compute_optimal(params: Mapping[str, float], compute) -> dict[str, np.ndarray]:
    """Chinchilla's compute-optimal allocation for ``C = 6 N D`` (Hoffmann et al. 2022, Eq. 4):
    ``N*(C) = G (C/6)^a``, ``D*(C) = G^-1 (C/6)^b`` with ``a = beta / (alpha + beta)``,
    ``b = alpha / (alpha + beta)``, ``G = (alpha A / (beta B))^(1 / (alpha + beta))``."""
    alpha, beta = float(params["alpha"]), float(params["beta"])
    g = (alpha * float(params["A"]) / (beta * float(params["B"]))) ** (1 / (alpha + beta))
    c = np.asarray(compute, np.float64) / 6
    return {"N": g * c ** (beta / (alpha + beta)), "D": c ** (alpha / (alpha + beta)) / g,
            "a": beta / (alpha + beta), "b": alpha / (alpha + beta)}


# ------------------------------------------------------------------------- upstream -> downstream

def _saturation_log(t, i):  # e_DS = e_IR + k e_US^alpha, t = (log e_ir, log k, alpha)
    return _lse(jnp.broadcast_to(t[0], i["e_us"].shape), t[1] + t[2] * jnp.log(i["e_us"]))


SATURATION = Law(
    "saturation", ("e_us",), ("log_e_ir", "log_k", "alpha"),
    predict=lambda t, i: jnp.exp(_saturation_log(t, i)),
    log_predict=_saturation_log,
    public=lambda t: {"e_ir": jnp.exp(t[0]), "k": jnp.exp(t[1]), "alpha": t[2]},
    init_grid={"log_e_ir": (-4.0, -2.0, -1.0), "log_k": (-1.0, 0.0, 1.0),
               "alpha": (0.5, 1.0, 2.0)},
    source="downstream error e_DS = e_IR + k * e_US^alpha vs upstream error (Abnar et al. 2021, "
           "Eq. 1 as recalled in shared/refdata/NOTES.md; errors = 1 - accuracy)")


# ------------------------------------------------------------------------------ broken power law

def _bnsl_log(t, i):
    """One break: y = a + b x^-c0 (1 + (x/d1)^(1/f1))^(-c1 f1), t = (log a, log b, c0, c1, log d1,
    log f1)."""
    x = i["x"]
    f1 = jnp.exp(t[5])
    smooth = jnp.logaddexp(0.0, (jnp.log(x) - t[4]) / f1)  # log(1 + (x/d)^(1/f))
    return _lse(jnp.broadcast_to(t[0], x.shape), t[1] - t[2] * jnp.log(x) - t[3] * f1 * smooth)


BNSL = Law(
    "bnsl", ("x",), ("log_a", "log_b", "c0", "c1", "log_d1", "log_f1"),
    predict=lambda t, i: jnp.exp(_bnsl_log(t, i)),
    log_predict=_bnsl_log,
    public=lambda t: {"a": jnp.exp(t[0]), "b": jnp.exp(t[1]), "c0": t[2], "c1": t[3],
                      "d1": jnp.exp(t[4]), "f1": jnp.exp(t[5])},
    init_grid={"log_a": (-3.0, -1.0), "log_b": (0.0, 2.0), "c0": (0.0, 0.5), "c1": (0.0, 0.5, 1.0),
               "log_d1": (2.0, 5.0, 8.0, 11.0), "log_f1": (-1.0, 0.5)},
    source="broken neural scaling law with one break (Caballero et al. 2022, Eq. 1, n = 1)")


# ---------------------------------------------------------------------------------- log-linear

LOG_LINEAR = Law(
    "log_linear", ("x",), ("a", "b"),
    predict=lambda t, i: t[0] + t[1] * jnp.log(i["x"]),
    public=lambda t: {"a": t[0], "b": t[1]},
    init_grid={"a": (0.0,), "b": (0.0,)},
    source="y = a + b * log(x) (log-linear trend, e.g. zero-shot accuracy vs concept frequency, "
           "Udandarao et al. 2024)")


# ------------------------------------------------------------------- sparse autoencoders (TopK)

def _sae_topk_log(t, i):
    """``log L(n, k)``, t = (alpha, beta_k, beta_n, gamma, zeta, eta): the log of
    ``exp(alpha + beta_k log k + beta_n log n + gamma log k log n) + exp(zeta + eta log k)``."""
    log_n, log_k = jnp.log(i["n"]), jnp.log(i["k"])
    return _lse(t[0] + t[1] * log_k + t[2] * log_n + t[3] * log_k * log_n, t[4] + t[5] * log_k)


SAE_TOPK = Law(
    "sae_topk", ("n", "k"), ("alpha", "beta_k", "beta_n", "gamma", "zeta", "eta"),
    predict=lambda t, i: jnp.exp(_sae_topk_log(t, i)),
    log_predict=_sae_topk_log,
    public=lambda t: {"alpha": t[0], "beta_k": t[1], "beta_n": t[2], "gamma": t[3],
                      "zeta": t[4], "eta": t[5]},
    init_grid={"alpha": (-1.0, 1.0, 3.0), "beta_k": (-0.5, 0.0, 0.5),
               "beta_n": (-0.6, -0.3, 0.0), "gamma": (-0.1, -0.03, 0.0),
               "zeta": (-4.0, -2.0, 0.0), "eta": (-1.0, -0.3, 0.0)},
    source="normalised MSE of a TopK sparse autoencoder with n latents and k active per input, "
           "L(n, k) = exp(alpha + beta_k log k + beta_n log n + gamma log k log n) + "
           "exp(zeta + eta log k) (Gao et al. 2024, 'Scaling and evaluating sparse "
           "autoencoders', the joint law in n and k; the second term an irreducible loss that "
           "falls with k). The paper's fitted values are not stated here: they were not found "
           "in a source this project could check")


LAWS = {law.name: law for law in (POWER, CHINCHILLA, SATURATION, BNSL, LOG_LINEAR, SAE_TOPK)}


def get_law(law: str | Law) -> Law:
    if isinstance(law, Law):
        return law
    if law not in LAWS:
        raise ValueError(f"unknown law {law!r}; choose from {', '.join(LAWS)}")
    return LAWS[law]
