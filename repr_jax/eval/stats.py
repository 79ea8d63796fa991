"""Uncertainty for every metric: bootstrap confidence intervals and a paired bootstrap test.

Both resample *evaluation examples* (queries, test points, rated pairs) with replacement and recompute
the statistic on device, ``vmap``-ed over resamples in chunks. Intervals are percentile intervals
(Efron & Tibshirani 1993, ch. 13; scipy's ``bootstrap(method="percentile")``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np


class Estimate(float):
    """A metric value that carries its confidence interval: ``float(e)`` is the point estimate,
    ``e.low`` / ``e.high`` the interval (``nan`` where none was computed)."""

    def __new__(cls, value: float, low: float = math.nan, high: float = math.nan):
        self = super().__new__(cls, float(value))
        self.low, self.high = float(low), float(high)
        return self

    def __repr__(self) -> str:
        return f"Estimate({float(self):.6g}, low={self.low:.6g}, high={self.high:.6g})"

    def __reduce__(self):
        return Estimate, (float(self), self.low, self.high)


def _as_tuple(values) -> tuple[jax.Array, ...]:
    arrays = tuple(jnp.asarray(v) for v in (values if isinstance(values, (tuple, list))
                                            else (values,)))
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays):
        raise ValueError(f"bootstrap arrays must share their first (example) axis; got "
                         f"{[a.shape for a in arrays]}")
    return arrays


def _mean(x):
    return jnp.mean(x)


STREAM_ABOVE = 1 << 24  # resample indices (R x N) above which they are drawn chunk by chunk


def resampled(statistic: Callable, arrays: Sequence[jax.Array], num_resamples: int, seed,
               chunk: int) -> jax.Array:
    """``statistic`` on ``num_resamples`` resamples (with replacement) of the example axis; one
    compilation per statistic and shape. Up to ``STREAM_ABOVE`` indices in all they are drawn at
    once (time and memory ``O(R N)``); above, chunk by chunk from ``fold_in(key, chunk)`` so at
    most ``STREAM_ABOVE`` are held (memory ``O(N + STREAM_ABOVE)``: 1M examples x 1,000
    resamples in ~0.3 GB instead of 15 GB; other draws, the same distribution)."""
    n = arrays[0].shape[0]
    if num_resamples * n <= STREAM_ABOVE:
        return _resampled_at_once(statistic, tuple(arrays), num_resamples, seed, chunk)
    per_chunk = max(1, min(chunk, STREAM_ABOVE // n))
    return _resampled_streamed(statistic, tuple(arrays), num_resamples, seed, per_chunk)


@functools.partial(jax.jit, static_argnames=("statistic", "num_resamples", "chunk"))
def _resampled_at_once(statistic, arrays, num_resamples: int, seed, chunk: int) -> jax.Array:
    n = arrays[0].shape[0]
    idx_RxN = jax.random.randint(jax.random.PRNGKey(seed), (num_resamples, n), 0, n)

    def one(idx_N):
        return statistic(*(a[idx_N] for a in arrays))
    return jax.lax.map(one, idx_RxN, batch_size=min(chunk, num_resamples))


@functools.partial(jax.jit, static_argnames=("statistic", "num_resamples", "per_chunk"))
def _resampled_streamed(statistic, arrays, num_resamples: int, seed, per_chunk: int) -> jax.Array:
    n = arrays[0].shape[0]
    key = jax.random.PRNGKey(seed)

    def chunk_of(c):
        idx_CxN = jax.random.randint(jax.random.fold_in(key, c), (per_chunk, n), 0, n)
        return jax.vmap(lambda idx_N: statistic(*(a[idx_N] for a in arrays)))(idx_CxN)
    chunks = -(-num_resamples // per_chunk)
    return jax.lax.map(chunk_of, jnp.arange(chunks)).reshape(-1)[:num_resamples]


def percentile_interval(samples: jax.Array, level: float) -> tuple[float, float]:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    alpha = (1 - level) / 2
    lo, hi = jnp.quantile(samples, jnp.asarray([alpha, 1 - alpha]))
    return float(lo), float(hi)


def normal_interval(samples, point: float, level: float = 0.95) -> tuple[float, float]:
    """The normal bootstrap interval ``point -+ z_{(1+level)/2} sd(samples)`` (Efron &
    Tibshirani 1993, eq. 13.2): centred on the point estimate, its width from the resamples'
    spread. For statistics that resampling itself biases (a word set drawn with replacement
    holds duplicates, which shifts covariance-whitened estimates), where the percentile interval
    can miss the point and the bias-corrected one collapses once every resample lies on one side.
    Non-finite samples are left out (``nan`` bounds when fewer than 2 are left). Time ``O(R)``.

    >>> [round(b, 4) for b in normal_interval([1.0, 2.0, 3.0], 10.0, 0.95)]
    [8.04, 11.96]
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    x = np.asarray(samples, np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if len(x) < 2 or not math.isfinite(point):
        return math.nan, math.nan
    half = statistics.NormalDist().inv_cdf((1 + level) / 2) * float(np.std(x, ddof=1))
    return point - half, point + half


def bootstrap_ci(values: Any, statistic: Callable[..., jax.Array] | None = None, *,
                 num_resamples: int = 1000, level: float = 0.95, seed: int = 0,
                 chunk: int = 100) -> Estimate:
    """Percentile bootstrap confidence interval of ``statistic`` over examples.

    Args:
      values: an array ``[N, ...]`` or a tuple of arrays sharing the example axis ``N`` (resampled
        jointly, e.g. ``(scores, gold)`` for a correlation).
      statistic: a JAX function of the arrays returning a scalar; default the mean of one array
        (per-example accuracies, per-query nDCG...).
      num_resamples, level, seed: ``level=0.95`` gives the 2.5th and 97.5th percentiles.
      chunk: resamples evaluated per vectorised batch (memory ``chunk * N``; fewer when N is
        large, see :func:`resampled`). Time ``O(R N)``.

    Returns:
      ``Estimate(statistic(values), low, high)``.

    >>> e = bootstrap_ci(jnp.asarray([0.0, 1.0] * 50))
    >>> float(e), e.low < 0.5 < e.high
    (0.5, True)
    """
    arrays = _as_tuple(values)
    statistic = statistic or _mean
    point = float(statistic(*arrays))
    samples = resampled(statistic, arrays, num_resamples, seed, chunk)
    return Estimate(point, *percentile_interval(samples, level))


def paired_bootstrap(values_a: Any, values_b: Any, statistic: Callable[..., jax.Array] | None = None,
                     *, num_resamples: int = 1000, level: float = 0.95, seed: int = 0,
                     chunk: int = 100) -> dict[str, float]:
    """Paired bootstrap test of ``statistic(a) - statistic(b)`` for two representations scored on
    the *same* examples (each resample draws the same example indices for both).

    Returns ``{"difference", "low", "high", "p_value"}``: the observed difference, its percentile
    interval, and the two-sided bootstrap p-value ``min(1, 2 * min(P*(d <= 0), P*(d >= 0)))`` for
    "no difference" (Koehn 2004's paired bootstrap resampling, two-sided).
    """
    observed, samples = paired_samples(values_a, values_b, statistic,
                                       num_resamples=num_resamples, seed=seed, chunk=chunk)
    return paired_summary(observed, samples, level)


def paired_samples(values_a: Any, values_b: Any, statistic: Callable[..., jax.Array] | None = None,
                   *, num_resamples: int = 1000, seed: int = 0, chunk: int = 100
                   ) -> tuple[float, jax.Array]:
    """``(observed difference, [R] resampled differences)`` of :func:`paired_bootstrap`: what
    an average over several example sets (a task type's tasks) adds up sample by sample."""
    a, b = _as_tuple(values_a), _as_tuple(values_b)
    if a[0].shape[0] != b[0].shape[0]:
        raise ValueError(f"paired_bootstrap needs the same examples for both; got "
                         f"{a[0].shape[0]} and {b[0].shape[0]}")
    statistic = statistic or _mean
    samples = resampled(_Difference(statistic, len(a)), a + b, num_resamples, seed, chunk)
    return float(statistic(*a) - statistic(*b)), samples


def paired_summary(observed: float, samples: jax.Array, level: float = 0.95) -> dict[str, float]:
    """:func:`paired_bootstrap`'s ``{"difference", "low", "high", "p_value"}`` from an observed
    difference and its resampled differences (:func:`paired_samples`)."""
    samples = jnp.asarray(samples)
    lo, hi = percentile_interval(samples, level)
    # Differences within float32 rounding of zero count on both sides (identical inputs: p = 1).
    tie = 1e-6 * max(1.0, float(jnp.max(jnp.abs(samples))))
    p = 2 * min(float(jnp.mean(samples <= tie)), float(jnp.mean(samples >= -tie)))
    return {"difference": observed, "low": lo, "high": hi, "p_value": min(1.0, p)}


def normal_summary(observed: float, samples, level: float = 0.95) -> dict[str, float]:
    """:func:`paired_summary` from a few replicated differences (each a whole evaluation on a
    resample, e.g. one k-means fit, too few for percentiles): the normal interval
    (:func:`normal_interval`) and the two-sided p-value of ``observed / sd(samples)``.

    >>> {k: round(v, 4) for k, v in normal_summary(0.2, [0.1, 0.2, 0.3]).items()}
    {'difference': 0.2, 'low': 0.004, 'high': 0.396, 'p_value': 0.0455}
    """
    lo, hi = normal_interval(samples, observed, level)
    sd = float(np.std(np.asarray(samples, np.float64), ddof=1))
    if not math.isfinite(sd) or sd == 0:
        p = 1.0 if observed == 0 else 0.0
    else:
        p = 2 * (1 - statistics.NormalDist().cdf(abs(observed) / sd))
    return {"difference": observed, "low": lo, "high": hi, "p_value": p}


def paired_row(values: Any, baseline: Any, *, num_resamples: int = 1000) -> dict[str, float]:
    """A comparison table's numbers for per-example ``values`` against ``baseline``'s on the same
    examples: both means, :func:`paired_bootstrap`'s difference, interval and p-value, the count.
    Time ``O(num_resamples Q)`` for Q examples."""
    test = paired_bootstrap(values, baseline, num_resamples=num_resamples)
    return dict(value=float(np.mean(values)), baseline_value=float(np.mean(baseline)),
                difference=test["difference"], diff_low=test["low"], diff_high=test["high"],
                p_value=test["p_value"], queries=len(values))


@dataclasses.dataclass(frozen=True)
class _Difference:
    """``statistic(a) - statistic(b)`` over the concatenated arrays (hashable: a jit static arg)."""
    statistic: Callable
    k: int

    def __call__(self, *arrays):
        return self.statistic(*arrays[:self.k]) - self.statistic(*arrays[self.k:])


def with_ci(values: Any, statistic: Callable[..., jax.Array] | None = None, *,
            bootstrap: int = 1000, level: float = 0.95) -> float:
    """:func:`bootstrap_ci` when ``bootstrap`` resamples are asked for, else the plain statistic."""
    if bootstrap:
        return bootstrap_ci(values, statistic, num_resamples=bootstrap, level=level)
    return float((statistic or _mean)(*_as_tuple(values)))


def mean_and_spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``; 0 for one value) of repeated runs."""
    v = np.asarray(values, np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0
