"""Late-interaction search: every document token's vector on disk, exact MaxSim top-k.

:func:`build_index` writes a corpus's token vectors (only the tokens that take part in MaxSim) to
memory-mapped ``.npy`` files — float16, or int8 with one float32 scale a vector (symmetric:
``x ≈ q * scale``, ``scale = max|x| / 127``) — with each document's offset; :func:`search` scores
every query against every document tile by tile and keeps the best ``k`` (ColBERT's exact,
un-pruned search: PLAID's centroid pruning is not implemented). The
:class:`LateInteraction` evaluator runs it on the test pairs and each retrieval set, and reports
the index's bytes per document beside the metrics.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import files
from repr_jax.config import config, static
from repr_jax.eval.base import TOKEN_BUCKET, Evaluator, trim_padding
from repr_jax.eval.retrieval import metric_cutoffs, topk_metrics, without
from repr_jax.eval.stats import with_ci

STORAGES = ("float16", "int8")
SCORE_ELEMENTS = 1 << 25  # query tokens x document tokens scored at once (128 MiB of float32)
PAIR_DOCS = 1024  # distinct documents embedded at once when scoring pairs


def maxsim(q_BxTqxD, q_mask, d_NxTdxD, d_mask) -> jax.Array:
    """``[B, N]``: ``sum_i max_j q_i . d_j`` over each query's valid tokens ``i`` and each
    document's valid tokens ``j`` (a document without valid tokens scores 0 a token); time
    ``O(B N Tq Td D)``, memory ``O(B N Tq Td)``. Vectors are
    unit length: a masked document token is given score -4 through one extra coordinate, so the
    ``[B, Tq, N, Td]`` scores need no masking pass (timed in bench/README)."""
    d = jnp.concatenate([jnp.where(d_mask[..., None], d_NxTdxD, 0.0),
                         jnp.where(d_mask, 0.0, -4.0)[..., None].astype(d_NxTdxD.dtype)], -1)
    q = jnp.concatenate([q_BxTqxD, jnp.ones(q_BxTqxD.shape[:-1] + (1,), q_BxTqxD.dtype)], -1)
    s = jnp.einsum("bqd,ntd->bqnt", q, d).max(axis=-1)
    s = jnp.where(d_mask.any(-1)[None, None, :], s, 0.0)
    return jnp.sum(jnp.where(q_mask[:, :, None], s, 0.0), axis=1)


def paired_maxsim(q_BxTqxD, q_mask, d_BxTdxD, d_mask) -> jax.Array:
    """``[B]``: MaxSim of query ``b`` with document ``b`` only. Time ``O(B Tq Td D)``."""
    s = jnp.einsum("bqd,btd->bqt", q_BxTqxD, d_BxTdxD)
    s = jnp.where(d_mask[:, None, :], s, -jnp.inf).max(axis=-1)
    s = jnp.where(jnp.isfinite(s), s, 0.0)
    return jnp.sum(jnp.where(q_mask, s, 0.0), axis=-1)


@dataclasses.dataclass(frozen=True)
class TokenIndex:
    """A corpus's token vectors ``[M, d]`` (float16, or int8 with ``scales [M]``) and each
    document's first row ``offsets [N + 1]``, memory-mapped from ``folder``."""
    vectors: np.ndarray
    offsets: np.ndarray
    scales: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        """Bytes on disk: vectors, scales and offsets."""
        return int(self.vectors.nbytes + self.offsets.nbytes
                   + (self.scales.nbytes if self.scales is not None else 0))

    def tile(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Documents ``start:stop`` as ``(vectors [n, W, d] float32, mask [n, W])``, ``W`` their
        longest token count rounded up to ``TOKEN_BUCKET``."""
        first, lengths = self.offsets[start:stop], np.diff(self.offsets[start:stop + 1])
        width = max(TOKEN_BUCKET, -(-int(lengths.max(initial=1)) // TOKEN_BUCKET) * TOKEN_BUCKET)
        mask = np.arange(width)[None, :] < lengths[:, None]
        lo, hi = int(first[0]), int(self.offsets[stop])
        # The tile's documents are one contiguous run of rows: one sequential read, then a
        # gather in memory (the padding points at the run's first row and is masked).
        block = np.asarray(self.vectors[lo:max(hi, lo + 1)], np.float32)
        if self.scales is not None:
            block *= np.asarray(self.scales[lo:max(hi, lo + 1)])[:, None]
        rows = np.where(mask, (first - lo)[:, None] + np.arange(width)[None, :], 0)
        return block[rows], mask


def open_index(folder: str | Path) -> TokenIndex:
    """The index :func:`build_index` wrote in ``folder``; a missing or damaged file is named."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "index.json").read_text())
        vectors = np.load(folder / "vectors.npy", mmap_mode="r")
        offsets = np.load(folder / "offsets.npy")
        scales = np.load(folder / "scales.npy", mmap_mode="r") if meta["storage"] == "int8" \
            else None
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{folder}: not a complete token index ({e})") from None
    if offsets[-1] > len(vectors) or meta.get("documents") != len(offsets) - 1:
        raise ValueError(f"{folder}: its offsets do not match its vectors (a damaged index)")
    return TokenIndex(vectors, offsets, scales)


@functools.lru_cache(maxsize=16)
def jitted(token_fn: Callable) -> Callable:
    """``jax.jit(token_fn)``, one per function object: every call of :func:`embed_tokens` (a
    chunk of :func:`score_pairs`, an evaluation) finds the shapes it compiled before."""
    return jax.jit(token_fn)


def build_index(token_fn: Callable, variables: Any, corpus, folder: str | Path, *,
                storage: str = "float16", pad_id: int = 0, batch_size: int = 128,
                progress: str = "") -> TokenIndex:
    """Embeds ``corpus`` (token-id rows) with ``token_fn(variables, ids) -> (vectors, mask)``
    and writes the kept vectors to ``folder`` (written beside it, in ``.<name>.<random>.partial``,
    and moved into place whole; one that a killed build left is removed with a warning).
    Cost: the encoder over the corpus; disk ``M d`` bytes (float16 ``2 M d``) for M kept tokens;
    memory one batch."""
    from tqdm.auto import tqdm
    if storage not in STORAGES:
        raise ValueError(f"unknown token storage {storage!r}; choose from {STORAGES}")
    folder = Path(folder)
    # written beside the folder under a name of its own, locked: a killed build's is removed
    with files.scratch_folder(folder.parent, prefix=f".{folder.name}.", suffix=".partial",
                              what="a partial token index") as partial:
        n = len(corpus)
        capacity = int(sum((np.asarray(corpus[i:i + 4096]) != pad_id).sum()
                           for i in range(0, n, 4096)))  # non-padding tokens: an upper bound
        fn = jitted(token_fn)
        offsets = np.zeros(n + 1, np.int64)
        vectors = scales = None
        row = 0
        for start in tqdm(range(0, n, batch_size), desc=progress or "index", unit="batch",
                          leave=False, dynamic_ncols=True, disable=not progress):
            ids = trim_padding(np.asarray(corpus[start:start + batch_size]), pad_id)
            real = len(ids)
            if real < batch_size:  # one shape for every batch
                ids = np.concatenate([ids, np.full((batch_size - real,) + ids.shape[1:], pad_id,
                                                   ids.dtype)])
            vecs, mask = (np.asarray(a) for a in fn(variables, jnp.asarray(ids)))
            if vectors is None:
                vectors = np.lib.format.open_memmap(
                    partial / "vectors.npy", mode="w+", shape=(max(capacity, 1), vecs.shape[-1]),
                    dtype=np.float16 if storage == "float16" else np.int8)
                if storage == "int8":
                    scales = np.lib.format.open_memmap(
                        partial / "scales.npy", mode="w+", shape=(max(capacity, 1),),
                        dtype=np.float32)
            for i in range(real):
                kept = vecs[i][mask[i]]
                if row + len(kept) > len(vectors):
                    raise ValueError("the model keeps more token vectors than the corpus has "
                                     "non-padding tokens")
                if storage == "float16":
                    vectors[row:row + len(kept)] = kept
                else:
                    scale = np.maximum(np.abs(kept).max(axis=1), 1e-12) / 127.0
                    vectors[row:row + len(kept)] = np.round(kept / scale[:, None]).astype(np.int8)
                    scales[row:row + len(kept)] = scale
                row += len(kept)
                offsets[start + i + 1] = row
        for array in (vectors, scales):
            if array is not None:
                array.flush()
        np.save(partial / "offsets.npy", offsets)
        (partial / "index.json").write_text(json.dumps({"storage": storage, "documents": n,
                                                        "vectors": row}))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)
    return open_index(folder)


