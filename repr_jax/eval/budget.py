"""What an evaluation will cost before it runs: each evaluator's work and memory from N, D and the
order its docstring states, in seconds at a measured matrix-multiply rate.

These are estimates to see a budget by (the right order of magnitude, the right evaluator to
blame), not timings: ``repr-jax eval --dry-run`` prints them, and the evaluation's progress bar
advances by them, so its ETA weighs a D x D decomposition above a mean.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

ITERS = 100  # iterative solvers (L-BFGS, k-means): a typical iteration count
LAYERS = 6  # layerwise / matryoshka: a typical count of layers or prefixes


@dataclasses.dataclass(frozen=True)
class Shape:
    """The sizes an evaluator's cost depends on: training and test rows, the feature width, the
    classes (and the raw input's width, for geometry's CKA with the input). Search evaluators
    read ``n_test`` as the queries and ``n_train`` as the corpus."""
    n_train: int
    n_test: int
    dim: int
    classes: int = 10
    input_dim: int = 0


def _probe(s: Shape, kind: str, bootstrap: int) -> tuple[float, float]:
    n, d, c, q = s.n_train, s.dim, s.classes, s.n_test
    m = min(n, d)
    if kind == "logistic":  # rotation N D^2 + D^3, then iterations of N D C, 7 penalties
        flops = 2 * n * d * d + 10 * d ** 3 + ITERS * 7 * 4 * n * d * c
        memory = 4 * (3 * n * d + d * d)
    else:  # one decomposition of the smaller Gram, 19 penalties' weights
        flops = 2 * n * d * m + 10 * m ** 3 + 19 * (2 * d * c * m + 2 * q * d * c)
        memory = 4 * (2 * n * d + m * m + 19 * d * c)
    return flops + 3 * bootstrap * q, memory + 4 * min(bootstrap * q, 1 << 24)


def estimate(name: str, s: Shape, options: dict[str, Any]) -> tuple[float, float]:
    """``(flops, bytes)`` of evaluator ``name`` with ``options`` on shapes ``s``."""
    boot = int(options.get("bootstrap", 0))
    n, q, d, c = s.n_train, s.n_test, s.dim, s.classes
    if name == "linear_probe":
        return _probe(s, options.get("kind", "ridge"), boot)
    if name == "knn":  # Q x N scores, tiled
        return 2 * q * n * d + 3 * boot * q, 4 * (n * d + min(1024 * n, 1 << 25))
    if name == "fewshot":
        flops = mem = 0.0
        for shots in options.get("shots", (1, 5, 10, 25)):
            k = min(shots * c, n)
            f, m = _probe(Shape(k, q, d, c), "ridge", 0)
            flops, mem = flops + options.get("seeds", 5) * f, max(mem, m + 4 * q * d)
        return flops, mem
    if name in ("retrieval", "quantization"):  # n_test queries x n_train documents, tiled
        scale = 3 if name == "quantization" else 1
        return scale * 2 * q * n * d + 3 * boot * q, 4 * (q + n) * d
    if name == "sts":
        return 4 * q * d, 4 * 2 * q * d
    if name == "clustering":  # k-means, 3 initialisations
        return 3 * ITERS * 2 * q * c * d, 4 * 2 * q * d
    if name == "geometry":  # uniformity N^2 D, SVD and coding rate N D min, CKA with the input
        g = min(options.get("max_examples", 2000), q)
        m = min(g, d)
        flops = 2 * g * g * d + 6 * g * d * m + 20 * m ** 3 + 2 * g * g * max(s.input_dim, d)
        return flops, 4 * (g * d + 3 * g * g)
    if name == "rerank":  # q x depth pair passes, each as a 6-layer width-d encoder on 128 tokens
        pairs = q * options.get("depth", 50)
        return pairs * 6 * 24 * d * d * 128, 4 * options.get("batch_size", 64) * 128 * 4 * d
    if name == "late_interaction":  # q x n documents, ~32 x 128 token pairs each, width 128
        return 2 * q * n * 32 * 128 * 128, 2 * n * 128 * 128
    if name == "sae":  # the latents and the reconstruction of the test split, bootstrap
        latents, width = d, max(s.input_dim, 1)
        return 2 * 2 * q * width * latents + 3 * boot * q, 4 * q * (latents + 2 * width)
    if name == "concepts":  # per layer and concept: a projection each way, a logistic probe
        k = min(options.get("max_concepts", 32), c)
        f_mean = 2 * k * (n + q) * d * 2  # the direction and its shuffled control
        f_probe, m_probe = _probe(Shape(n, q, d, 2), "logistic", 0) if options.get(
            "probe", True) else (0.0, 0.0)
        return LAYERS * (f_mean + 2 * k * f_probe) + 3 * boot * q, max(4 * (n + q) * d, m_probe)
    if name == "bitext":  # per language (q) and direction: N x N cosines, twice more for xSIM
        return 3 * 2 * 2 * q * n * n * d + 2 * 4 * boot * q * n, 4 * (2 * n * d + 1024 * n)
    if name in ("layerwise", "matryoshka"):
        inner = {k: v for k, v in options.items() if k not in ("protocol", "dims")}
        f, m = estimate(options.get("protocol", "linear_probe"), s, inner)
        return LAYERS * f, m
    raise ValueError(f"no cost model for evaluator {name!r}")


@functools.lru_cache(maxsize=1)
def flops_per_second() -> float:
    """This machine's float32 matmul rate (a 1024^3 product, best of 3 after a warm-up): what
    turns estimated work into seconds."""
    import jax
    import jax.numpy as jnp
    a = jnp.ones((1024, 1024), jnp.float32)
    mm = jax.jit(lambda a: a @ a)
    jax.block_until_ready(mm(a))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        jax.block_until_ready(mm(a))
        best = min(best, time.perf_counter() - t)
    return 2 * 1024 ** 3 / best


def format_budget(rows: list[dict[str, Any]]) -> str:
    """Rows ``{representation, evaluator, n_train, n_test, dim, gflop, seconds, memory_mb}`` as a
    table, with the total."""
    head = ("representation", "evaluator", "N train", "N test", "D", "GFLOP", "~seconds", "~MB")
    cells = [(r["representation"], r["evaluator"], f"{r['n_train']:,}", f"{r['n_test']:,}",
              f"{r['dim']:,}", f"{r['gflop']:.3g}", f"{r['seconds']:.3g}",
              f"{r['memory_mb']:.0f}") for r in rows]
    total = sum(r["seconds"] for r in rows)
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) if i < 2 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(head, widths)))]
    lines += ["  ".join(v.ljust(w) if i < 2 else v.rjust(w)
                        for i, (v, w) in enumerate(zip(c, widths))) for c in cells]
    lines.append(f"estimated total: ~{total:.3g} s of evaluator work (beside the feature passes "
                 f"and compilation), at {flops_per_second() / 1e9:.0f} GFLOP/s")
    return "\n".join(lines)
