"""Verified orbax checkpoints of the whole TrainState (the data position is ``state.step``).

Each checkpoint holds two orbax items, written and committed together: ``state`` (the arrays) and
``checksums`` (per array: the sum and the odd-weighted sum of its 32-bit words, computed on the
devices from the very arrays being saved). A restore recomputes them on the restored arrays. A
checkpoint that fails to restore or to verify is reported in one line (step, path, reason), moved
aside to ``<checkpoints>.damaged/`` (never deleted) and the previous one is tried; nothing is
resumed or evaluated from a checkpoint that did not verify.

Once a save has finished, ``files.json`` records each of its files' size and CRC32, so a truncated,
overwritten or deleted file is named before orbax reads it.
"""

from __future__ import annotations

import errno
import shutil
import sys
import zlib
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from repr_jax import files
from repr_jax.config import ConfigError
from repr_jax.train import costs

CHECKSUM_KIND = "uint32 word sum, odd-weighted word sum"
MANIFEST = "files.json"  # {file: [size, crc32]} of a finished checkpoint, written by process 0


class CheckpointDamaged(ValueError):
    """A checkpoint that cannot be restored or whose arrays do not match their checksums."""


class NoVerifiedCheckpoint(ConfigError):
    """No checkpoint of the run restored and verified (damaged ones were moved aside)."""


def _words(x: jax.Array) -> jax.Array:
    """``x``'s bits as a flat uint32 vector (16- and 8-bit types widened, 64-bit ones split)."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    size = x.dtype.itemsize
    if size in (4, 8):  # 64-bit: a trailing axis of two words
        return jax.lax.bitcast_convert_type(x, jnp.uint32).ravel()
    unsigned = {1: jnp.uint8, 2: jnp.uint16}[size]
    return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32).ravel()


def _finite(tree: Any) -> jax.Array:
    finite = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(finite)) if finite else jnp.bool_(True)


_all_finite = jax.jit(_finite)


@jax.jit
def _leaf_sums(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``([sum, odd-weighted sum] of x's words (uint32, wrapping), x finite)``."""
    w = _words(x)
    weights = jnp.arange(w.size, dtype=jnp.uint32) * jnp.uint32(2) + jnp.uint32(1)
    finite = jnp.all(jnp.isfinite(x)) if jnp.issubdtype(x.dtype, jnp.inexact) else True
    return (jnp.stack([jnp.sum(w, dtype=jnp.uint32), jnp.sum(w * weights, dtype=jnp.uint32)]),
            jnp.asarray(finite))


def _summarize(tree: Any) -> tuple[Any, jax.Array]:
    """Per leaf ``[sum, odd-weighted sum]`` of its words, and whether every floating leaf is
    finite: one leaf at a time (one program per shape and dtype), so the temporaries are one
    leaf's, not the whole tree's (a whole-tree program held ~4 GB more for SmolLM2's 135M
    parameters and their Adam moments)."""
    leaves, treedef = jax.tree.flatten(tree)
    # each finished before the next starts: a sharded leaf's program all-gathers, and XLA's CPU
    # collectives deadlocked (then aborted) with several such programs in flight at once
    parts = [jax.block_until_ready(_leaf_sums(x)) for x in leaves]
    finite = jnp.all(jnp.stack([f for _, f in parts])) if parts else jnp.bool_(True)
    return treedef.unflatten([s for s, _ in parts]), finite


def _host(x: jax.Array) -> np.ndarray:
    """A replicated result on this host (works when other hosts' devices hold copies too)."""
    return np.asarray(x.addressable_data(0) if isinstance(x, jax.Array) else x)


def summarize(tree: Any) -> tuple[dict[str, list[int]], bool]:
    """``({array path: [sum, weighted sum]}, all floating arrays finite)`` of ``tree``."""
    sums, finite = _summarize(tree)
    flat = jax.tree_util.tree_flatten_with_path(sums)[0]
    return ({jax.tree_util.keystr(path): [int(v) for v in _host(s)] for path, s in flat},
            bool(_host(finite)))


def all_finite(tree: Any) -> bool:
    """Whether every floating array of ``tree`` is finite (computed where the arrays live)."""
    return bool(_host(_all_finite(tree)))


@jax.jit
def _finite_rows(tree: Any) -> jax.Array:
    rows = [jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
            for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(rows), axis=0)


def finite_members(params: Any, stacked: bool) -> np.ndarray:
    """Per member (the leading axis when ``stacked``, else the one run), whether its floating
    arrays are all finite."""
    return _host(_finite_rows(params)) if stacked else np.array([all_finite(params)])


def _shapes(tree: Any) -> dict[tuple[str, ...], tuple[int, ...]]:
    """``{key names: shape}`` of a tree's arrays (attribute, dict key or index names alike)."""
    def name(k):
        return str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k))))
    return {tuple(map(name, path)): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
            if hasattr(leaf, "shape")}


