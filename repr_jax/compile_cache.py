"""JAX's persistent compilation cache, kept in the user's cache folder: compile once per machine.

:func:`enable` (called where the CLI starts, never on import) points JAX at
``$XDG_CACHE_HOME/repr_jax/xla`` (``~/.cache/repr_jax/xla``), size-capped with LRU eviction; the
environment variable ``REPR_JAX_COMPILE_CACHE`` moves it (a folder) or turns it off (``0``).
Entries are keyed as JAX keys them (the program, its compile options, devices, JAX/jaxlib version).

JAX's own file cache writes an entry in place and never replaces one that exists, so a kill in the
middle of a write leaves a truncated entry that every later compile reads. :class:`EntryCache`
writes each entry atomically (:func:`repr_jax.files.write_bytes`) with the BLAKE2b digest of its
payload in front; an entry that does not match is named in one warning, removed and reported as
a miss (JAX compiles again and rewrites it), and the temporaries of killed writers are removed.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from pathlib import Path

from jax._src.compilation_cache_interface import CacheInterface

from repr_jax.files import exclusive, remove_stale, write_bytes

ENV = "REPR_JAX_COMPILE_CACHE"
DEFAULT_MAX_BYTES = 2 * 2**30
# Every program is written (JAX's default skips those compiled in under 1 s): reading a small one
# back costs less than compiling it, and a probe's first call compiles twenty of them.
MIN_COMPILE_SECS = 0.0
SUFFIX = ".xla"
MAGIC = b"repr_jax xla cache 1\n"  # the format of an entry: MAGIC, digest, payload
_DIGEST_BYTES = 32
_HEADER = len(MAGIC) + _DIGEST_BYTES
_TEMPORARY = r"\..+" + re.escape(SUFFIX) + r"\.[a-z0-9_]+\.tmp"  # write_bytes' temporaries


def default_folder() -> Path:
    """``$XDG_CACHE_HOME/repr_jax/xla``, else ``~/.cache/repr_jax/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "repr_jax" / "xla"


def folder_from_env() -> Path | None:
    """The folder ``REPR_JAX_COMPILE_CACHE`` asks for: unset, empty or ``1``: the default
    (:func:`default_folder`); ``0`` (``off``, ``false``, ``no``): None, no cache; else that
    folder."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in ("0", "off", "false", "no"):
        return None
    if value.lower() in ("", "1", "on", "true", "yes"):
        return default_folder()
    return Path(value).expanduser()


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=_DIGEST_BYTES).digest()


class EntryCache(CacheInterface):
    """JAX's ``CacheInterface`` over one folder: an entry per key (``<key>.xla``: :data:`MAGIC`,
    the payload's BLAKE2b digest, the payload), written atomically; ``max_bytes`` caps the
    entries' total size (the least recently used go first; -1: no cap, as JAX's)."""

    def __init__(self, path: str | Path, *, max_bytes: int):
        self._path = Path(path)
        self.max_bytes = max_bytes
        self._path.mkdir(parents=True, exist_ok=True)
        remove_stale(self._path, _TEMPORARY, "a temporary compile-cache entry")

    def entry(self, key: str) -> Path:
        """The file of ``key``; a key too long for a file name keeps its start and a digest."""
        name = key.replace(os.sep, "_")
        if len(name) > 160:
            name = f"{name[:96]}-{hashlib.blake2b(key.encode(), digest_size=16).hexdigest()}"
        return self._path / f"{name}{SUFFIX}"

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None (absent, or damaged: then named in one
        warning and removed, so JAX compiles the program again and rewrites it)."""
        path = self.entry(key)
        try:
            with open(path, "rb") as f:
                inode, data = os.fstat(f.fileno()).st_ino, f.read()
        except FileNotFoundError:
            return None
        payload = data[_HEADER:]
        if not data.startswith(MAGIC) or len(data) < _HEADER:
            problem = f"not a repr_jax cache entry, or cut short at {len(data)} bytes"
        elif data[len(MAGIC):_HEADER] != _digest(payload):
            problem = "its payload differs from the digest written with it: cut short or changed"
        else:
            try:
                os.utime(path)  # most recently used: evicted last
            except OSError:
                pass  # evicted meanwhile; the bytes read are whole
            return payload
        try:
            if os.stat(path).st_ino == inode:  # not another process's rewrite since
                os.unlink(path)
        except OSError:
            pass
        warnings.warn(f"compile cache: removed {path}: damaged ({problem}); the program is "
                      f"compiled again and its entry rewritten", stacklevel=2)
        return None

    def put(self, key: str, value: bytes) -> None:
        """Stores ``value`` under ``key`` atomically (replacing any entry), first evicting the
        least recently used entries the cap needs."""
        size = _HEADER + len(value)
        if self.max_bytes == 0:  # JAX's meaning of a cap of 0: caching off
            return
        if 0 <= self.max_bytes < size:
            warnings.warn(f"compile cache: an entry of {size:,} bytes exceeds the cap of "
                          f"{self.max_bytes:,} bytes; not cached", stacklevel=2)
            return
        if self.max_bytes >= 0:
            with exclusive(self._path / ".lock"):
                self._evict(size)
        write_bytes(self.entry(key), MAGIC + _digest(value) + value)

    def _evict(self, incoming: int) -> None:
        """Removes the least recently used entries until they and ``incoming`` bytes fit."""
        entries = []
        for e in os.scandir(self._path):
            if e.name.endswith(SUFFIX) and not e.name.startswith("."):
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue  # removed meanwhile
                entries.append((st.st_mtime_ns, st.st_size, e.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total + incoming <= self.max_bytes:
                break
            try:
                os.unlink(path)
            except OSError:
                pass
            total -= size


def _file_cache(path: str):
    """Stands in for ``jax._src.compilation_cache.get_file_cache``: JAX's cap
    (``jax_compilation_cache_max_size``) and content check, over an :class:`EntryCache`."""
    from jax._src import compilation_cache, config
    cache = EntryCache(path, max_bytes=config.compilation_cache_max_size.value)
    if config.compilation_cache_check_contents.value:
        return compilation_cache.VerificationCache(cache), path
    return cache, path


def enable(path: str | Path | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Path | None:
    """Turns JAX's persistent compilation cache on in ``path`` (None: where
    ``REPR_JAX_COMPILE_CACHE`` says, :func:`folder_from_env`), entries capped at ``max_bytes`` in
    all. Returns the folder, or None when the variable turns it off or the folder cannot be made
    (said in one warning). Call it before the first compile of the programs to cache."""
    import jax
    from jax._src import compilation_cache
    folder = Path(path).expanduser() if path is not None else folder_from_env()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        warnings.warn(f"compile cache off: cannot make {folder} ({e.strerror}); set {ENV} to "
                      f"another folder, or to 0", stacklevel=2)
        return None
    # JAX builds its cache through get_file_cache at the first compile after reset_cache;
    # tests/test_compile_cache.py fails if that stops being so.
    compilation_cache.get_file_cache = _file_cache
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_compilation_cache_max_size", int(max_bytes))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
    # XLA's own GPU autotune/kernel caches would write files in the folder outside this class.
    jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
    compilation_cache.reset_cache()
    return folder
