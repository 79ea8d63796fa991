"""Splits read by index from their array_record files, and work done ahead in background threads.

A :class:`SourceSplit` is what :func:`repr_jax.data.load` returns for a split too large to hold
(``data.in_memory_mb``): a read-only mapping of feature names to :class:`Column` s that read, decode
(PNG/JPEG, via TFDS) and convert rows only when indexed. It holds the TFDS data source and, for a
subset, an index map — never the examples. Everything that takes a split's arrays (batches, features
for evaluation, subsets) takes one of these too, through :func:`take` and :func:`subset`.

:func:`prefetched` runs a function of consecutive integers (a step's batch, a chunk of rows) ahead of
the consumer on grain's thread pool, so reading and decoding overlap the device step.
"""

from __future__ import annotations

import collections.abc
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from repr_jax import files

Arrays = dict[str, np.ndarray]


def convert(records: Sequence[dict[str, Any]], input_key: str, label_key: str) -> Arrays:
    """Stacks TFDS records into arrays: every array feature, the supervised keys renamed ``x`` and
    ``label``; images (uint8) become float32 in [0, 1], integer inputs int32 token ids, strings stay
    strings (tokenised by the loader)."""
    keys = [k for k, v in records[0].items()
            if isinstance(v, (np.ndarray, np.generic, int, float, bytes, str))]
    out = {k: np.stack([np.asarray(r[k]) for r in records]) for k in keys}
    x = out.pop(input_key)
    if x.dtype.kind in "OSU":
        out["x"] = x
    elif x.dtype == np.uint8:
        out["x"] = x.astype(np.float32) / 255.0
    elif np.issubdtype(x.dtype, np.integer):
        out["x"] = x.astype(np.int32)
    else:
        out["x"] = x.astype(np.float32)
    out["label"] = out.pop(label_key).astype(np.int32)
    return out


class SourceSplit(collections.abc.Mapping):
    """A split of a prepared TFDS dataset, read by index (``take``), never held in memory.

    ``split["x"]`` is a :class:`Column` (``len``, ``shape``, ``dtype``, ``column[idx]`` reads those
    rows); ``indices`` (optional) maps this split's rows to the source's, for subsets.
    """

    def __init__(self, builder, split: str, *, input_key: str, label_key: str,
                 indices: np.ndarray | None = None, _sources=None):
        self.builder, self.split = builder, split
        self.input_key, self.label_key = input_key, label_key
        self.indices = indices
        if _sources is None:
            import tensorflow_datasets as tfds
            _sources = (builder.as_data_source(split),
                        # labels alone: the images are not decoded (SkipDecoding keeps the bytes)
                        builder.as_data_source(split, decoders={
                            input_key: tfds.decode.SkipDecoding()}))
        self._sources = _sources
        from absl import logging as absl_logging
        level = absl_logging.get_verbosity()
        absl_logging.set_verbosity(absl_logging.ERROR)  # TFDS's one-time "OpenCV is not installed"
        try:
            first = self.take([0])
        finally:
            absl_logging.set_verbosity(level)
        self._columns = {k: Column(self, k, v.shape[1:], v.dtype) for k, v in first.items()}

    def __len__(self) -> int:
        return len(self._sources[0]) if self.indices is None else len(self.indices)

    def __getitem__(self, key: str) -> "Column":
        return self._columns[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def _source_rows(self, idx) -> list[int]:
        idx = np.asarray(idx, np.int64).reshape(-1)
        n = len(self)
        if len(idx) and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"rows {idx.min()}..{idx.max()} of a split of {n}")
        idx = idx % n if n else idx
        return (idx if self.indices is None else self.indices[idx]).tolist()

    def take(self, idx, *, labels_only: bool = False) -> Arrays:
        """Rows ``idx`` (ints), read, decoded and converted (see :func:`convert`)."""
        rows = self._source_rows(idx)
        if not rows:
            return {k: np.zeros((0,) + c.row_shape, c.dtype) for k, c in self._columns.items()}
        if labels_only:
            records = self._read(self._sources[1], rows)
            return {"label": np.asarray([r[self.label_key] for r in records], np.int32)}
        return convert(self._read(self._sources[0], rows), self.input_key, self.label_key)

    def read_all(self, chunk: int = 1 << 16) -> Arrays:
        """Every row as arrays, read ``chunk`` rows at a time into arrays allocated once (one
        ``take`` of every row would hold all decoded records beside the arrays: 4x the split).
        Time and memory ``O(rows x row size)``."""
        n = len(self)
        out: Arrays = {}
        for start in range(0, n, chunk):
            part = self.take(np.arange(start, min(n, start + chunk)))
            for k, v in part.items():
                if k not in out:
                    out[k] = np.empty((n,) + v.shape[1:], v.dtype)
                elif v.dtype != out[k].dtype:  # strings wider than the first chunk's
                    out[k] = out[k].astype(np.promote_types(out[k].dtype, v.dtype))
                out[k][start:start + len(v)] = v
        return out or self.take(np.arange(0))

    def _read(self, source, rows: list[int]):
        try:
            return source.__getitems__(rows)
        except Exception as e:  # noqa: BLE001 - Riegeli's 40-line errors name no file
            raise DataCorrupted(self._locate(source, rows, e)) from None

    def _locate(self, source, rows: list[int], error: Exception) -> str:
        """The file and record of the first of ``rows`` that cannot be read, in one line."""
        info = self.builder.info.splits[self.split]
        ends = np.cumsum(info.shard_lengths)
        for row in rows:
            try:
                source.__getitems__([row])
            except Exception as e:  # noqa: BLE001
                shard = int(np.searchsorted(ends, row, side="right"))
                start = int(ends[shard - 1]) if shard else 0
                path = Path(self.builder.data_dir) / info.filenames[shard]
                return (f"{path}: record {row - start} (row {row} of split {self.split!r}) "
                        f"cannot be read: {files.first_line(e)}; prepare the dataset again "
                        f"(delete {self.builder.data_dir})")
        return f"split {self.split!r} of {self.builder.name}: {files.first_line(error)}"

    def subset(self, idx) -> "SourceSplit":
        """The rows ``idx`` of this split, in that order (no data is read)."""
        return SourceSplit(self.builder, self.split, input_key=self.input_key,
                           label_key=self.label_key,
                           indices=np.asarray(self._source_rows(idx), np.int64),
                           _sources=self._sources)

    @property
    def nbytes(self) -> int:
        """Bytes the split would take as arrays."""
        return sum(c.nbytes for c in self._columns.values())

    def __repr__(self) -> str:
        return (f"SourceSplit({self.builder.name!r}, {self.split!r}, {len(self)} rows, "
                f"{', '.join(f'{k}{c.row_shape}' for k, c in self._columns.items())})")