def _check_shapes(step: int, path: Path, abstract: Any) -> None:
    """A ConfigError (nothing moved: the checkpoint is not damaged) when the arrays on disk are
    not the ones this config and data give — another shape, or arrays one side lacks: the run's
    data, config or code changed since it was written (an activation store rewritten from a model
    of another width, say). Metadata that cannot be read is left to the restore, which reports
    damage."""
    try:
        handler = ocp.StandardCheckpointHandler()  # the item's own metadata: no step files
        try:
            saved = _shapes(getattr(handler.metadata(path / "state"), "tree", None))
        finally:
            handler.close()
    except Exception:  # noqa: BLE001 - unreadable metadata: the restore says what is wrong
        return
    if not saved:
        return
    wanted = _shapes(abstract)
    where = f"checkpoint step {step} ({path})"
    why = ("its data, config or code changed since it was written (a dataset of another "
           "width?); not restored, nothing moved")
    for key, shape in wanted.items():
        if key in saved and saved[key] != shape:
            raise ConfigError(f"{where} holds {'/'.join(key)} of shape {list(saved[key])}, but "
                              f"this run's config and data give {list(shape)}: {why}")
    for keys, side in ((set(wanted) - set(saved), "lacks"), (set(saved) - set(wanted), "holds")):
        if keys:
            names = ", ".join("/".join(k) for k in sorted(keys)[:3])
            raise ConfigError(f"{where} {side} {names}{' ...' if len(keys) > 3 else ''}, which "
                              f"this run's config {'needs' if side == 'lacks' else 'does not'}"
                              f"{'' if side == 'lacks' else ' have'}: {why}")


class Checkpointer:
    """Saves states (asynchronously, with their checksums) and restores the latest one that
    verifies, sharded like the state it is given."""

    def __init__(self, directory: str | Path, *, keep: int = 2):
        self.directory = Path(directory).absolute()
        self._closed = False
        self._manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def save(self, state, *, require_finite: bool = True) -> bool:
        """Starts writing ``state`` (not twice for one step) and returns True; returns False,
        writing nothing, when ``require_finite`` and a floating array is not finite. An earlier
        save's I/O error is raised here at the latest (:class:`repr_jax.files.StorageError`)."""
        step = int(np.asarray(jax.device_get(state.step)).flat[0])  # a population's are equal
        self.wait()
        if step in self._manager.all_steps():
            return True
        checksums, finite = summarize(state)
        if require_finite and not finite:
            return False
        _check_space(self.directory, state)
        try:
            self._manager.save(step, args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                checksums=ocp.args.JsonSave({"kind": CHECKSUM_KIND, "arrays": checksums})))
        except Exception as e:  # noqa: BLE001 - I/O errors become one line
            raise files.storage_error(e, self.directory / str(step)) or e
        return True

    def restore(self, like_state, step: int | None = None):
        """The checkpoint at ``step`` (default latest), with ``like_state``'s structure, dtypes and
        shardings, verified against its checksums (:class:`CheckpointDamaged` if it is not)."""
        step = self.latest_step() if step is None else step
        path = self.directory / str(step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like_state)
        _check_files(step, path)
        legacy = (path / "default").is_dir()  # written before checksums were kept
        if not legacy:
            _check_shapes(step, path, abstract)
        try:
            if legacy:
                with ocp.StandardCheckpointer() as reader:  # not the manager: it stays multi-item
                    state = reader.restore(path / "default", abstract)
            else:
                restored = self._manager.restore(step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), checksums=ocp.args.JsonRestore()))
                state, saved = restored["state"], restored["checksums"]
        except Exception as e:  # noqa: BLE001 - any failure to read is damage, reported in one line
            raise CheckpointDamaged(f"checkpoint step {step} ({path}) does not restore: "
                                    f"{type(e).__name__}: {files.first_line(e)}") from None
        if legacy:
            print(f"repr-jax: warning: checkpoint step {step} ({path}) predates checksums; "
                  f"restored unverified", file=sys.stderr)
            return state
        if not isinstance(saved, dict) or not isinstance(saved.get("arrays"), dict):
            raise CheckpointDamaged(f"checkpoint step {step} ({path}) has no valid checksums")
        actual, _ = summarize(state)
        wrong = [k for k in actual if saved["arrays"].get(k) != actual[k]]
        if wrong or set(saved["arrays"]) != set(actual):
            what = wrong[0] if wrong else "the list of arrays"
            raise CheckpointDamaged(
                f"checkpoint step {step} ({path / 'state'}) fails verification: {what} does not "
                f"match its checksum" + (f" (and {len(wrong) - 1} more arrays)" if wrong[1:] else ""))
        return state

    def restore_verified(self, like_state) -> tuple[Any, int] | None:
        """``(state, step)`` of the latest checkpoint that restores and verifies; each one that
        does not is reported in one line and moved aside. None when no checkpoint is left."""
        for step in reversed(self.all_steps()):
            try:
                return self.restore(like_state, step), step
            except CheckpointDamaged as e:
                moved = self.move_aside(step, "damaged")
                print(f"repr-jax: warning: {e}; moved to {moved}, trying the previous one",
                      file=sys.stderr)
        return None

    def move_aside(self, step: int, why: str) -> Path:
        """Moves checkpoint ``step`` to ``<directory>.<why>/<step>`` (process 0 only; never
        deletes), so later restores skip it."""
        self.wait()
        target = self.directory.with_name(f"{self.directory.name}.{why}") / str(step)
        if jax.process_index() == 0:
            n = 1
            while target.exists():
                target, n = target.with_name(f"{step}-{n}"), n + 1
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(self.directory / str(step)), str(target))
        self._manager.reload()
        return target

    def wait(self) -> None:
        """Waits for pending saves (their I/O errors become one line naming the path), then
        records the files of each finished checkpoint (:data:`MANIFEST`)."""
        try:
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001
            raise files.storage_error(e, self.directory) or e
        if jax.process_index() == 0:
            for step in self._manager.all_steps():
                path = self.directory / str(step)
                if not (path / MANIFEST).exists() and not (path / "default").is_dir():
                    try:
                        files.write_json(path / MANIFEST, _file_sums(path), indent=None)
                    except FileNotFoundError:  # deleted meanwhile (max_to_keep)
                        pass

    def close(self) -> None:
        """Waits for pending saves and releases the manager; safe to call twice."""
        if not self._closed:
            self._closed = True
            try:
                self.wait()
            finally:
                self._manager.close()


