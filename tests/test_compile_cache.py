"""The persistent compilation cache (repr_jax/compile_cache.py): hits across processes, damaged
and half-written entries never used, the size cap, the off switch, and the private JAX hook it
goes through (these tests fail loudly if JAX changes how it builds its cache)."""

import inspect
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import compile_cache
from repr_jax.compile_cache import MAGIC, SUFFIX, EntryCache

_SETTINGS = ("jax_compilation_cache_dir", "jax_compilation_cache_max_size",
             "jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_enable_xla_caches")


@pytest.fixture
def restore_jax():
    """Puts JAX's cache settings and factory back after the test (the worker runs other tests)."""
    from jax._src import compilation_cache as cc
    saved = {name: getattr(jax.config, name) for name in _SETTINGS}
    factory = cc.get_file_cache
    yield
    cc.get_file_cache = factory
    for name, value in saved.items():
        jax.config.update(name, value)
    cc.reset_cache()
    jax.clear_caches()


@pytest.fixture
def folder(tmp_path, restore_jax):
    """A cache enabled in a fresh folder, every program written (no minimum compile time)."""
    path = compile_cache.enable(tmp_path / "xla")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path


def _entries(path, name="cached_fn"):
    return sorted(p for p in path.iterdir() if p.name.startswith(f"jit_{name}-")
                  and p.name.endswith(SUFFIX))


def cached_fn(x):
    return jnp.tanh(x @ x.T).sum(axis=1)


def _compile_and_count():
    """Runs ``cached_fn`` on a fresh in-memory cache; ``(result, persistent cache hits)``."""
    from jax._src import monitoring
    hits = []

    def listen(name, **kwargs):
        if name == "/jax/compilation_cache/cache_hits":
            hits.append(name)
    jax.clear_caches()
    monitoring.register_event_listener(listen)
    try:
        out = np.asarray(jax.jit(cached_fn)(np.arange(12.0, dtype=np.float32).reshape(3, 4)))
    finally:
        monitoring.unregister_event_listener(listen)
    return out, len(hits)


def test_jax_builds_its_cache_through_the_hook(folder):
    """The private API compile_cache.enable relies on: JAX makes its cache with
    ``get_file_cache(path)`` at the first compile after ``reset_cache``, and keeps it in
    ``_cache``."""
    from jax._src import compilation_cache as cc
    assert list(inspect.signature(cc.get_file_cache).parameters) == ["path"]
    assert list(inspect.signature(compile_cache._file_cache).parameters) == ["path"]
    assert "get_file_cache(" in inspect.getsource(cc._initialize_cache)
    _compile_and_count()
    assert isinstance(cc._cache, EntryCache), f"JAX built {type(cc._cache)}, not ours"
    assert cc._cache.max_bytes == compile_cache.DEFAULT_MAX_BYTES
    assert jax.config.jax_persistent_cache_enable_xla_caches == "none"
    [entry] = _entries(folder)
    assert entry.read_bytes().startswith(MAGIC)
    assert entry.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask():
    from repr_jax.files import umask
    return umask()


def test_a_second_compile_hits_the_cache(folder):
    first, hits = _compile_and_count()
    assert hits == 0 and len(_entries(folder)) == 1
    again, hits = _compile_and_count()
    assert hits == 1
    np.testing.assert_array_equal(first, again)


def test_a_truncated_entry_is_named_not_used_and_rewritten(folder):
    expected, _ = _compile_and_count()
    [entry] = _entries(folder)
    whole = entry.read_bytes()
    entry.write_bytes(whole[: len(whole) // 2])  # what a kill in the middle of a write leaves
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, hits = _compile_and_count()
    named = [str(w.message) for w in caught if str(entry) in str(w.message)]
    assert len(named) == 1 and "damaged" in named[0] and "\n" not in named[0], named
    assert hits == 0
    np.testing.assert_array_equal(out, expected)
    assert EntryCache(folder, max_bytes=-1).get(entry.name.removesuffix(SUFFIX))  # rewritten whole
    assert _compile_and_count()[1] == 1


def test_a_changed_byte_is_caught_by_the_digest(tmp_path):
    cache = EntryCache(tmp_path, max_bytes=-1)
    cache.put("k", b"payload" * 100)
    assert cache.get("k") == b"payload" * 100
    path = cache.entry("k")
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=f"removed {path}: damaged .*digest"):
        assert cache.get("k") is None
    assert not path.exists()
    assert cache.get("absent") is None


def test_a_long_key_gets_a_short_file_name(tmp_path):
    cache = EntryCache(tmp_path, max_bytes=-1)
    long_a, long_b = "jit_" + "a" * 300 + "-1", "jit_" + "a" * 300 + "-2"
    cache.put(long_a, b"1")
    cache.put(long_b, b"2")
    assert len(cache.entry(long_a).name) < 200
    assert (cache.get(long_a), cache.get(long_b)) == (b"1", b"2")


def test_the_size_cap_evicts_the_least_recently_used(tmp_path):
    size = len(MAGIC) + 32 + 1000
    cache = EntryCache(tmp_path, max_bytes=3 * size)
    for i, key in enumerate("abc"):
        cache.put(key, bytes(1000))
        os.utime(cache.entry(key), ns=(i * 10**9, i * 10**9))  # a, then b, then c
    assert cache.get("a") is not None  # used now: the most recent
    cache.put("d", bytes(1000))
    assert sorted(p.stem for p in tmp_path.glob(f"*{SUFFIX}")) == ["a", "c", "d"]
    with pytest.warns(UserWarning, match="exceeds the cap"):
        cache.put("huge", bytes(4 * size))
    assert not cache.entry("huge").exists()


def test_enable_passes_the_cap_to_jax(tmp_path, restore_jax):
    from jax._src import compilation_cache as cc
    compile_cache.enable(tmp_path, max_bytes=12345)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _compile_and_count()
    assert cc._cache.max_bytes == 12345


def test_the_off_switch_writes_nothing(tmp_path, monkeypatch, restore_jax):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for off in ("0", "off"):
        monkeypatch.setenv(compile_cache.ENV, off)
        assert compile_cache.enable() is None
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _compile_and_count()
    assert list(tmp_path.iterdir()) == []
    assert jax.config.jax_compilation_cache_dir is None


def test_the_folder_follows_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    assert compile_cache.folder_from_env() == tmp_path / "xdg" / "repr_jax" / "xla"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert compile_cache.folder_from_env() == tmp_path / ".cache" / "repr_jax" / "xla"
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "elsewhere"))
    assert compile_cache.folder_from_env() == tmp_path / "elsewhere"


