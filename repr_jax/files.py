"""Run files that survive crashes: atomic writes, JSONL appends whose torn last line is dropped on
resume, damaged files named in one line, and one process per run directory.

Every JSON file a run writes goes through :func:`write_json` (a temporary file in the same folder,
fsynced, then renamed over the old one), so a reader sees the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import tempfile
import warnings
from pathlib import Path
from typing import Any


class DamagedFile(ValueError):
    """A run file that cannot be read; the message (one line) names it and the fix."""


class StorageError(OSError):
    """A write that failed for lack of space or an I/O error; the message (one line) names the
    path and the free space there. Free space and rerun: the run resumes."""

    def __str__(self) -> str:
        return str(self.strerror)


_STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)


def _free_space(path: Path) -> str:
    for p in (path, *path.parents):
        if p.exists():
            return f"{shutil.disk_usage(p).free / 2**20:,.1f} MiB free"
    return "free space unknown"


def storage_error(exc: BaseException, path: str | Path) -> StorageError | None:
    """A one-line :class:`StorageError` for ``exc`` (or an error it was raised from) when it is a
    lack of space or an I/O error, else None. Orbax's asynchronous saves raise such errors wrapped
    (or as text), at the next save or at exit."""
    path, seen = Path(path), exc
    while seen is not None:
        if isinstance(seen, StorageError):
            return seen
        if isinstance(seen, OSError) and seen.errno in _STORAGE_ERRNOS:
            where = seen.filename or path
            return StorageError(seen.errno, f"writing {where} failed: {seen.strerror} "
                                            f"({_free_space(Path(where))}); free space and rerun "
                                            f"to resume")
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    for code in _STORAGE_ERRNOS:
        if os.strerror(code) in text:
            return StorageError(code, f"writing {path} failed: {os.strerror(code)} "
                                      f"({_free_space(path)}); free space and rerun to resume")
    return None


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of ``exc``'s message (libraries' messages can run to pages)."""
    lines = str(exc).strip().splitlines()
    return lines[0][:limit] if lines else ""


class WorkdirBusy(RuntimeError):
    """Another process holds the run directory; the message (and ``holder``) names its pid and
    host."""
    holder: str = "another process"


def write_text(path: str | Path, text: str) -> Path:
    """Writes ``text`` to ``path`` atomically (temporary file, fsync, rename; creates the folder)."""
    return write_bytes(path, text.encode())


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Writes ``data`` to ``path`` atomically (temporary file in the same folder, fsync, rename);
    a full disk or I/O error is one line (:class:`StorageError`) and leaves the old file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise storage_error(e, path) or e from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        error = storage_error(e, path) if isinstance(e, Exception) else None
        if error is not None:
            raise error from None
        raise
    return path


def json_object(line: str, where: str) -> dict[str, Any]:
    """One JSON-lines line that must be an object; else a one-line ValueError starting with
    ``where`` (``FILE:LINE``)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a line must be a JSON object, got {type(row).__name__}")
    return row


def version_stamp(paths) -> str:
    """Path, size and modification time of each existing file: what changes when one is edited
    (prepared copies of a user's files are keyed by it)."""
    return "|".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in map(Path, paths)
                    if p.exists())


def write_json(path: str | Path, value: Any, *, indent: int | None = 1, **kwargs) -> Path:
    """``value`` as JSON in ``path``, atomically (:func:`write_text`)."""
    return write_text(path, json.dumps(value, indent=indent, **kwargs) + "\n")


def read_json(path: str | Path, *, fix: str = "") -> Any:
    """The JSON in ``path``; a file that is empty, truncated or not JSON raises
    :class:`DamagedFile` naming it (and ``fix``, what to do about it)."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        reason = "it is empty" if not path.stat().st_size else f"not valid JSON: {e}"
        raise DamagedFile(f"{path} is damaged ({reason})" + (f"; {fix}" if fix else "")) from None


def read_jsonl(path: str | Path, *, drop_torn_tail: bool = False) -> list[dict[str, Any]]:
    """The rows of a JSONL file. A last line that does not parse (a write cut short by a crash or a
    full disk) is dropped with a warning when ``drop_torn_tail``; any other bad line raises
    :class:`DamagedFile` naming the file and the line."""
    path = Path(path)
    lines = path.read_text(errors="replace").splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if drop_torn_tail and number == len(lines):
                warnings.warn(f"{path}: dropped its torn last line {number} (a write cut short)",
                              stacklevel=2)
                break
            raise DamagedFile(f"{path} line {number} is damaged (not valid JSON: {e})") from None
    return rows


def append_line(path: str | Path, line: str) -> None:
    """Appends one line and makes it durable (flush and fsync). A full disk is one line
    (:class:`StorageError`); a torn line it leaves is dropped on resume (:func:`read_jsonl`)."""
    try:
        with Path(path).open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise storage_error(e, path) or e from None


@contextlib.contextmanager
def exclusive(path: str | Path):
    """Holds an exclusive ``fcntl.flock`` on ``path`` (created), waiting for other holders: for
    work several processes may start at once, such as preparing one dataset."""
    import fcntl
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        yield  # closing the file releases the lock


class WorkdirLock:
    """An advisory lock on ``workdir`` (``fcntl.flock`` on ``workdir/.lock[.<process>]``): one
    process per run directory. The OS releases it when the process dies, so a killed run never
    leaves a stale lock. Each process of a multi-host run locks its own file (``process``)."""

    def __init__(self, workdir: str | Path, *, process: int = 0, name: str = ".lock"):
        self.path = Path(workdir) / (name if process == 0 else f"{name}.{process}")
        self._file = None

    def acquire(self) -> "WorkdirLock":
        import fcntl
        import stat
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Never through a symlink: truncating a lock that points elsewhere (a shared run folder)
        # would overwrite any file the user can write.
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError:
            if self.path.is_symlink():
                raise WorkdirBusy(f"{self.path} is a symbolic link (to {os.readlink(self.path)}); "
                                  f"refusing to use it as the run's lock: remove it") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WorkdirBusy(f"{self.path} is not a regular file; refusing to use it as the "
                              f"run's lock: remove it")
        f = os.fdopen(fd, "r+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            busy = WorkdirBusy(f"{self.path.parent} is in use by {holder}; wait for it to "
                               f"finish, or use another --workdir")
            busy.holder = holder
            raise busy from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        f.flush()
        self._file = f
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor releases the flock
            self._file = None

    def __enter__(self) -> "WorkdirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