def _check_space(directory: Path, state: Any) -> None:
    """Refuses (one line) a save the disk has no room for, before orbax starts writing: its
    background writers would fail with pages of tracebacks and a late error."""
    need = costs.nbytes(state) + (64 << 10) + (2 << 10) * len(jax.tree.leaves(state))
    free = shutil.disk_usage(directory).free
    if free < need:
        raise files.StorageError(errno.ENOSPC, f"writing a checkpoint to {directory} needs about "
                                               f"{need / 2**20:,.2f} MiB, and {free / 2**20:,.2f} "
                                               f"MiB are free; free space and rerun to resume")


def _file_sums(path: Path) -> dict[str, list[int]]:
    """``{file relative to path: [size, crc32]}`` of every file under ``path``."""
    out = {}
    for f in sorted(path.rglob("*")):
        if f.is_file() and f.name != MANIFEST:
            crc = 0
            with f.open("rb") as stream:
                while chunk := stream.read(1 << 24):
                    crc = zlib.crc32(chunk, crc)
            out[str(f.relative_to(path))] = [f.stat().st_size, crc]
    return out


def _check_files(step: int, path: Path) -> None:
    """Checks checkpoint ``path``'s files against its manifest (when it has one: a checkpoint
    whose save was cut short after orbax committed it has none and is checked by its arrays)
    before orbax reads them, so damage is one line naming the file."""
    if not path.is_dir():
        raise CheckpointDamaged(f"checkpoint step {step} ({path}) is missing")
    if not (path / MANIFEST).exists():
        return
    try:
        expected = files.read_json(path / MANIFEST)
    except files.DamagedFile as e:
        raise CheckpointDamaged(f"checkpoint step {step}: {e}") from None
    actual = _file_sums(path)
    for name, (size, crc) in expected.items():
        if name not in actual:
            raise CheckpointDamaged(f"checkpoint step {step}: {path / name} is missing")
        if actual[name][0] != size:
            raise CheckpointDamaged(f"checkpoint step {step}: {path / name} has {actual[name][0]} "
                                    f"bytes, {size} were written (truncated or overwritten)")
        if actual[name][1] != crc:
            raise CheckpointDamaged(f"checkpoint step {step}: {path / name} fails its CRC32 "
                                    f"check (its contents changed after it was written)")


def restore_latest(workdir: str | Path, like_state, *, keep: int = 2):
    """The latest verified checkpoint of the run (or population) in ``workdir``, shaped like
    ``like_state`` (damaged ones are moved aside with a one-line warning); ConfigError when there
    is none."""
    ckpt = Checkpointer(Path(workdir) / "checkpoints", keep=keep)
    try:
        if ckpt.latest_step() is None:
            aside = sorted(str(p) for p in ckpt.directory.parent.glob(
                f"{ckpt.directory.name}.*/*"))
            raise ConfigError(f"{workdir} has no checkpoint yet" + (
                f" (moved aside, not used: {', '.join(aside)})" if aside else ""))
        found = ckpt.restore_verified(like_state)
        if found is None:
            raise NoVerifiedCheckpoint(f"{workdir}: no checkpoint restores and verifies (the "
                                       f"damaged ones are in {ckpt.directory}.damaged/)")
        return found[0]
    finally:
        ckpt.close()
