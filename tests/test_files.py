"""Run files: atomic writes, damaged files named in one line, torn JSONL tails, one process per
run directory."""

import json
import os
import signal
import subprocess
import sys

import pytest

from repr_jax import files
from repr_jax.train.writers import JsonlWriter


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "run.json"
    files.write_json(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}

    def full_disk(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        files.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}  # the old file, whole
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]


def _old(path, *, directory=False):
    """``path`` created as a killed process leaves it: modified an hour before this one began."""
    path.mkdir() if directory else path.write_bytes(b"x" * 1000)
    t = files.process_start() - 3600
    os.utime(path, (t, t))
    return path


def test_a_killed_writes_temporary_is_removed_by_the_next_write_of_that_output(tmp_path):
    import fcntl
    out = tmp_path / "scored.jsonl"
    dead = _old(tmp_path / ".scored.jsonl.k1ll3d_x.tmp")
    held = _old(tmp_path / ".scored.jsonl.l1ve0000.tmp")  # a live writer's: it holds the lock
    young = tmp_path / ".scored.jsonl.y0ung000.tmp"  # newer than this process: maybe live
    young.write_bytes(b"y")
    others = [_old(tmp_path / ".other.jsonl.k1ll3d_x.tmp"),  # other outputs' temporaries
              _old(tmp_path / ".scored.jsonl.blake2b.k1ll3d_x.tmp"), _old(tmp_path / "x.tmp")]
    writer = open(held, "rb")
    fcntl.flock(writer, fcntl.LOCK_EX)
    with pytest.warns(UserWarning) as said:
        files.write_text(out, "new\n")
    assert [str(w.message) for w in said] == [
        f"removed {dead}: a temporary copy of scored.jsonl that a killed run left"]
    assert out.read_text() == "new\n" and not dead.exists()
    assert held.exists() and young.exists() and all(p.exists() for p in others)
    os.utime(young, (0, 0))  # now older than this process, and held by none
    with pytest.warns(UserWarning) as said:
        files.write_verified(out, b"again")  # the data, then its digest: both write_bytes
    assert [str(w.message) for w in said] == [
        f"removed {young}: a temporary copy of scored.jsonl that a killed run left",
        f"removed {others[1]}: a temporary copy of scored.jsonl.blake2b that a killed run left"]
    assert held.exists() and not young.exists()
    writer.close()  # its writer died: the next write removes it
    with pytest.warns(UserWarning, match=r"l1ve0000\.tmp: a temporary copy of scored.jsonl"):
        files.write_text(out, "new\n")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".scored")) == []


def test_the_process_start_is_before_now_and_a_child_starts_later():
    import time
    mine = files.process_start()
    assert mine <= files._IMPORTED <= time.time()  # noqa: SLF001
    child = subprocess.run([sys.executable, "-c", "import time; from repr_jax import files; "
                            "print(files.process_start(), time.time())"],
                           capture_output=True, text=True, check=True)
    start, now = map(float, child.stdout.split())
    assert mine < start <= now and now - start < 60


def test_a_scratch_folder_removes_a_killed_runs_and_keeps_a_live_ones(tmp_path):
    dead = _old(tmp_path / "repr_jax_tokens_d3ad0000", directory=True)
    (dead / ".index.abc.partial").mkdir()
    (dead / ".index.abc.partial" / "vectors.npy").write_bytes(b"\0" * 4096)
    os.utime(dead, (0, 0))
    link = tmp_path / "repr_jax_tokens_l1nk0000"  # never followed, never removed
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.warns(UserWarning) as said:
        with files.scratch_folder(tmp_path, prefix="repr_jax_tokens_",
                                  what="a token index") as live:
            assert [str(w.message) for w in said] == [
                f"removed {dead}: a token index that a killed run left"]
            os.utime(live, (0, 0))  # a live run's, started long ago: it holds its lock
            with files.scratch_folder(tmp_path, prefix="repr_jax_tokens_",
                                      what="a token index") as mine:
                assert mine.is_dir() and mine != live and live.is_dir()
            assert len(said) == 1 and live.is_dir() and not mine.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [link.name]


@pytest.mark.parametrize("content, reason", [("", "it is empty"), ('{"a": ', "not valid JSON"),
                                             ("\x00\xff", "not valid JSON")])
