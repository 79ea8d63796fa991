"""Run files that survive crashes: atomic writes, JSONL appends whose torn last line is dropped on
resume, damaged files named in one line, and one process per run directory.

Every JSON file a run writes goes through :func:`write_json` (a temporary file in the same folder,
fsynced, then renamed over the old one), so a reader sees the old file or the new one, never half;
it gets the mode a plain ``open`` would give (``0o666`` less the umask), so a group can read its
results. A temporary that a kill left (a file, or a :func:`scratch_folder`) is removed by the
next write of the same output, with a warning (:func:`remove_stale`). Outputs are checked
before anything runs (:func:`check_output`: never an input, never inside a run folder, never
through a symbolic link), caches are verified against the digest
recorded when they were written (:func:`write_verified`, :func:`verified`), and a user's text
files are read line by line with every undecodable byte named by file and line
(:func:`text_lines`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import shutil
import socket
import tempfile
import time
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


def umask() -> int:
    """The process's umask, read without changing it where the OS tells it (Linux), else by
    setting it and putting it back."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Writes ``data`` to ``path`` atomically (temporary file ``.<name>.<random>.tmp`` in the
    same folder, fsync, rename), with the mode a plain ``open`` gives (``0o666`` less the umask;
    the temporary file would be ``0o600``); a full disk or I/O error is one line
    (:class:`StorageError`) and leaves the old file. A temporary of ``path`` that a killed write
    left is removed, with a warning (:func:`remove_stale`). Time ``O(size + files in the
    folder)``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise storage_error(e, path) or e from None
    try:
        _hold(fd)  # until renamed: other writers see it is live
        remove_stale(path.parent, re.escape(f".{path.name}.") + r"[a-z0-9_]+\.tmp",
                     f"a temporary copy of {path.name}")
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)  # before the close, which releases the lock
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        error = storage_error(e, path) if isinstance(e, Exception) else None
        if error is not None:
            raise error from None
        raise
    return path


def _hold(fd: int) -> None:
    """An exclusive ``fcntl.flock`` on ``fd``, released when it is closed (or the process
    dies); none on a file system without locks, where :func:`remove_stale` goes by age alone."""
    import fcntl
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        pass


_IMPORTED = time.time()


