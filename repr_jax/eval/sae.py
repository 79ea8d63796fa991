"""Sparse-autoencoder quality on the evaluation inputs: how much of them the SAE reconstructs and
how its latents fire (sae-lens's and SAEBench's core numbers).

Rows, over the test split's ``N`` inputs ``x [N, D]``, their latents ``z [N, L]`` (the
representation: ``embed``) and reconstructions ``x_hat [N, D]`` (the model's ``reconstruct``):

* ``fvu``: the fraction of variance unexplained over the whole set, ``sum ||x - x_hat||^2 /
  sum ||x - mean x||^2`` (``1 - explained variance``; :func:`repr_jax.objectives.sae.fvu` on the
  set). Its interval resamples examples with the centring kept at the full set's mean (the
  resample's own mean would move the denominator by O(1/N)).
* ``l0``: the mean number of nonzero latents per input, with its interval.
* ``dead_fraction``: latents that never fire on the ``N`` inputs (a set statistic: no interval).
* ``dense_fraction``: latents firing on more than ``dense_threshold`` (10%) of the inputs.

And what the SAE keeps downstream, when its inputs are an activation store whose model is at
hand (``downstream``, given by the run: :mod:`repr_jax.train.splice`): the model's retrieval
nDCG@10, next-token cross-entropy (a decoder LM) or probe accuracy (a labelled image set) with
the SAE's reconstruction spliced in at the store's layer, clean, and with the layer zero- and
mean-ablated, each with its interval, and the share recovered (``ndcg@10_spliced``,
``ce_recovered``...; ``eval.sae.downstream=False`` leaves them out).

A representation that does not reconstruct (raw inputs, any method but ``sae``) gives no rows.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import config, static
from repr_jax.eval.base import Embedder, Evaluator
from repr_jax.eval.stats import with_ci


@jax.jit
def sae_statistics(x_NxD: jax.Array, x_hat_NxD: jax.Array, z_NxL: jax.Array,
                   mean_D: jax.Array | None = None, valid_N: jax.Array | None = None
                   ) -> dict[str, jax.Array]:
    """Per-example ``resid`` ``||x - x_hat||^2``, ``centred`` ``||x - mean||^2`` and ``l0``
    ``[N]``, and each latent's ``fired`` count ``[L]`` (rows where it is nonzero). ``mean_D``:
    the centre (default the rows' own mean; a chunk of a set passes the set's); ``valid_N``: the
    rows ``fired`` counts (default all; a padded batch's padding is not). Time
    O(N·(D + L)), memory O(N·(D + L)).

    >>> x = jnp.array([[1.0, 0.0], [0.0, 2.0]])
    >>> s = sae_statistics(x, x, jnp.array([[1.0, 0.0], [0.0, 0.0]]))
    >>> s["resid"].tolist(), s["l0"].tolist(), s["fired"].tolist()
    ([0.0, 0.0], [1.0, 0.0], [1, 0])
    """
    x_NxD = x_NxD.astype(jnp.float32)
    mean_D = jnp.mean(x_NxD, axis=0) if mean_D is None else mean_D
    fires_NxL = z_NxL != 0
    counted_NxL = fires_NxL if valid_N is None else fires_NxL & valid_N[:, None]
    return {"resid": jnp.sum((x_NxD - x_hat_NxD.astype(jnp.float32)) ** 2, axis=1),
            "centred": jnp.sum((x_NxD - mean_D[None, :]) ** 2, axis=1),
            "l0": jnp.sum(fires_NxL, axis=1).astype(jnp.float32),
            "fired": jnp.sum(counted_NxL, axis=0, dtype=jnp.int32)}


def variance_ratio(resid_N: jax.Array, centred_N: jax.Array) -> jax.Array:
    """``sum resid / sum centred``: the FVU of a set (or of a resample of its rows). Scalar."""
    return jnp.sum(resid_N) / jnp.sum(centred_N)


@config
class SAEOptions:
    """``eval.sae.*``: the options of :class:`SAE`."""
    dense_threshold: float = static(0.1, "[0,1)", "a latent firing on more than this fraction of "
                                                  "the inputs is dense")
    downstream: bool = static(True, doc="also splice the SAE into its activations' model: "
                                        "retrieval, cross-entropy or probe rows, clean / "
                                        "spliced / ablated")
    max_queries: int = static(500, ">0", "downstream retrieval: judged queries sampled")
    max_corpus: int = static(5000, ">0", "downstream retrieval: documents searched (the "
                                         "queries' relevant ones, then random others)")
    max_texts: int = static(500, ">0", "downstream cross-entropy: texts; probe: examples of "
                                       "each split")


class SAE(Evaluator):
    """Sparse-autoencoder quality (FVU, L0, dead and dense latents) of a model that reconstructs
    its inputs, on the test split.

    Cost (N test inputs of width D, L latents, R resamples): time O(N·D·L) for the latents and
    the reconstruction (two encoder passes, a batch at a time) plus O(R·N) for the intervals;
    memory O(B·(D + L) + N + L) for batches of B (:meth:`statistics`)."""

    name = "sae"
    options = SAEOptions

    def __init__(self, embedder: Embedder, *, dense_threshold: float = 0.1,
                 bootstrap: int = 1000, downstream: bool | Callable = True,
                 max_queries: int = 500, max_corpus: int = 5000, max_texts: int = 500):
        """``downstream``: a callable ``(reconstruct_fn, variables) -> rows`` (the run's
        :class:`repr_jax.train.splice.Host` ``.rows``) or a bool (no host: no downstream rows);
        the ``max_*`` options are the host's, given to it by the run."""
        super().__init__(embedder)
        self.dense_threshold, self.bootstrap = dense_threshold, bootstrap
        self.downstream = downstream if callable(downstream) else None

    def run(self, variables: Any) -> Iterator[tuple[str, float]]:
        if not self.embedder.has_reconstruction:
            return
        x = self.embedder.splits["test"]["x"]
        s = self.statistics(variables, x)
        yield "fvu", with_ci((s["resid"], s["centred"]), variance_ratio,
                             bootstrap=self.bootstrap)
        yield "l0", with_ci(s["l0"], bootstrap=self.bootstrap)
        rate_L = s["fired"] / len(x)
        yield "dead_fraction", float(np.mean(rate_L == 0))
        yield "dense_fraction", float(np.mean(rate_L > self.dense_threshold))
        if self.downstream is not None:
            yield from self.downstream(self.embedder.function("reconstruct"), variables)

    def statistics(self, variables: Any, x) -> dict[str, np.ndarray]:
        """:func:`sae_statistics` of the whole split, a batch at a time: the set's mean first
        (one pass over ``x``), then each batch's latents and reconstruction, kept only as the
        per-example numbers ``[N]`` and the firing counts ``[L]`` — memory O(B·(D + L) + N + L),
        not the ``[N, L]`` latents (1.45 GB for 88,600 vectors of 4,096 latents)."""
        n, bs = len(x), self.embedder.batch_for(x)
        chunks = (lambda: x.chunks(bs)) if callable(getattr(x, "chunks", None)) else (
            lambda: (x[i:i + bs] for i in range(0, n, bs)))
        total_D = sum(np.asarray(c, np.float64).reshape(len(c), -1).sum(axis=0)
                      for c in chunks())
        mean_D = jnp.asarray(total_D / n, jnp.float32)
        encode = jax.jit(self.embedder.function("x"))
        decode = jax.jit(self.embedder.function("reconstruct"))
        out = {k: np.empty(n, np.float32) for k in ("resid", "centred", "l0")}
        fired_L, start = 0, 0
        for chunk in chunks():
            rows = len(chunk)
            x_BxD = np.asarray(chunk, np.float32).reshape(rows, -1)
            if rows < bs:  # one shape: one compilation
                x_BxD = np.concatenate([x_BxD, np.zeros((bs - rows, x_BxD.shape[1]),
                                                        np.float32)])
            x_BxD = jnp.asarray(x_BxD)
            b = sae_statistics(x_BxD, decode(variables, x_BxD), encode(variables, x_BxD), mean_D,
                               jnp.arange(bs) < rows)
            for k in out:
                out[k][start:start + rows] = np.asarray(b[k][:rows])
            fired_L = fired_L + np.asarray(b["fired"], np.int64)
            start += rows
        return dict(out, fired=np.asarray(fired_L))