def test_a_damaged_file_is_named_with_the_fix(tmp_path, content, reason):
    path = tmp_path / "config.json"
    path.write_text(content, errors="surrogateescape")
    with pytest.raises(files.DamagedFile) as e:
        files.read_json(path, fix="start a new --workdir")
    msg = str(e.value)
    assert str(path) in msg and reason in msg and msg.endswith("start a new --workdir")
    assert "\n" not in msg


def test_a_torn_last_line_is_dropped_with_a_warning_and_a_bad_middle_line_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    with pytest.warns(UserWarning, match="dropped its torn last line 3"):
        assert files.read_jsonl(path, drop_torn_tail=True) == [{"step": 1}, {"step": 2}]
    with pytest.raises(files.DamagedFile, match="line 3 is damaged"):
        files.read_jsonl(path)
    path.write_text('{"step": 1}\ngarbage\n{"step": 3}\n')
    with pytest.raises(files.DamagedFile, match=r"metrics.jsonl line 2 is damaged"):
        files.read_jsonl(path, drop_torn_tail=True)


def test_a_resumed_metrics_log_drops_its_torn_line(tmp_path):
    """A crash (or a full disk) mid-append leaves a torn line; the resumed run drops it."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n{"step": 3, "lo')
    with pytest.warns(UserWarning, match="torn last line"):
        writer = JsonlWriter(path, resume_step=2)
    writer.write_scalars(3, {"loss": 0.25})
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path):
    with files.WorkdirLock(tmp_path):
        with pytest.raises(files.WorkdirBusy, match=rf"in use by pid {os.getpid()} on "):
            files.WorkdirLock(tmp_path).acquire()
        files.WorkdirLock(tmp_path, process=1).acquire().release()  # another host's own file
    files.WorkdirLock(tmp_path).acquire().release()  # released


@pytest.mark.slow
def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from repr_jax.files import WorkdirLock; "
         f"lock = WorkdirLock({str(tmp_path)!r}).acquire(); print('held', flush=True); "
         "time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(files.WorkdirBusy, match=f"pid {holder.pid}"):
            files.WorkdirLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    files.WorkdirLock(tmp_path).acquire().release()


def test_a_full_disk_is_one_line_naming_the_path_and_the_free_space(tmp_path):
    """/dev/full fails every write with ENOSPC, as a full disk does."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    log = tmp_path / "metrics.jsonl"
    log.symlink_to("/dev/full")
    with pytest.raises(files.StorageError) as e:
        files.append_line(log, '{"step": 1}')
    msg = str(e.value)
    assert "No space left on device" in msg and "free" in msg and "rerun to resume" in msg
    assert "\n" not in msg and str(log) in msg
    wrapped = RuntimeError("async save failed")  # how orbax's background writers report it
    wrapped.__cause__ = OSError(28, "No space left on device")
    assert isinstance(files.storage_error(wrapped, tmp_path), files.StorageError)
    assert files.storage_error(RuntimeError("unrelated"), tmp_path) is None


def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path):
    """A ``.lock`` symlink in a shared run folder must not let the lock truncate and overwrite the
    file it points to (the lock is opened with O_NOFOLLOW); a lock that is no regular file (a
    FIFO) is refused too."""
    from repr_jax.files import WorkdirBusy, WorkdirLock
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(victim)
    with pytest.raises(WorkdirBusy, match=r"\.lock is a symbolic link .*remove it"):
        WorkdirLock(run).acquire()
    assert victim.read_text() == "keep me\n"
    (run / ".lock").unlink()
    os.mkfifo(run / ".lock")
    with pytest.raises(WorkdirBusy, match="not a regular file"):
        WorkdirLock(run).acquire()
    (run / ".lock").unlink()
    with WorkdirLock(run) as lock:  # an ordinary lock still works
        assert lock.path.read_text().startswith("pid ")


def test_a_keyed_cache_is_one_folder_a_run_and_never_through_a_link(tmp_path):
    from repr_jax.files import keyed_cache
    a = keyed_cache(tmp_path / "cache", "/runs/a|step 10|q16 d16", what="cached embeddings")
    b = keyed_cache(tmp_path / "cache", "/runs/a|step 20|q16 d16", what="cached embeddings")
    assert a.parent == b.parent == tmp_path / "cache" and a != b
    assert a == keyed_cache(tmp_path / "cache", "/runs/a|step 10|q16 d16", what="x")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=r"cache is a symbolic link .*cached embeddings"):
        keyed_cache(tmp_path / "cache", "/runs/a|step 10|q16 d16", what="cached embeddings")
