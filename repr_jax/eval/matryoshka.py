"""Any evaluator per embedding prefix size: how much of the quality the first ``d`` dimensions keep
(the Matryoshka representation claim, Kusupati et al. 2022)."""

from __future__ import annotations

from typing import Any, Sequence

from repr_jax.eval.base import Embedder, Evaluator
from repr_jax.eval.layerwise import protocol_evaluator


def prefix_dims(dim: int, smallest: int = 8) -> tuple[int, ...]:
    """Powers of two from ``smallest`` below ``dim``, then ``dim`` itself."""
    dims, d = [], smallest
    while d < dim:
        dims.append(d)
        d *= 2
    return tuple(dims) + (dim,)


class Matryoshka(Evaluator):
    """Runs ``protocol`` (an evaluator name) on every embedding prefix ``[:, :d]``; yields
    ``dim_{d}/{metric}``. ``dims=()`` takes powers of two up to the embedding width; dims wider than
    a representation (a reference row's raw inputs, say) are skipped for it."""

    name = "matryoshka"

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
