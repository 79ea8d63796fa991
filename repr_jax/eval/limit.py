"""Embedding-dimension limits with free embeddings (LIMIT; Weller et al. 2025, "On the Theoretical
Limitations of Embedding-Based Retrieval").

For ``n`` documents and one query per pair of them (all ``n (n - 1) / 2`` top-2 subsets), the
query and document vectors in ``d`` dimensions are optimised directly (no encoder: the best case
any model of that dimension could reach) until every query ranks exactly its two documents above
all others. The *critical n* of a dimension is the largest ``n`` for which this succeeds; the
paper finds it grows only polynomially (cubically) with ``d``. With ``vectors=T`` every query and
document is ``T`` vectors of ``d`` dimensions scored by MaxSim (ColBERT's late interaction: the
sum over the query's vectors of the best dot product with any of the document's).
"""

from __future__ import annotations

import functools
import itertools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax


def top2_pairs(n: int) -> np.ndarray:
    """Every pair of ``n`` documents: ``[n (n - 1) / 2, 2]``, the relevant set of one query each.

    >>> top2_pairs(3).tolist()
    [[0, 1], [0, 2], [1, 2]]
    """
    return np.asarray(list(itertools.combinations(range(n), 2)), np.int32).reshape(-1, 2)


def _relevant(pairs_Mx2: jax.Array, n: int) -> jax.Array:
    """``[M, N]`` True at each query's two documents."""
    return jax.nn.one_hot(pairs_Mx2, n).sum(1) > 0


def scores(q, d) -> jax.Array:
    """``[M, N]``: dot products of ``q [M, D]`` and ``d [N, D]``, or MaxSim of ``q [M, T, D]``
    and ``d [N, T, D]``."""
    if q.ndim == 2:
        return q @ d.T
    return jnp.einsum("mtd,nud->mntu", q, d).max(-1).sum(-1)


def all_retrievable(q_MxD: jax.Array, d_NxD: jax.Array, pairs_Mx2: jax.Array) -> jax.Array:
    """Whether every query scores both of its documents above every other document (dot
    product or MaxSim, strict)."""
    s = scores(q_MxD, d_NxD)
    pos = jnp.take_along_axis(s, pairs_Mx2, axis=1)
    neg = jnp.where(_relevant(pairs_Mx2, s.shape[1]), -jnp.inf, s)
    return jnp.all(pos.min(1) > neg.max(1))


def _loss(params, pairs_Mx2, temperature):
    """Per query: a soft maximum of the negatives' scores minus a soft minimum of the two
    positives' (a smooth margin violation), averaged; zero-margin violations drive it."""
    s = scores(params["q"], params["d"]) / temperature
    is_pos = _relevant(pairs_Mx2, s.shape[1])
    soft_max_neg = jax.nn.logsumexp(jnp.where(is_pos, -jnp.inf, s), axis=1)
    soft_min_pos = -jax.nn.logsumexp(jnp.where(is_pos, -s, -jnp.inf), axis=1)
    return jnp.mean(jax.nn.softplus(soft_max_neg - soft_min_pos + 1.0))


@functools.partial(jax.jit, static_argnames=("n", "dim", "max_steps", "check_every", "vectors"))
def _solve(keys, pairs, *, n: int, dim: int, max_steps: int, check_every: int, lr: float,
           temperature: float, vectors: int = 1):
    """Optimises one problem per key (vmapped restarts); returns (solved [R], steps [R])."""
    tx = optax.adam(lr)
    m = pairs.shape[0]

    def one(key):
        kq, kd = jax.random.split(key)
        shape = (vectors, dim) if vectors > 1 else (dim,)
        params = {"q": jax.random.normal(kq, (m, *shape)) / np.sqrt(dim),
                  "d": jax.random.normal(kd, (n, *shape)) / np.sqrt(dim)}
        grad = jax.grad(_loss)

        def block(carry):
            params, opt, step, _ = carry

            def inner(_, c):
                p, o = c
                updates, o = tx.update(grad(p, pairs, temperature), o, p)
                return optax.apply_updates(p, updates), o

            params, opt = jax.lax.fori_loop(0, check_every, inner, (params, opt))
            return params, opt, step + check_every, all_retrievable(params["q"], params["d"],
                                                                    pairs)

        def running(carry):
            return jnp.logical_and(~carry[3], carry[2] < max_steps)

        init = (params, tx.init(params), 0, all_retrievable(params["q"], params["d"], pairs))
        _, _, steps, solved = jax.lax.while_loop(running, block, init)
        return solved, steps

    return jax.vmap(one)(keys)


def solvable(n: int, dim: int, *, restarts: int = 2, max_steps: int = 4000,
             check_every: int = 100, lr: float = 0.05, temperature: float = 0.1,
             seed: int = 0, vectors: int = 1) -> bool:
    """Whether free ``dim``-dimensional embeddings (``vectors`` a text, MaxSim when more than
    one) make every top-2 subset of ``n`` documents retrievable, by any of ``restarts``
    optimisations (Adam, ``max_steps`` at most). Time ``O(max_steps n^3 vectors^2 dim)``."""
    if n < 3:
        return True
    keys = jax.random.split(jax.random.PRNGKey(seed), restarts)
    solved, _ = _solve(keys, jnp.asarray(top2_pairs(n)), n=n, dim=dim, max_steps=max_steps,
                       check_every=check_every, lr=lr, temperature=temperature,
                       vectors=vectors)
    return bool(np.any(np.asarray(solved)))


def critical_n(dim: int, *, lower: int = 3, **options) -> int:
    """The largest ``n`` for which :func:`solvable` holds at ``dim``: doubling from ``lower``
    until a failure, then bisection (assumes solvability is monotone in ``n``)."""
    lo = max(lower, 3)
    if not solvable(lo, dim, **options):
        return lo - 1
    hi = lo * 2
    while solvable(hi, dim, **options):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if solvable(mid, dim, **options) else (lo, mid)
    return lo


def critical_n_curve(dims: Sequence[int], *, progress: bool = True, **options
                     ) -> dict[int, int]:
    """``{d: critical n}``; each search starts from the previous dimension's answer."""
    from tqdm.auto import tqdm
    out, lower = {}, 3
    bar = tqdm(sorted(dims), desc="critical n", unit="dim", disable=not progress)
    for d in bar:
        out[d] = critical_n(d, lower=lower, **options)
        lower = out[d]
        bar.set_postfix(d=d, critical_n=out[d])
    return out