_tile_scores = jax.jit(maxsim)


def search(index: TokenIndex, q_QxTqxD, q_mask, *, k: int = 10, tile: int = 256,
           progress: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Exact MaxSim top-``k``: ``(scores [Q, k], indices [Q, k])``, best first, ties to the lower
    index. Time ``O(Q Tq M d)`` for M stored vectors; memory one tile of ``tile`` documents and
    at most ``SCORE_ELEMENTS`` query-by-document token scores at once."""
    from tqdm.auto import tqdm
    q = jnp.asarray(q_QxTqxD, jnp.float32)
    qm = jnp.asarray(q_mask)
    nq, tq = q.shape[:2]
    k = min(k, len(index))
    best_s = jnp.full((nq, 0), -jnp.inf)
    best_i = jnp.zeros((nq, 0), jnp.int32)
    for start in tqdm(range(0, len(index), tile), desc=progress or "maxsim search",
                      unit="tile", leave=False, dynamic_ncols=True, disable=not progress):
        stop = min(start + tile, len(index))
        d, dm = index.tile(start, stop)
        if stop - start < tile:  # one shape per width: pad the last tile with empty documents
            d = np.concatenate([d, np.zeros((tile - (stop - start),) + d.shape[1:], d.dtype)])
            dm = np.concatenate([dm, np.zeros((tile - (stop - start), dm.shape[1]), bool)])
        chunk = max(1, SCORE_ELEMENTS // (tq * tile * d.shape[1]))
        s = jnp.concatenate([_tile_scores(q[i:i + chunk], qm[i:i + chunk], jnp.asarray(d),
                                          jnp.asarray(dm)) for i in range(0, nq, chunk)])
        s = jnp.where(jnp.arange(tile)[None, :] < stop - start, s, -jnp.inf)
        ids = jnp.broadcast_to(jnp.arange(start, start + tile, dtype=jnp.int32), s.shape)
        all_s = jnp.concatenate([best_s, s], axis=1)
        all_i = jnp.concatenate([best_i, ids], axis=1)
        best_s, pos = jax.lax.top_k(all_s, min(k, all_s.shape[1]))
        best_i = jnp.take_along_axis(all_i, pos, axis=1)
    return np.asarray(best_s), np.asarray(best_i)


def embed_tokens(token_fn: Callable, variables: Any, ids, *, batch_size: int = 128,
                 pad_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(vectors [Q, T, d], mask [Q, T])`` of token-id rows in memory (batched). With
    ``pad_id``, each batch is cut to its longest row and the last one padded to ``batch_size``
    rows (few compiled shapes). Time: the encoder on ``Q`` texts; memory ``O(Q T d)``."""
    fn = jitted(token_fn)
    outs = []
    for i in range(0, len(ids), batch_size):
        batch = np.asarray(ids[i:i + batch_size])
        real = len(batch)
        if pad_id is not None:
            batch = trim_padding(batch, pad_id)
            if real < batch_size:
                batch = np.concatenate([batch, np.full((batch_size - real,) + batch.shape[1:],
                                                       pad_id, batch.dtype)])
        vecs, mask = fn(variables, jnp.asarray(batch))
        outs.append((np.asarray(vecs)[:real], np.asarray(mask)[:real]))
    width = max(o[0].shape[1] for o in outs)  # query expansion or trimming: widths differ
    vecs = np.concatenate([np.pad(v, ((0, 0), (0, width - v.shape[1]), (0, 0)))
                           for v, _ in outs])
    mask = np.concatenate([np.pad(m, ((0, 0), (0, width - m.shape[1]))) for _, m in outs])
    return vecs, mask


_paired_scores = jax.jit(paired_maxsim)


def score_pairs(query_fn: Callable, doc_fn: Callable, variables: Any, queries, docs,
                q_of: np.ndarray, d_of: np.ndarray, *, pad_id: int, batch_size: int = 128,
                progress: str = "") -> np.ndarray:
    """``[P]``: MaxSim of query ``queries[q_of[p]]`` with document ``docs[d_of[p]]`` (token-id
    rows; ``query_fn`` / ``doc_fn`` as :func:`build_index`'s ``token_fn``): each query and
    document used is embedded once, where a pair score function (``rerank.score_pairs``) runs
    the encoder once a pair. Documents go shortest first, ``PAIR_DOCS`` at a time. Time: the
    encoder over the distinct texts, then ``O(P Tq Td d)``; memory: the used queries' vectors
    and ``PAIR_DOCS`` documents' vectors."""
    from tqdm.auto import tqdm
    q_of, d_of = np.asarray(q_of, np.int64), np.asarray(d_of, np.int64)
    out = np.zeros(len(d_of), np.float32)
    if not len(d_of):
        return out
    q_used, q_at = np.unique(q_of, return_inverse=True)
    q, qm = embed_tokens(query_fn, variables, np.asarray(queries[q_used]),
                         batch_size=batch_size, pad_id=pad_id)
    d_used, d_at = np.unique(d_of, return_inverse=True)
    d_ids = np.asarray(docs[d_used])
    by_length = np.argsort((d_ids != pad_id).sum(axis=1), kind="stable")
    rank = np.empty_like(by_length)
    rank[by_length] = np.arange(len(by_length))
    pair_order = np.argsort(rank[d_at], kind="stable")  # pairs by their document's place
    bounds = np.searchsorted(rank[d_at][pair_order], np.arange(0, len(d_used) + PAIR_DOCS,
                                                                PAIR_DOCS))
    for c, start in enumerate(tqdm(range(0, len(d_used), PAIR_DOCS), desc=progress or "pairs",
                                   unit="chunk", leave=False, dynamic_ncols=True,
                                   disable=not progress)):
        d, dm = embed_tokens(doc_fn, variables, d_ids[by_length[start:start + PAIR_DOCS]],
                             batch_size=batch_size, pad_id=pad_id)
        rows = pair_order[bounds[c]:bounds[c + 1]]
        for i in range(0, len(rows), batch_size):
            part = rows[i:i + batch_size]
            qi, di = q_at[part], rank[d_at[part]] - start
            pad = batch_size - len(part)
            if pad:  # one shape for every batch of a chunk
                qi, di = np.pad(qi, (0, pad), mode="edge"), np.pad(di, (0, pad), mode="edge")
            s = _paired_scores(jnp.asarray(q[qi]), jnp.asarray(qm[qi]), jnp.asarray(d[di]),
                               jnp.asarray(dm[di]))
            out[part] = np.asarray(s, np.float32)[:len(part)]
    return out


@config
class LateInteractionOptions:
    """``eval.late_interaction.*``: the options of :class:`LateInteraction`."""
    metrics: tuple[str, ...] = static(("recall@1", "recall@10", "mrr@10", "ndcg@10"),
                                      doc="metric@k, metric in recall | precision | mrr | ndcg "
                                          "| map")
    storage: str = static("float16", STORAGES, "how token vectors are stored on disk")
    tile: int = static(256, ">0", "documents scored together")
    max_queries: int = static(2000, ">0", "retrieval over the test pairs: first N pairs")

    def _validate(self):
        metric_cutoffs(self.metrics, option="eval.late_interaction.metrics")


class LateInteraction(Evaluator):
    """Exact MaxSim search (ColBERT) on the test pairs and each retrieval set, for a model with a
    vector per token; the metrics with bootstrap intervals, and ``bytes_per_doc`` of the index.

    Cost (Q queries of Tq tokens, M stored document tokens of width d): the encoder over the
    corpus, search ``O(Q Tq M d)`` time; memory one tile plus the on-disk index (``2 M d``
    bytes as float16, ``M (d + 4)`` as int8)."""

    name = "late_interaction"
    options = LateInteractionOptions

    def __init__(self, embedder, *, metrics: Sequence[str] = ("recall@1", "recall@10", "mrr@10",
                                                             "ndcg@10"),
                 storage: str = "float16", tile: int = 256, max_queries: int = 2000,
                 bootstrap: int = 1000):
        super().__init__(embedder)
        self.metrics, self.storage, self.tile = tuple(metrics), storage, tile
        self.max_queries, self.bootstrap = max_queries, bootstrap
        ks = metric_cutoffs(self.metrics, option="eval.late_interaction.metrics")
        if storage not in STORAGES:
            raise ValueError(f"unknown token storage {storage!r}; choose from {STORAGES}")
        self.ks = list(ks)

    def _tasks(self):
        test = self.embedder.splits.get("test", {})
        if "x_pos" in test:
            n = min(self.max_queries, len(test["x"]))
            yield "", test["x"][:n], test["x_pos"][:n], np.eye(n, dtype=np.int8), None
        for s in self.embedder.sets("retrieval"):
            if s.queries.dtype.kind in "iu":
                yield f"{s.name}/", s.queries, s.corpus, s.qrels, s.exclude

    def run(self, variables):
        fns = getattr(self.embedder, "token_fns", None)
        if not fns:
            return  # no vector per token (a single-vector model, the raw inputs)
        pad_id = self.embedder.pad_id if self.embedder.pad_id is not None else 0
        # under the run folder where the embedder has one (a killed run's index is removed there)
        scratch = getattr(self.embedder, "scratch_dir", None)
        for prefix, queries, corpus, qrels, exclude in self._tasks():
            with files.scratch_folder(scratch, prefix="repr_jax_tokens_",
                                      what="a token index") as tmp:
                index = build_index(fns["doc"], variables, corpus, Path(tmp) / "index",
                                    storage=self.storage, pad_id=pad_id,
                                    progress=self.embedder.progress and f"index {prefix}")
                q, qm = embed_tokens(fns["query"], variables, queries)
                extra = int(exclude is not None)
                _, idx = search(index, q, qm, k=max(self.ks) + extra, tile=self.tile,
                                progress=self.embedder.progress and f"maxsim {prefix}")
                nbytes = index.nbytes
                del index
            if extra:
                idx = without(idx, exclude)
            per_q = topk_metrics(idx, qrels, self.ks, per_query=True)
            for m in self.metrics:
                yield prefix + m, with_ci(per_q[m], bootstrap=self.bootstrap)
            yield prefix + "bytes_per_doc", nbytes / len(corpus)