def test_a_folder_that_cannot_be_made_leaves_it_off(tmp_path, restore_jax):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match=f"compile cache off: cannot make {blocker}"):
        assert compile_cache.enable(blocker / "xla") is None
    assert jax.config.jax_compilation_cache_dir is None


def test_the_cli_enables_it_at_start(monkeypatch, capsys):
    from repr_jax import cli
    calls = []
    monkeypatch.setattr(compile_cache, "enable", lambda *a, **k: calls.append(a))
    assert cli.main(["list"]) == 0
    assert calls == [()]


# --------------------------------------------------------------------------------------------------
# Other processes: a second run hits; a writer killed at any moment leaves nothing used or behind
# --------------------------------------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import os, sys, time, warnings
    warnings.simplefilter("always")
    from repr_jax import compile_cache
    import jax, jax.numpy as jnp
    from jax._src import monitoring
    compile_cache.enable(sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if sys.argv[2] == "hang":  # the entry's temporary is written; hang before the rename
        real_fsync = os.fsync
        def fsync(fd):
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
                print("writing", flush=True)
                time.sleep(600)
            real_fsync(fd)
        os.fsync = fsync
    hits = []
    monitoring.register_event_listener(
        lambda name, **k: hits.append(name) if name.endswith("/cache_hits") else None)
    def cached_fn(x):
        for _ in range(int(sys.argv[3])):
            x = jnp.tanh(x @ x.T) + jnp.sin(x)
        return x.sum()
    print("result", float(jax.jit(cached_fn)(jnp.ones((8, 8)) / 8)), flush=True)
    print("hits", len(hits), flush=True)
""")


def _child(folder, mode="plain", depth=3, **kw):
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(folder), mode, str(depth)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _finish(proc):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    return float(lines["result"]), int(lines["hits"]), err


@pytest.mark.slow
def test_a_second_process_hits_the_cache(tmp_path):
    result, hits, _ = _finish(_child(tmp_path))
    assert hits == 0 and len(_entries(tmp_path)) == 1
    again, hits, _ = _finish(_child(tmp_path))
    assert hits >= 1 and again == result


@pytest.mark.slow
def test_a_writer_killed_in_the_write_leaves_no_half_entry_and_no_temporary(tmp_path):
    proc = _child(tmp_path, "hang")
    assert proc.stdout.readline() == "writing\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # remove_stale takes only files last written before a process started (10 ms ticks): a rerun
    # starts later than this in practice.
    time.sleep(0.05)
    [temporary] = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert not _entries(tmp_path)  # only ever renamed into place whole
    result, hits, err = _finish(_child(tmp_path))
    assert hits == 0
    assert f"removed {temporary}" in err  # named, in one warning
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(_entries(tmp_path)) == 1
    assert _finish(_child(tmp_path))[1] >= 1


@pytest.mark.slow
def test_kills_at_random_moments_leave_only_whole_entries(tmp_path):
    rng = np.random.default_rng(0)
    for depth in range(4):  # a new program each time: each kill may land in its write
        proc = _child(tmp_path, depth=20 + depth)
        time.sleep(rng.uniform(0.5, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    time.sleep(0.05)  # the next process starts after every temporary was last written (above)
    _, _, err = _finish(_child(tmp_path, depth=20))
    assert "damaged" not in err, err
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    cache = EntryCache(tmp_path, max_bytes=-1)
    for entry in tmp_path.glob(f"*{SUFFIX}"):
        data = entry.read_bytes()
        assert data.startswith(MAGIC)
        assert cache.get(entry.name.removesuffix(SUFFIX)) is not None, entry
