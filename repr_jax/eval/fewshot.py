"""Few-shot linear probes: n labelled examples per class, several random draws, mean and spread.

As big_vision's ``fewshot_lsr`` evaluator: a closed-form ridge classifier on a few examples per class,
scored on the full test split; each (shots, seed) draws its own examples.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from repr_jax.config import config, static
from repr_jax.eval.base import Embedder, Evaluator
from repr_jax.eval.linear_probe import linear_probe
from repr_jax.eval.stats import mean_and_spread


def sample_shots(labels: np.ndarray, shots: int, seed: int) -> np.ndarray:
    """Indices of ``shots`` examples of every class (fewer for a class that has fewer)."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    return np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:shots]
                           for c in np.unique(labels)])


def fewshot(train_x, train_y, test_x, test_y, *, shots: Sequence[int] = (1, 5, 10, 25),
            seeds: int = 5, kind: str = "ridge", l2: float = 1.0) -> dict[str, float]:
    """Test accuracy of ``kind`` probes fit on ``n`` examples per class, over ``seeds`` draws.

    ``l2`` is fixed (there is no data to choose it on); for ridge it is relative to the mean
    eigenvalue of ``X^T X`` of the few examples (see :func:`linear_probe`).
    Returns ``{"{n}shot": mean accuracy, "{n}shot_std": std over seeds}`` for each ``n``.
    """
    train_y = np.asarray(train_y)
    num_classes = int(max(train_y.max(), np.asarray(test_y).max())) + 1
    out = {}
    for n in shots:
        accs = []
        for seed in range(seeds):
            idx = sample_shots(train_y, n, seed)
            accs.append(linear_probe(np.asarray(train_x)[idx], train_y[idx], test_x, test_y,
                                     kind=kind, l2=l2, num_classes=num_classes)["accuracy"])
        out[f"{n}shot"], out[f"{n}shot_std"] = mean_and_spread(accs)
    return out


@config
class FewShotOptions:
    """``eval.fewshot.*``: the options of :class:`FewShot` (its keyword arguments)."""
    shots: tuple[int, ...] = static((1, 5, 10, 25), "positive counts", "examples per class")
    seeds: int = static(5, ">0", "draws per shot count")


class FewShot(Evaluator):
    """Few-shot probes from the ``train`` split, scored on ``test``.

    Cost per (shots, draw), ``n = shots x classes`` rows of D dims, Q test rows: the dual ridge,
    time ``O(n^2 D + n^3 + Q D C)``, memory ``O(Q D + n^2)``; rows padded to a few sizes, so each
    shot count compiles once."""

    name = "fewshot"
    options = FewShotOptions

    def __init__(self, embedder: Embedder, *, shots: Sequence[int] = (1, 5, 10, 25),
                 seeds: int = 5, **options: Any):
        super().__init__(embedder)
        self.shots, self.seeds, self.options = tuple(shots), seeds, options

    def run(self, variables) -> Iterator[tuple[str, float]]:
        f = self.embedder(variables)
        yield from fewshot(*f["train"], *f["test"], shots=self.shots, seeds=self.seeds,
                           **self.options).items()
