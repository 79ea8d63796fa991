"""Multi-host training: 2 processes on localhost (jax.distributed, gloo CPU collectives), each
feeding its half of every global batch, train exactly as one process with the same 2 devices."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import needs_loopback

PROGRAM = textwrap.dedent("""
    import json, sys
    import jax
    import numpy as np
    port, pid, nproc, workdir, out = sys.argv[1:6]
    if int(nproc) > 1:
        jax.distributed.initialize(coordinator_address=f"localhost:{port}",
                                   num_processes=int(nproc), process_id=int(pid))
    from repr_jax import config
    from repr_jax.train import train_and_evaluate
    cfg = config.override(config.Config(), [
        "data.num_examples=1000", "encoder.widths=(8,16)", "encoder.kernel_size=3",
        "method.proj_hidden=16", "method.proj_dim=8", "optim.warmup_steps=2",
        "train.batch_size=32", "train.steps=6", "train.ckpt_every=3", "train.log_every=1",
        "eval.evaluators=('knn',)", "eval.bootstrap=0", "eval.reference_rows=False"])
    result = train_and_evaluate(cfg, workdir, progress=False, verbose=False)
    assert len(jax.devices()) == 2 and jax.process_count() == int(nproc)
    leaves = jax.tree.leaves(result["state"].params)
    np.savez(out, *[np.asarray(x) for x in leaves])  # replicated: every process holds it whole
    if jax.process_index() == 0:
        json.dump(result["eval_rows"], open(out + ".json", "w"))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@needs_loopback
def test_two_processes_train_as_one(tmp_path, mnist1d_small):  # the fixture prepares the data
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1",
               JAX_PLATFORMS="cpu")
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM, str(port), str(i), "2",
                               str(tmp_path / "two"), str(tmp_path / f"two_{i}.npz")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    one = subprocess.run([sys.executable, "-c", PROGRAM, "0", "0", "1", str(tmp_path / "one"),
                          str(tmp_path / "one.npz")], capture_output=True, text=True,
                         env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=2"),
                         timeout=600)
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-3000:]
    assert one.returncode == 0, one.stderr[-3000:]

    reference = np.load(tmp_path / "one.npz")
    for i in range(2):
        got = np.load(tmp_path / f"two_{i}.npz")
        assert len(got.files) == len(reference.files)
        for k in reference.files:
            np.testing.assert_allclose(got[k], reference[k], rtol=1e-5, atol=1e-6)
    # The checkpoints and the logs are the run's, once (process 0 writes them).
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir()
                  if p.name.isdigit()) == ["3", "6"]
    steps = [json.loads(line)["step"] for line in
             (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]
    rows = json.loads((tmp_path / "two_0.npz.json").read_text())
    ref_rows = json.loads((tmp_path / "one.npz.json").read_text())
    assert [(r["metric"], round(r["value"], 4)) for r in rows] == [
        (r["metric"], round(r["value"], 4)) for r in ref_rows]


@pytest.mark.slow
def test_a_down_loopback_is_named_in_one_line_within_seconds():
    """Inside a fresh network namespace (loopback down, as a bare ``unshare -n`` leaves it) the
    check names the cause and the fix at once, instead of a coordinator timing out minutes later."""
    import shutil
    import time
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot create a network namespace here (unshare -n)")
    conftest = os.path.join(os.path.dirname(os.path.dirname(__file__)), "conftest.py")
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('c', sys.argv[1]);"
            " m = importlib.util.module_from_spec(s); s.loader.exec_module(m);"
            " print(m.loopback_down())")
    t = time.perf_counter()
    down = subprocess.run(["unshare", "-n", sys.executable, "-c", code, conftest],
                          capture_output=True, text=True, timeout=120)
    up = subprocess.run(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
                         sys.executable, "-c", code, conftest],
                        capture_output=True, text=True, timeout=120)
    assert down.stdout.startswith("loopback interface is down"), down.stdout + down.stderr
    assert "run `ip link set lo up`" in down.stdout and down.stdout.count("\n") == 1
    assert up.stdout.strip() == "None", up.stdout + up.stderr
    assert time.perf_counter() - t < 60  # both interpreters start jax via conftest; seconds each
