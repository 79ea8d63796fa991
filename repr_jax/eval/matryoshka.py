"""Any evaluator per embedding prefix size: how much of the quality the first ``d`` dimensions keep
(the Matryoshka representation claim, Kusupati et al. 2022)."""

from __future__ import annotations

from typing import Any, Sequence

import jax.numpy as jnp

from repr_jax.config import config, static
from repr_jax.eval.base import Embedder, Evaluator
from repr_jax.eval.layerwise import protocol_evaluator
from repr_jax.eval.retrieval import rerank, retrieve


def prefix_dims(dim: int, smallest: int = 8) -> tuple[int, ...]:
    """Powers of two from ``smallest`` below ``dim``, then ``dim`` itself."""
    dims, d = [], smallest
    while d < dim:
        dims.append(d)
        d *= 2
    return tuple(dims) + (dim,)


@config
class MatryoshkaOptions:
    """``eval.matryoshka.*``: the options of :class:`Matryoshka` (its keyword arguments)."""
    protocol: str = static("linear_probe", doc="the evaluator run on every prefix (with its own "
                                               "section's options)")
    dims: tuple[int, ...] = static((), doc="prefix widths; () = method.matryoshka_dims, or powers "
                                           "of two")


class Matryoshka(Evaluator):
    """Runs ``protocol`` (an evaluator name) on every embedding prefix ``[:, :d]``; yields
    ``dim_{d}/{metric}``. ``dims=()`` takes powers of two up to the embedding width; dims wider than
    a representation (a reference row's raw inputs, say) are skipped for it.

    Cost: the protocol's, once per prefix (each at its width d)."""

    name = "matryoshka"
    options = MatryoshkaOptions

    def __init__(self, embedder: Embedder, *, dims: Sequence[int] = (),
                 protocol: str = "linear_probe", **options: Any):
        super().__init__(embedder)
        self.dims, self.protocol = tuple(dims), protocol_evaluator(protocol)
        self.options = options

    def run(self, variables):
        width = self.embedder.embed(variables, self.embedder.splits["test"]["x"][:1]).shape[1]
        dims = [d for d in self.dims if 0 < d <= width]
        if self.dims and not dims:
            raise ValueError(f"matryoshka dims {list(self.dims)} are all outside the embedding "
                             f"width {width}")
        for d in dims or prefix_dims(width):
            view = self.embedder.view(lambda f, d=d: f[:, :d])
            for metric, value in self.protocol(view, **self.options).run(variables):
                yield f"dim_{d}/{metric}", value


def adaptive_retrieve(queries, corpus, *, shortlist_dim: int, shortlist_k: int, k: int = 10,
                      similarity: str = "cosine") -> tuple[Any, dict[str, float]]:
    """Adaptive retrieval with a Matryoshka embedding (Kusupati et al. 2022, Sec. 4.3): a shortlist
    of ``shortlist_k`` candidates by the first ``shortlist_dim`` dimensions, reranked by the full
    embedding. Returns ``(indices [Q, k], work)`` where ``work`` counts the multiply-adds per query
    of the two stages and of exact full-width search (``{"shortlist", "rerank", "adaptive",
    "full"}``).

    >>> import numpy as np
    >>> c = np.eye(4, 8) + 0.1; q = c[[2, 0]]
    >>> idx, work = adaptive_retrieve(q, c, shortlist_dim=4, shortlist_k=2, k=1)
    >>> idx.tolist(), work["adaptive"], work["full"]
    ([[2], [0]], 32, 32)
    """
    queries, corpus = jnp.asarray(queries), jnp.asarray(corpus)
    n, dim = corpus.shape
    if not 0 < shortlist_dim <= dim or not k <= shortlist_k <= n:
        raise ValueError(f"adaptive retrieval needs 0 < shortlist_dim <= {dim} and "
                         f"k={k} <= shortlist_k <= {n}; got {shortlist_dim}, {shortlist_k}")
    _, short = retrieve(queries[:, :shortlist_dim], corpus[:, :shortlist_dim], k=shortlist_k,
                        similarity=similarity)
    _, idx = rerank(queries, corpus, short, k=k, similarity=similarity)
    work = {"shortlist": n * shortlist_dim, "rerank": shortlist_k * dim}
    work.update(adaptive=work["shortlist"] + work["rerank"], full=n * dim)
    return idx, work