class DataCorrupted(ValueError):
    """A stored record that cannot be read; the message (one line) names its file and record."""


class Column:
    """One feature of a :class:`SourceSplit`: indexing reads rows (int, slice, int array)."""

    def __init__(self, split: SourceSplit, key: str, row_shape: tuple[int, ...], dtype):
        self.split, self.key, self.row_shape, self.dtype = split, key, tuple(row_shape), dtype

    def __len__(self) -> int:
        return len(self.split)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self),) + self.row_shape

    @property
    def ndim(self) -> int:
        return 1 + len(self.row_shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize

    def __getitem__(self, key):
        rest = ()
        if isinstance(key, tuple):
            key, rest = key[0], key[1:]
        if isinstance(key, slice):
            rows = np.arange(len(self))[key]
        else:
            rows = np.asarray(key)
        out = self.split.take(rows.reshape(-1), labels_only=self.key == "label")[self.key]
        out = out.reshape(rows.shape + self.row_shape)
        return out[(slice(None),) * rows.ndim + rest] if rest else out

    def chunks(self, size: int, *, workers: int = 2) -> Iterator[np.ndarray]:
        """``self[i:i + size]`` for consecutive ``i``, read ahead by ``workers`` threads (what the
        evaluators' :class:`~repr_jax.eval.Embedder` iterates a streamed split with)."""
        it = prefetched(lambda i: self[i * size:(i + 1) * size], 0, -(-len(self) // size),
                        workers=workers)
        try:
            yield from it
        finally:
            it.close()

    def __array__(self, dtype=None, copy=None):
        """All rows, read in chunks (what a probe or metric over the whole split needs)."""
        del copy
        out = np.concatenate(list(self.chunks(4096))) if len(self) else self[:0]
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"Column({self.key!r}, shape={self.shape}, dtype={np.dtype(self.dtype).name})"


def take(split, idx) -> Arrays:
    """Rows ``idx`` of a split (``{name: array}`` or :class:`SourceSplit`) as arrays."""
    if isinstance(split, SourceSplit):
        return split.take(idx)
    return {k: v[idx] for k, v in split.items()}


def subset(split, idx):
    """The rows ``idx`` of a split, of the same kind (a streamed split stays streamed)."""
    if isinstance(split, SourceSplit):
        return split.subset(idx)
    return {k: v[idx] for k, v in split.items()}


def prefetched(fn: Callable[[int], Any], start: int, stop: int, *, workers: int,
               buffer: int = 0):
    """An iterator (with ``close()``) of ``fn(i)`` for ``i`` in ``[start, stop)``, in order, computed
    ahead by ``workers`` threads (grain's prefetch), up to ``buffer`` waiting (default twice that)."""
    import grain
    ds = grain.MapDataset.range(start, stop).map(fn)
    return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=workers,
                                                     prefetch_buffer_size=buffer or 2 * workers)))


class Prefetcher:
    """``fn(step)`` as a function of the step, computed ahead for consecutive steps: a call for the
    step after the last one takes the next prefetched result; any other step restarts the read-ahead
    there (the training loop times how long each call blocks: its input wait)."""

    def __init__(self, fn: Callable[[int], Any], *, stop: int, workers: int, buffer: int = 0):
        self.fn, self.stop, self.workers, self.buffer = fn, stop, workers, buffer
        self._it: Iterator[Any] | None = None
        self._next = -1

    def __call__(self, step: int) -> Any:
        if not self.workers or step >= self.stop:
            return self.fn(step)
        if step != self._next or self._it is None:
            self.close()
            self._it = prefetched(self.fn, step, self.stop, workers=self.workers,
                                  buffer=self.buffer)
        self._next = step + 1
        return next(self._it)

    def close(self) -> None:
        """Stops the read-ahead threads."""
        if self._it is not None:
            self._it.close()
            self._it = None