@functools.cache
def process_start() -> float:
    """When this process started, in seconds since the epoch: Linux's start tick
    (``/proc/self/stat``, 10 ms) against ``CLOCK_BOOTTIME``; elsewhere, or if that reads later,
    when this module was imported. Time ``O(1)``."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return min(time.time() - since_boot, _IMPORTED)
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED


def remove_stale(folder: str | Path, pattern: str, what: str) -> list[Path]:
    """Removes what a killed process left in ``folder``: each file or folder whose whole name
    matches the regular expression ``pattern``, last modified before this process started
    (:func:`process_start`) and locked by no live writer (``fcntl.flock``, which the writers
    hold); one warning each names it as ``what``. Symbolic links are left alone. Returns the
    removed paths. Time ``O(entries in the folder)`` plus the removals."""
    import fcntl
    import stat
    regex, start, removed = re.compile(pattern), process_start(), []
    try:
        entries = [e for e in os.scandir(folder) if regex.fullmatch(e.name)]
    except OSError:  # no folder: nothing left there
        return removed
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if st.st_mtime >= start or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                continue  # another live writer's (newer than this process), or not ours
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # removed meanwhile (by its writer or another cleaner)
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its writer lives
                continue
            except OSError:  # a file system without locks: the age alone decides
                pass
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:  # removed meanwhile, or not ours to remove
            continue
        finally:
            os.close(fd)
        removed.append(Path(entry.path))
        warnings.warn(f"removed {entry.path}: {what} that a killed run left", stacklevel=2)
    return removed


@contextlib.contextmanager
def scratch_folder(parent: str | Path | None, *, prefix: str, suffix: str = "", what: str):
    """A new folder ``parent/<prefix><random><suffix>`` (``parent`` None: the system's temporary
    folder) for temporary files, locked while in use and removed after; first the folders of
    that name a killed run left in ``parent`` are removed (:func:`remove_stale`, naming them as
    ``what``). Time ``O(entries in parent)`` plus the removals."""
    parent = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(dir=parent, prefix=prefix, suffix=suffix))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _hold(fd)  # until removed: other runs see it is live
        remove_stale(parent, re.escape(prefix) + r"[a-z0-9_]+" + re.escape(suffix), what)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)  # gone already if it was moved into place
        os.close(fd)


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


def _open_lock(path: Path, what: str) -> int:
    """A descriptor of the lock file ``path`` (created with a plain ``open``'s mode), never
    through a symbolic link (that would create or truncate a file elsewhere): a link, or anything
    but a regular file, is a one-line :class:`WorkdirBusy`."""
    import stat
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError:
        if path.is_symlink():
            raise WorkdirBusy(f"{path} is a symbolic link (to {os.readlink(path)}); refusing to "
                              f"use it as {what}: remove it") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WorkdirBusy(f"{path} is not a regular file; refusing to use it as {what}: "
                          f"remove it")
    return fd


@contextlib.contextmanager
def exclusive(path: str | Path):
    """Holds an exclusive ``fcntl.flock`` on ``path`` (created; never through a symbolic link),
    waiting for other holders: for work several processes may start at once, such as preparing
    one dataset."""
    import fcntl
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_lock(path, "a lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


class WorkdirLock:
    """An advisory lock on ``workdir`` (``fcntl.flock`` on ``workdir/.lock[.<process>]``): one
    process per run directory. The OS releases it when the process dies, so a killed run never
    leaves a stale lock. Each process of a multi-host run locks its own file (``process``)."""

    def __init__(self, workdir: str | Path, *, process: int = 0, name: str = ".lock"):
        self.path = Path(workdir) / (name if process == 0 else f"{name}.{process}")
        self._file = None

    def acquire(self) -> "WorkdirLock":
        import fcntl
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Never through a symlink: truncating a lock that points elsewhere (a shared run folder)
        # would overwrite any file the user can write.
        f = os.fdopen(_open_lock(self.path, "the run's lock"), "r+")
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


# --------------------------------------------------------------------------------------------------
# Outputs, caches and a user's text files
# --------------------------------------------------------------------------------------------------

def is_run_folder(path: str | Path) -> bool:
    """A folder ``repr-jax train`` wrote: its ``config.json`` beside checkpoints, metrics or its
    costs."""
    path = Path(path)
    return (path / "config.json").is_file() and any(
        (path / f).exists() for f in ("checkpoints", "metrics.jsonl", "run.json"))


def check_output(path: str | Path, *, flag: str, inputs=(), folder: bool = False) -> Path:
    """``path`` (absolute) when a command may write it; else a one-line ValueError naming
    ``flag``: an output that is one of ``inputs`` (the same file, through any link), lies inside
    a run folder (whose files are the run's own), is a symbolic link, is a folder where a file is
    meant (``folder=False``) or a file where a folder is, or sits under a file."""
    path = Path(path).expanduser().absolute()
    if path.is_symlink():
        raise ValueError(f"{flag} {path} is a symbolic link (to {os.readlink(path)}); give the "
                         f"path itself")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{flag} {path}: {parent} is a file, not a folder")
    if path.exists() and path.is_dir() != folder:
        raise ValueError(f"{flag} {path} is a {'file' if folder else 'folder'}; give "
                         f"{'a folder' if folder else 'a file name'}")
    real = Path(os.path.realpath(path))
    for given in inputs:
        given = Path(given)
        if real == Path(os.path.realpath(given)) or (
                path.exists() and given.exists() and os.path.samefile(path, given)):
            raise ValueError(f"{flag} {path} is an input of this command ({given}); an output "
                             f"never replaces an input: write it elsewhere")
    for parent in (real, *real.parents) if folder else real.parents:
        if is_run_folder(parent):
            raise ValueError(f"{flag} {path} lies inside the run folder {parent}, whose files "
                             f"are the run's own: write it elsewhere")
    return path


def check_writable(path: str | Path, *, flag: str) -> None:
    """A one-line ValueError naming ``flag`` when ``path`` (a folder, existing or to be made)
    cannot be written: probed by making and removing an empty folder in its nearest existing
    ancestor (``os.access`` says yes to root on a read-only or virtual file system)."""
    path = Path(path).expanduser().absolute()
    base = next(p for p in (path, *path.parents) if p.exists())
    if not base.is_dir():
        return  # a file in the way: check_output and the folder checks name it
    try:
        os.rmdir(tempfile.mkdtemp(dir=base, prefix=".repr_jax_probe_"))
        remove_stale(base, r"\.repr_jax_probe_[a-z0-9_]+", "an empty probe folder")
    except OSError as e:
        raise ValueError(f"{flag} {path} cannot be written: making a folder in {base} failed "
                         f"({e.strerror})") from None


def no_symlinks(path: str | Path, *, below: str | Path, what: str) -> Path:
    """``path`` when no part of it below the folder ``below`` is a symbolic link (a cache or a
    lock the project writes there would follow it out of its folder); else a one-line
    ValueError naming the link and ``what`` it holds."""
    path, below = Path(path), Path(below)
    for part in (path, *path.parents):
        if part == below or below not in part.parents:
            break
        if part.is_symlink():
            raise ValueError(f"{part} is a symbolic link (to {os.readlink(part)}); refusing to "
                             f"write {what} through it: remove the link")
    return path


def keyed_cache(cache_dir: str | Path, identity: str, *, what: str) -> Path:
    """The folder of ``cache_dir`` kept for ``identity`` (a run, its step and its reading):
    named by a hash of it, so two runs never share cached vectors; checked by
    :func:`no_symlinks`."""
    import hashlib
    digest = hashlib.blake2b(identity.encode(), digest_size=8).hexdigest()
    return no_symlinks(Path(cache_dir) / digest, below=Path(cache_dir).parent, what=what)


def _digest_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.blake2b")


def write_verified(path: str | Path, data: bytes) -> Path:
    """Writes ``data`` atomically and, beside it, its digest (``<name>.blake2b``): a cache whose
    content :func:`verified` checks before it is used."""
    import hashlib
    path = Path(path)
    digest_file = _digest_path(path)
    digest_file.unlink(missing_ok=True)  # a crash between the two writes leaves it unverified
    write_bytes(path, data)
    write_text(digest_file, hashlib.blake2b(data, digest_size=32).hexdigest() + "\n")
    return path


def record_digest(path: str | Path) -> str:
    """Writes, beside a file already in place (too large to hold, e.g. a memory-mapped store),
    its digest as :func:`write_verified` does, hashed in chunks; returns it. Time
    ``O(size)``, memory ``O(1)``."""
    import hashlib
    path, digest = Path(path), hashlib.blake2b(digest_size=32)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    write_text(_digest_path(path), digest.hexdigest() + "\n")
    return digest.hexdigest()


def verified(path: str | Path, *, read: bool = True) -> tuple[bytes | None, str]:
    """``(bytes, "")`` of a cache file written by :func:`write_verified` whose content still
    matches its recorded digest (``read=False``: ``(None, "")``, the file hashed in chunks and
    not held); ``(None, why)`` when it is absent (``why`` empty), has no digest, or differs
    (replaced, truncated, edited). Time ``O(size)``."""
    import hashlib
    path = Path(path)
    if not path.is_file():
        return None, ""
    try:
        recorded = _digest_path(path).read_text().strip()
    except OSError:
        return None, "no recorded digest"
    digest, chunks = hashlib.blake2b(digest_size=32), []
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
            if read:
                chunks.append(chunk)
    if digest.hexdigest() != recorded:
        return None, "its content differs from the digest recorded when it was written"
    return (b"".join(chunks) if read else None), ""


_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zstd",
               b"PK\x03\x04": "zip"}


_KINDS = (("S_ISFIFO", "a FIFO (named pipe)"), ("S_ISCHR", "a character device"),
          ("S_ISBLK", "a block device"), ("S_ISSOCK", "a socket"))


def not_readable(path: str | Path, *, folder: bool = False) -> str:
    """Why ``path`` cannot be read as a regular file (``folder``: as a folder), following links:
    words to follow ``"PATH: "`` (``"a FIFO (named pipe), not a regular file"``, ``"no such
    file"``), ``""`` when it can be. A link is named with where it points (``"a symbolic link to
    /x, which does not exist"``), a broken link among its folders too."""
    import stat
    path = Path(path)
    link = f"a symbolic link to {os.readlink(path)}, " if path.is_symlink() else ""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{link or 'a path through '}a loop of symbolic links"
        if link:
            return f"{link}which does not exist"
        broken = next((p for p in path.parents if p.is_symlink() and not p.exists()), None)
        if broken is not None:
            return (f"no such {'folder' if folder else 'file'}: {broken} is a symbolic link to "
                    f"{os.readlink(broken)}, which does not exist")
        if e.errno == errno.ENOENT:
            return f"no such {'folder' if folder else 'file'}"
        return f"cannot be read ({e.strerror})"
    kind = next((k + ", " for test, k in _KINDS if getattr(stat, test)(mode)), "")
    if folder:
        return "" if stat.S_ISDIR(mode) else \
            f"{link}{'a file, ' if stat.S_ISREG(mode) else kind}not a folder"
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        return f"{link}a folder, not a file"
    return f"{link}{kind}not a regular file"


def _cr_only(f, block: int = 1 << 20) -> bool:
    """Whether the binary file ``f`` ends its lines with a bare ``\\r`` (old Mac OS): it holds a
    ``\\r`` and no ``\\n``. Reads up to the first ``\\n`` (the whole file when it has none)."""
    carriage = False
    while chunk := f.read(block):
        if b"\n" in chunk:
            return False
        carriage = carriage or b"\r" in chunk
    return carriage


def _cr_lines(f, block: int = 1 << 20):
    """The ``\\r``-ended lines of the binary file ``f`` (each with its ``\\r``)."""
    rest = b""
    while chunk := f.read(block):
        *lines, rest = (rest + chunk).split(b"\r")
        for line in lines:
            yield line + b"\r"
    if rest:
        yield rest


def text_lines(path: str | Path):
    """``(line number, line)`` of a UTF-8 text file (a byte-order mark dropped). Lines end in
    ``\\n`` or ``\\r\\n`` (a ``\\r`` elsewhere stays in its line: JSON may hold one between
    values) or, in a file with no ``\\n`` at all, in a bare ``\\r`` (old Mac OS). A path that is
    not a regular file (missing, a FIFO, a device, a broken link), a compressed file, or a line
    that is not UTF-8 is a one-line ValueError naming the file (and line)."""
    path = Path(path)
    problem = not_readable(path)
    if problem:
        raise ValueError(f"{path}: {problem}")
    with open(path, "rb") as f:
        head = f.read(8)
        for magic, kind in _COMPRESSED.items():
            if head.startswith(magic):
                raise ValueError(f"{path} is {kind}-compressed, not text: decompress it first "
                                 f"(e.g. {'gunzip -k' if kind == 'gzip' else kind + ' -d'} "
                                 f"{path.name})")
        f.seek(0)
        cr_only = _cr_only(f)
        f.seek(0)
        for number, raw in enumerate(_cr_lines(f) if cr_only else f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{path}:{number}: byte {e.start + 1} of the line (0x{raw[e.start]:02x}) is "
                    f"not UTF-8; the file must be UTF-8 (a Latin-1 file: iconv -f latin1 -t "
                    f"utf-8)") from None
            yield number, line.lstrip("\ufeff") if number == 1 else line


def check_text(value: str, where: str, field: str) -> str:
    """``value`` when it encodes as UTF-8; a lone surrogate (``"\\ud800"`` in JSON) is a
    one-line ValueError naming ``where`` and ``field``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{where}: {field!r} holds a lone surrogate "
                         f"({value[e.start].encode('unicode_escape').decode()} at character "
                         f"{e.start + 1}), which is not text") from None
    return value


def nonempty_text(value, where: str, field: str) -> str:
    """``value`` when it is a string of text (not empty or blank, no lone surrogate); else a
    one-line ValueError ``WHERE: 'FIELD' is empty`` (or ``must be a string``): what every text
    format (``pairs:``, ``beir:``) says of a query or document with no text."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: {field!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{where}: {field!r} is empty")
    return check_text(value, where, field)


def read_safetensors(path: Path) -> dict:
    """The tensors of a safetensors file; a truncated or mangled file is named, and so is the
    first tensor holding NaN or infinity."""
    import numpy as np
    from safetensors.numpy import load_file
    try:
        tensors = load_file(str(path))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ValueError(f"{path} is not a readable safetensors file "
                         f"({type(e).__name__}: {first_line(e)})") from None
    for name, t in tensors.items():
        if np.issubdtype(t.dtype, np.inexact) and not np.isfinite(t).all():
            raise ValueError(f"{path}: tensor {name!r} holds {np.size(t) - np.isfinite(t).sum()} "
                             f"non-finite values (a damaged file)")
    return tensors
