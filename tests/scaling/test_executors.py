"""Executors: one sweep run locally, as submitit (SLURM) jobs in its local mode, and on a real
two-node Ray cluster started here, gives the same table; a point killed on the cluster is retried
and resumes; a killed driver, rerun, finishes the table without training a finished point again.

The Ray cluster binds to 127.0.0.1 only: the scenario runs in a new network namespace that has
nothing but loopback (``unshare -n``; Ray's ``ray start`` otherwise resolves 127.0.0.1 to the
machine's outward address and listens on every interface)."""

import csv
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from repr_jax import files
from repr_jax.config import ConfigError
from repr_jax.scaling import load_sweep, run_sweep
from repr_jax.scaling.executors import (TOKEN_FILE, WorkdirNotShared, make_executor,
                                        run_remote_point, running_elsewhere)

# Six tiny points; 200 steps with a checkpoint every 20 leave time to kill one mid-training.
SWEEP_FILE = textwrap.dedent("""
    from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                                 OptimConfig, TrainConfig)
    from repr_jax.scaling import Sweep

    def get_sweep(arg=None):
        base = Config(
            data=DataConfig(name="mnist1d", num_examples=1000, workers=0),
            encoder=EncoderConfig(name="mlp", widths=(16,)),
            method=MethodConfig(name="simclr", proj_hidden=16, proj_dim=8),
            optim=OptimConfig(lr=1e-3, warmup_steps=2),
            train=TrainConfig(batch_size=32, steps=200, ckpt_every=20, log_every=20,
                              num_devices=1),
            eval=EvalConfig(evaluators=("knn",), bootstrap=20, reference_rows=False))
        return Sweep(base=base, grid={"optim.lr": [1e-3, 1e-2],
                                      "data.train_examples": [200, 400]})
""")
# Columns that depend on where and when a point ran, not on what it computed.
PLACEMENT = ("node", "error")


def _table(path):
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in PLACEMENT} for row in csv.DictReader(f)]


def _status(run_dir):
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(condition, what, timeout=300, proc=None):
    deadline = time.time() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the sweep exited first:\n{proc.stderr.read()[-3000:]}")
        if time.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _checkpoints(run_dir):
    ckpts = run_dir / "checkpoints"
    return [int(p.name) for p in ckpts.iterdir() if p.name.isdigit()] if ckpts.is_dir() else []


