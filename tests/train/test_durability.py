"""Runs that survive what happens to real runs, end to end through ``repr-jax``: kill -9 at many
moments (mid-step, mid-checkpoint-write, mid-evaluation) resumes bitwise; a full disk is one line
and the run resumes once space is freed; a poisoned state is never kept as "the last good one"."""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import CLI_COMPILE_CACHE

RUN = ["train", "--no-progress", "--set", "data.num_examples=1000", "--set", "train.steps=24",
       "--set", "train.ckpt_every=4", "--set", "train.eval_every=12", "--set", "train.log_every=1",
       "--set", "train.batch_size=32", "--set", "encoder.widths=(8,16)",
       "--set", "eval.evaluators=('knn','linear_probe')", "--set", "eval.bootstrap=50"]
ENV = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1",
           REPR_JAX_COMPILE_CACHE=CLI_COMPILE_CACHE)


# The killed run reads its data by index from the array_record files (the streaming path); the
# uninterrupted one holds it in memory: the same batches either way, so bitwise the same states.
STREAMED = ["--set", "data.in_memory_mb=0"]


def _start(workdir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "repr_jax.cli", *RUN, *STREAMED, "--workdir",
                             str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)


def _rows(workdir: Path) -> int:
    path = workdir / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 240) -> str:
    """SIGKILLs ``proc`` as soon as ``ready()`` holds (polled every 2 ms); returns what it saw."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        seen = ready()
        if seen:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            return seen
        if proc.poll() is not None:
            pytest.fail(f"the run ended before the kill: {proc.communicate()[1][-2000:]}")
        time.sleep(0.002)
    proc.kill()
    pytest.fail("the kill moment never came")


def _final_state(workdir: Path):
    """The arrays of the final checkpoint (step 24), on the host."""
    state = ocp.StandardCheckpointer().restore(workdir / "checkpoints" / "24" / "state")
    return jax.tree.map(np.asarray, state)


@pytest.mark.slow
def test_kill_9_at_many_moments_resumes_bitwise(tmp_path):
    full = tmp_path / "full"
    r = subprocess.run([sys.executable, "-m", "repr_jax.cli", *RUN, "--workdir", str(full)],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]

    killed = tmp_path / "killed"
    rng = np.random.default_rng(0)
    ckpts = killed / "checkpoints"

    def writing_checkpoint():  # orbax writes into a temporary folder, then renames it
        for p in ckpts.glob("*tmp*") if ckpts.exists() else ():
            try:
                if p.stat().st_mtime > started[0]:
                    return f"checkpoint write ({p.name})"
            except FileNotFoundError:  # renamed into place between the listing and the stat
                pass
        return ""

    def after_row(n):
        return lambda: f"after metrics row {n}" if _rows(killed) >= n else ""

    def evaluating():  # step 12's metrics are written, its evaluation runs before step 13
        return "evaluation at step 12" if _rows(killed) >= 12 and not (
            killed / "eval" / "step_12.json").exists() else ""

    moments = [after_row(int(rng.integers(1, 6))),  # before any checkpoint
               writing_checkpoint, evaluating, after_row(int(rng.integers(17, 20))),
               writing_checkpoint, after_row(24)]  # during the final evaluation
    seen, started = [], [0.0]
    for ready in moments:
        started[0] = time.time()
        seen.append(_kill_when(_start(killed), ready))
    proc = _start(killed)  # the run, resumed once more, finishes
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert len(seen) >= 5 and any("checkpoint write" in s for s in seen), seen

    a, b = _final_state(full), _final_state(killed)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)  # bitwise
    rows = [json.loads(line) for line in (killed / "metrics.jsonl").open()]
    full_rows = [json.loads(line) for line in (full / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == list(range(1, 25))
    assert [r["loss"] for r in rows] == [r["loss"] for r in full_rows]
    for step in (12, 24):
        def values(d):
            return {(r["representation"], r["evaluator"], r["metric"]): r["value"]
                    for r in json.loads((d / "eval" / f"step_{step}.json").read_text())}
        assert values(killed) == values(full)


def _unshare_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m none /mnt"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_the_run_resumes_once_space_is_freed(tmp_path):
    """A real full disk: the run directory is on a tmpfs of a few MiB, filled before the run's
    first checkpoint; the error is one line naming the path and the free space; after the filler
    is removed, the same command resumes and finishes (a torn metrics line, if any, dropped)."""
    if not _unshare_available():
        pytest.skip("needs unshare -rm to mount a small tmpfs")
    mount = tmp_path / "disk"
    mount.mkdir()
    cli = shlex.join([sys.executable, "-m", "repr_jax.cli", *RUN, "--workdir", str(mount / "run")])
    script = f"""
set -u
mount -t tmpfs -o size=4m none {mount}
# Fill the disk but for 32 KiB: config.json and a few metrics rows fit, a checkpoint does not.
dd if=/dev/zero of={mount}/filler bs=4k 2>/dev/null
truncate -s -32K {mount}/filler
{cli} > {tmp_path}/first.out 2> {tmp_path}/first.err
echo $? > {tmp_path}/first.rc
rm {mount}/filler
{cli} > {tmp_path}/second.out 2> {tmp_path}/second.err
echo $? > {tmp_path}/second.rc
cp -r {mount}/run {tmp_path}/run
"""
    subprocess.run(["unshare", "-rm", "sh", "-c", script], check=True, env=ENV, timeout=900)
    first_err = (tmp_path / "first.err").read_text()
    errors = [line for line in first_err.splitlines() if line.startswith("repr-jax: error")]
    assert (tmp_path / "first.rc").read_text().strip() == "2", first_err[-3000:]
    assert "Traceback" not in first_err, first_err[-3000:]
    assert len(errors) == 1 and "free space and rerun" in errors[0] and "free" in errors[0]
    assert str(mount / "run") in errors[0]
    assert (tmp_path / "second.rc").read_text().strip() == "0", (
        tmp_path / "second.err").read_text()[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == list(range(1, 25))