def _sweep_cli(sweep_file, workdir, *args):
    return subprocess.Popen([sys.executable, "-m", "repr_jax.cli", "sweep", str(sweep_file),
                             "--workdir", str(workdir), "--no-progress", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _netns_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


def test_a_node_that_cannot_see_the_workdir_is_named(tmp_path):
    (tmp_path / "runs" / "p").mkdir(parents=True)
    with pytest.raises(WorkdirNotShared, match="node n1 cannot see the sweep's workdir .*not "
                                               "there.*every node mounts"):
        run_remote_point(str(tmp_path / "runs" / "p"), "abc", {}, "n1")
    files.write_text(tmp_path / TOKEN_FILE, "another sweep's\n")
    with pytest.raises(WorkdirNotShared, match="another directory is at that path"):
        run_remote_point(str(tmp_path / "runs" / "p"), "abc", {}, "n1")


def test_executor_errors_and_a_held_point_lock(tmp_path):
    with pytest.raises(ConfigError, match="unknown executor 'k8s'; choose from local, ray, slurm"):
        make_executor("k8s", tmp_path)
    with pytest.raises(ConfigError, match="--executor local takes none of"):
        make_executor("local", tmp_path, options={"address": "x"})
    from repr_jax.scaling.executors import point_lock
    with point_lock(tmp_path):
        assert running_elsewhere(tmp_path) == f"pid {os.getpid()} on {os.uname().nodename}"
    assert running_elsewhere(tmp_path) is None


def test_slurm_without_slurm_refuses_instead_of_running_here(tmp_path):
    """submitit falls back to running points as local processes where there is no sbatch; the
    sweep said nothing. Now that is refused unless asked for (--slurm-cluster local)."""
    pytest.importorskip("submitit")
    import shutil
    if shutil.which("sbatch"):
        pytest.skip("this machine has SLURM")
    with pytest.raises(ConfigError, match="no SLURM on this machine.*--slurm-cluster local"):
        make_executor("slurm", tmp_path)
    assert make_executor("slurm", tmp_path, options={"cluster": "local"}).local


def test_an_unreachable_ray_cluster_fails_in_one_line_and_keeps_the_sweep(tmp_path, capsys):
    """`--ray-address 127.0.0.1:1` retried "Failed to connect to GCS" for ever."""
    pytest.importorskip("ray")
    from repr_jax.cli import main
    from repr_jax.scaling import executors
    with pytest.raises(ConfigError, match=r"no Ray cluster answers at 127.0.0.1:1 within 10 s"):
        executors._check_reachable("127.0.0.1:1")
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        executors._check_reachable("nohost")
    assert main(["sweep", "--config", "simclr_mnist1d:quick", "--grid", "seed=[0,1]",
                 "--workdir", str(tmp_path / "sw"), "--executor", "ray", "--ray-address",
                 "127.0.0.1:1"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "no Ray cluster answers" in err[0]  # (data preparation aside)
    assert (tmp_path / "sw" / "sweep.json").exists()  # resumable once a cluster is there


def test_the_cli_refuses_another_executors_flags(capsys):
    from repr_jax.cli import main
    assert main(["sweep", "x", "--workdir", "w", "--executor", "ray",
                 "--slurm-partition", "gpu"]) == 2
    assert "--executor ray takes no partition" in capsys.readouterr().err


@pytest.mark.slow
def test_local_slurm_and_ray_executors_write_the_same_table(tmp_path, monkeypatch):
    if os.environ.get("REPR_JAX_IN_NETNS") != "1" and _netns_available():
        # Again, inside a network namespace with only loopback: Ray can bind nowhere else.
        test = f"{Path(__file__)}::test_local_slurm_and_ray_executors_write_the_same_table"
        inner = subprocess.run(
            ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" -m pytest -q -n 0 '
             '-p no:cacheprovider --basetemp "$1" "$2"', sys.executable,
             str(tmp_path / "netns"), test],
            env=dict(os.environ, REPR_JAX_IN_NETNS="1"), capture_output=True, text=True,
            timeout=1500)
        assert inner.returncode == 0, (inner.stdout + inner.stderr)[-6000:]
        assert "1 passed" in inner.stdout, inner.stdout[-3000:]
        return
    pytest.importorskip("ray")
    pytest.importorskip("submitit")
    from conftest import CLI_COMPILE_CACHE
    monkeypatch.setenv("REPR_JAX_COMPILE_CACHE", CLI_COMPILE_CACHE)  # the points' processes
    sweep_file = tmp_path / "four_points.py"
    sweep_file.write_text(SWEEP_FILE)
    sweep = load_sweep(str(sweep_file))

    # ------------------------------------------------ local, then submitit's local cluster
    run_sweep(sweep, tmp_path / "local", jobs=2, progress=False)
    local = _table(tmp_path / "local" / "results.csv")
    assert len(local) == 4 and {r["status"] for r in local} == {"finished"}
    # Each point tags its grid values (only those) for TensorBoard's HParams view.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(tmp_path / "local" / "runs" / "lr=0.001,train_examples=200"))
    events.Reload()
    start = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    assert b"optim.lr" in start and b"data.train_examples" in start
    assert b"encoder.widths" not in start
    run_sweep(sweep, tmp_path / "slurm", jobs=2, progress=False, executor="slurm",
              executor_options={"cluster": "local"})
    assert _table(tmp_path / "slurm" / "results.csv") == local
    assert list((tmp_path / "slurm" / "slurm").iterdir())  # submitit's job folders

    # ------------------------------------------------ a head and a worker node on 127.0.0.1
    # The cluster's own token, read by every node and the driver (they inherit the environment):
    # a token an earlier Ray head left in ~/.ray/auth_token must not decide whether nodes join.
    token = tmp_path / "ray_auth_token"
    token.write_text(secrets.token_hex(32))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats"]

    def ports(base):
        return ["--node-manager-port", str(base), "--object-manager-port", str(base + 1),
                "--min-worker-port", str(base + 10), "--max-worker-port", str(base + 60),
                "--dashboard-agent-listen-port", str(base + 2),
                "--dashboard-agent-grpc-port", str(base + 3),
                "--metrics-export-port", str(base + 4), "--runtime-env-agent-port",
                str(base + 5)]

    address = "127.0.0.1:26379"
    try:
        subprocess.run(["ray", "start", "--head", "--port", "26379", "--include-dashboard", "false",
                        "--ray-client-server-port", "26378", *common, *ports(26400)],
                       check=True, env=env, capture_output=True, timeout=180)
        subprocess.run(["ray", "start", "--address", address, *common, *ports(26500)],
                       check=True, env=env, capture_output=True, timeout=180)
        _ray_scenario(sweep_file, tmp_path / "ray", address, local)
    finally:
        subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, timeout=120)


def _ray_scenario(sweep_file, workdir, address, local):
    runs = workdir / "runs"
    first, second = "lr=0.001,train_examples=200", "lr=0.001,train_examples=400"

    # A point's process SIGKILLed mid-training: Ray retries the task; it resumes.
    driver = _sweep_cli(sweep_file, workdir, "--executor", "ray", "--ray-address", address)
    _wait(lambda: _status(runs / first).get("status") == "running"
          and any(s >= 40 for s in _checkpoints(runs / first)), "a checkpoint", proc=driver)
    killed_pid = _status(runs / first)["pid"]
    os.kill(killed_pid, signal.SIGKILL)

    # The driver SIGKILLed once a point has finished: its tasks die with it (Ray ends a dead
    # driver's tasks; the points' processes follow their Ray workers).
    _wait(lambda: any(_status(d).get("status") == "finished" for d in runs.iterdir())
          and any(_status(d).get("status") == "running" for d in runs.iterdir()),
          "a finished and a running point", proc=driver)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    finished = {d.name: (d / "metrics.jsonl").read_bytes() for d in runs.iterdir()
                if _status(d).get("status") == "finished"}
    interrupted = [_status(d)["pid"] for d in runs.iterdir()
                   if _status(d).get("status") == "running"]
    _wait(lambda: not any(_alive(pid) for pid in interrupted), "the dead driver's points to stop",
          timeout=120)

    rerun = _sweep_cli(sweep_file, workdir, "--executor", "ray", "--ray-address", address)
    _, err = rerun.communicate(timeout=900)
    assert rerun.returncode == 0, err[-3000:]
    assert _table(workdir / "results.csv") == local
    for name, metrics in finished.items():  # not trained again
        assert (runs / name / "metrics.jsonl").read_bytes() == metrics, name
    killed_log = (runs / first / "log.txt").read_text()
    assert "resuming from step" in killed_log
    assert [json.loads(line)["step"] for line in (runs / first / "metrics.jsonl").open()] == \
        list(range(20, 201, 20))
    with open(workdir / "results.csv", newline="") as f:
        nodes = {row["node"] for row in csv.DictReader(f)}
    assert len(nodes) == 2, nodes  # both the head and the worker trained points
    assert _status(runs / second)["status"] == "finished"
