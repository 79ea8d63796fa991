"""Where a sweep's points run: ``local`` (processes on this machine), ``ray`` (one Ray task per
point on a Ray cluster) or ``slurm`` (submitit array jobs).

An executor only places processes. Every point is the same process on every executor —
:func:`repr_jax.scaling.sweep.run_point` on ``RUN_DIR``, started through :data:`_PRELUDE` — which
trains the point and records its outcome in ``RUN_DIR/status.json``; the sweep
(:func:`repr_jax.scaling.sweep.run_sweep`) reads outcomes and writes the table from there, so
failure isolation, resume and the table are the same whichever executor ran the points.

A point's process holds ``RUN_DIR/.point.lock`` (``flock``; released by the OS when it dies, and
seen across NFS clients) while it runs. A second process for the same point exits at once with
:data:`EX_DUPLICATE`, and a finished point is never trained again; a sweep that finds a point's
lock held (its earlier driver was killed, and SLURM jobs outlive it) waits for that process
instead of starting another.
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Protocol, Sequence

from repr_jax import files
from repr_jax.config import ConfigError

EXECUTORS = ("local", "ray", "slurm")
# A point's status.json says one of these (written by the point's process; "running" left behind
# by a killed process means interrupted).
FINISHED, FAILED, RUNNING, PENDING = "finished", "failed", "running", "pending"
EX_DUPLICATE = 75  # a point's process that found the point already running (EX_TEMPFAIL)
POINT_LOCK = ".point.lock"
TOKEN_FILE = ".executor-token"
# Environment a point needs wherever it runs: where data lives, JAX/XLA settings.
FORWARDED_ENV = ("REPR_JAX_", "JAX_", "XLA_", "TFDS_", "OPENBLAS_NUM_THREADS")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a point's process ended: its exit code (negative: killed by that signal) and what the
    executor knows beyond the point's own status.json (a lost node, an unreachable workdir)."""
    returncode: int
    error: str = ""


class Handle(Protocol):
    def poll(self) -> Outcome | None: ...  # None while it runs
    def cancel(self) -> None: ...


def read_json_or(path: Path, default: Any = None) -> Any:
    """``path``'s JSON, or ``default`` when it is missing or damaged (with a warning naming it)."""
    try:
        return files.read_json(path)
    except FileNotFoundError:
        return default
    except files.DamagedFile as e:
        warnings.warn(f"{e}; read as missing", stacklevel=2)
        return default


def point_status(run_dir: Path) -> dict[str, Any]:
    """``{"status": finished | failed | running | pending, ...}`` from the point's status.json."""
    return read_json_or(Path(run_dir) / "status.json", {"status": PENDING})


# --------------------------------------------------------------------------------------------------
# The point's process
# --------------------------------------------------------------------------------------------------

# A point's process starts here, before anything imports JAX: it dies with its launcher (even
# when that is SIGKILLed: PR_SET_PDEATHSIG), and is pinned to its cores before XLA sizes its
# threads.
_PRELUDE = """
import os, signal, sys
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    if os.getppid() != {ppid}:
        sys.exit(1)
cores = {cores!r}
if cores:
    os.sched_setaffinity(0, cores)
from pathlib import Path
from repr_jax.scaling.sweep import run_point
sys.exit(run_point(Path(sys.argv[1])))
"""


def start_point(run_dir: Path, cores: str | None = None, env: dict[str, str] | None = None,
                node: str = "") -> subprocess.Popen:
    """Starts a point's process (its output appended to ``run_dir/log.txt``), pinned to
    ``cores`` ("0,1") when given; ``node`` is recorded in its status.json."""
    env = dict(os.environ if env is None else env)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["REPR_JAX_NODE"] = node or socket.gethostname()
    prelude = _PRELUDE.format(ppid=os.getpid(),
                              cores={int(c) for c in cores.split(",")} if cores else None)
    log = (run_dir / "log.txt").open("ab")
    try:
        return subprocess.Popen([sys.executable, "-c", prelude, str(run_dir)], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    finally:
        log.close()


def point_lock(run_dir: Path) -> files.WorkdirLock:
    return files.WorkdirLock(run_dir, name=POINT_LOCK)


def running_elsewhere(run_dir: Path) -> str | None:
    """Who holds the point's lock ("pid N on HOST"), or None when no process runs it."""
    try:
        point_lock(run_dir).acquire().release()
    except files.WorkdirBusy as e:
        return e.holder
    return None


class WatchHandle:
    """A point whose process this sweep did not start (an earlier sweep's, still running): done
    when its lock is released, finished or not by what its status.json says."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def poll(self) -> Outcome | None:
        if running_elsewhere(self.run_dir):
            return None
        return Outcome(0 if point_status(self.run_dir)["status"] == FINISHED else -1)

    def cancel(self) -> None:
        pass  # not ours to stop


def _stop(proc: subprocess.Popen) -> None:
    """Stops a point's process so that it can resume: SIGINT, then SIGKILL."""
    try:  # a terminal's Ctrl-C reached it too; a lone SIGINT to the sweep did not
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


# --------------------------------------------------------------------------------------------------
# local
# --------------------------------------------------------------------------------------------------

def _has_accelerator_plugin() -> bool:
    """Whether JAX would find a GPU/TPU here, without initialising a backend (which would take
    the accelerator's memory away from the points' processes)."""
    import importlib.util
    import pkgutil
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms:
        return platforms.split(",")[0] not in ("cpu", "")
    if importlib.util.find_spec("libtpu") is not None:
        return True
    try:
        import jax_plugins
    except ImportError:
        return False
    return any(True for _ in pkgutil.iter_modules(jax_plugins.__path__))


def default_jobs() -> int:
    """Points trained at once: one per CPU core on CPU (small models train faster side by side on
    one core each than one after another on all of them: bench/README.md), one on an
    accelerator."""
    return 1 if _has_accelerator_plugin() else max(1, len(os.sched_getaffinity(0)))


def _core_slots(jobs: int) -> list[str | None]:
    """Disjoint CPU core sets, one per concurrent point (None: no pinning)."""
    if jobs <= 1 or _has_accelerator_plugin():
        return [None] * max(jobs, 1)
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // jobs)
    return [",".join(map(str, cores[(i * per) % len(cores):(i * per) % len(cores) + per]))
            for i in range(jobs)]


class _ProcessHandle:
    def __init__(self, proc: subprocess.Popen, release=lambda: None):
        self.proc, self._release = proc, release

    def poll(self) -> Outcome | None:
        if self.proc.poll() is None:
            return None
        self._release()
        return Outcome(self.proc.returncode)

    def cancel(self) -> None:
        _stop(self.proc)
        self._release()


class LocalExecutor:
    """``jobs`` points at once on this machine, each pinned to its own cores on CPU."""
    name = "local"

    def __init__(self, jobs: int | None = None):
        self.jobs = max(1, jobs or default_jobs())
        self._slots = _core_slots(self.jobs)
        self._free = list(range(self.jobs))

    def room(self) -> float:
        return len(self._free)

    def submit(self, run_dirs: Sequence[Path]) -> list[Handle]:
        handles = []
        for run_dir in run_dirs:
            slot = self._free.pop(0)
            handles.append(_ProcessHandle(start_point(run_dir, self._slots[slot]),
                                          lambda slot=slot: self._free.append(slot)))
        return handles

    def describe(self) -> str:
        return f"{self.jobs} at a time"

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------------
# Remote points (ray, slurm): the same process, started where the task landed
# --------------------------------------------------------------------------------------------------

class WorkdirNotShared(RuntimeError):
    """A node cannot see the sweep's workdir (or sees another directory at its path)."""


class PointKilled(RuntimeError):
    """A point's process died without recording an outcome (a signal, a lost node): retried."""


def _forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}


def run_remote_point(run_dir: str, token: str, env: dict[str, str], node: str) -> int:
    """Runs one point in a fresh process where a Ray task or SLURM job landed, and waits for
    it. Raises WorkdirNotShared when this node does not see the driver's workdir, PointKilled
    when the process died without an outcome (so the executor retries it; it resumes from its
    checkpoints)."""
    path = Path(run_dir)
    try:
        seen = (path.parent.parent / TOKEN_FILE).read_text().strip()
    except OSError:
        seen = None
    if seen != token:
        raise WorkdirNotShared(
            f"node {node} cannot see the sweep's workdir {path.parent.parent} (" +
            ("it is not there" if seen is None else "another directory is at that path") +
            "): a sweep on a cluster needs its --workdir on storage every node mounts at the "
            "same path (NFS, a cluster filesystem, GCS/S3 through a FUSE mount)")
    proc = start_point(path, env=dict(os.environ, **env), node=node)
    try:
        returncode = proc.wait()
    except BaseException:  # the task was cancelled: stop the point so it can resume
        _stop(proc)
        raise
    if returncode < 0 and point_status(path)["status"] not in (FINISHED, FAILED):
        raise PointKilled(f"{path.name}: the process on node {node} was killed by signal "
                          f"{-returncode}")
    return returncode


def _new_token(workdir: Path) -> str:
    token = secrets.token_hex(8)
    files.write_text(workdir / TOKEN_FILE, token + "\n")
    return token


# --------------------------------------------------------------------------------------------------
# ray
# --------------------------------------------------------------------------------------------------

def _ray_point(run_dir: str, token: str, env: dict[str, str]) -> int:
    import ray
    return run_remote_point(run_dir, token, env, ray.get_runtime_context().get_node_id())


class _RayHandle:
    def __init__(self, ref):
        self.ref = ref

    def poll(self) -> Outcome | None:
        import ray
        ready, _ = ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            return Outcome(ray.get(self.ref))
        except ray.exceptions.RayTaskError as e:  # what the task raised, after Ray's retries
            cause = e.cause if isinstance(e.cause, Exception) else e
            return Outcome(-1, f"{type(cause).__name__}: {cause}")
        except ray.exceptions.RayError as e:  # the worker or its node died, retries spent
            return Outcome(-1, f"Ray: {type(e).__name__}: {str(e).splitlines()[0]}")

    def cancel(self) -> None:
        import ray
        ray.cancel(self.ref, force=True)  # kills the worker; the point's process dies with it


RAY_CONNECT_TIMEOUT = 10.0  # seconds to reach a cluster's head before giving up


def _check_reachable(address: str, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """A ``HOST:PORT`` Ray head that does not accept a connection within ``timeout`` seconds is
    a one-line ConfigError (``ray.init`` retries "Failed to connect to GCS" for ever)."""
    import socket
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return
    except ValueError:
        raise ConfigError(f"--ray-address {address!r} is not HOST:PORT") from None
    except OSError as e:
        raise ConfigError(f"--executor ray: no Ray cluster answers at {address} within "
                          f"{timeout:g} s ({e.strerror or e}); start one (ray start --head) or "
                          f"fix --ray-address; the sweep folder is kept and resumes") from None


class RayExecutor:
    """One Ray task per point, each in a fresh worker process (``max_calls=1``) that starts the
    point's own process. ``address``: a running cluster ("auto", "HOST:PORT"; default
    ``$RAY_ADDRESS``, else a Ray instance started here). ``resources``: custom resources per
    point (e.g. ``{"TPU-v4-16-head": 1}`` to place a point on a slice's head). A point whose
    process dies without an outcome, or whose worker or node dies, is retried up to
    ``max_retries`` times and resumes from its checkpoints."""
    name = "ray"

    def __init__(self, workdir: Path, *, address: str | None = None, point_cpus: float = 1,
                 point_gpus: float = 0, resources: dict[str, float] | None = None,
                 max_retries: int = 2):
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install -e \".[cluster]\"") from None
        self._started = not ray.is_initialized()
        if self._started:
            address = address or os.environ.get("RAY_ADDRESS") or None
            if address and address != "auto":
                _check_reachable(address)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            except Exception as e:  # noqa: BLE001 - Ray's errors run to pages; the cause here
                text = str(e)
                why = ("the cluster refused this machine's authentication token (Ray's token "
                       "authentication: every node needs the head's token, e.g. "
                       "RAY_AUTH_TOKEN_PATH)" if "auth" in text.lower() and "token" in
                       text.lower() else files.first_line(e))
                raise ConfigError(f"--executor ray: cannot join the cluster at "
                                  f"{address or 'a new local one'}: {why}") from None
        self._task = ray.remote(
            num_cpus=point_cpus, num_gpus=point_gpus, resources=dict(resources or {}),
            max_calls=1, max_retries=max_retries, retry_exceptions=[PointKilled])(_ray_point)
        self._token, self._env = _new_token(workdir), _forwarded_env()
        self._nodes = len([n for n in ray.nodes() if n["Alive"]])

    def room(self) -> float:
        return math.inf  # Ray queues the tasks until their resources are free

    def submit(self, run_dirs: Sequence[Path]) -> list[Handle]:
        return [_RayHandle(self._task.remote(str(Path(d).resolve()), self._token, self._env))
                for d in run_dirs]

    def describe(self) -> str:
        return f"on a Ray cluster of {self._nodes} node(s)"

    def close(self) -> None:
        import ray
        if self._started:
            ray.shutdown()


# --------------------------------------------------------------------------------------------------
# slurm
# --------------------------------------------------------------------------------------------------

def _slurm_point(run_dir: str, token: str, env: dict[str, str]) -> int:
    return run_remote_point(run_dir, token, env,
                            os.environ.get("SLURMD_NODENAME") or socket.gethostname())


class _SubmititHandle:
    def __init__(self, executor: "SlurmExecutor", run_dir: Path, job):
        self.executor, self.run_dir, self.job, self.attempts = executor, run_dir, job, 1

    def poll(self) -> Outcome | None:
        import submitit
        if not self.job.done():
            return None
        try:
            return Outcome(self.job.result())
        except (submitit.core.utils.FailedJobError, submitit.core.utils.UncompletedJobError,
                submitit.core.utils.FailedSubmissionError) as e:
            text = str(e)
            lost = not isinstance(e, submitit.core.utils.FailedJobError) or "PointKilled" in text
            if lost and self.attempts <= self.executor.max_retries:  # resumes from checkpoints
                self.attempts += 1
                self.job = self.executor.submit_job(self.run_dir)
                return None
            last = [line for line in text.strip().splitlines() if line.strip()]
            return Outcome(-1, f"SLURM job {self.job.job_id}: {last[-1] if last else text}")

    def cancel(self) -> None:
        self.job.cancel(check=False)


class SlurmExecutor:
    """Points as SLURM jobs through submitit (one array job per batch of points; submitit's
    ``local`` cluster runs them as processes here, for tests). ``jobs``: points running at once
    (``slurm_array_parallelism``; on the local cluster, the sweep starts no more than that)."""
    name = "slurm"

    def __init__(self, workdir: Path, *, cluster: str | None = None, partition: str = "",
                 time_min: int = 60, point_cpus: int = 1, point_gpus: int = 0,
                 jobs: int | None = None, max_retries: int = 2):
        try:
            import submitit
        except ImportError:
            raise ConfigError("--executor slurm needs submitit: pip install -e "
                              "\".[cluster]\"") from None
        self._ex = submitit.AutoExecutor(folder=workdir / "slurm" / "%j",
                                         cluster=None if cluster in (None, "", "auto") else cluster)
        params: dict[str, Any] = dict(timeout_min=time_min, cpus_per_task=point_cpus,
                                      gpus_per_node=point_gpus, nodes=1, tasks_per_node=1,
                                      name="repr-jax-point")
        if partition:
            params["slurm_partition"] = partition
        if jobs:
            params["slurm_array_parallelism"] = jobs
        self._ex.update_parameters(**params)
        self.local = self._ex.cluster in ("local", "debug")
        if self.local and cluster in (None, "", "auto"):  # submitit found no sbatch here
            raise ConfigError("--executor slurm: no SLURM on this machine (sbatch not found); "
                              "run the points here with --slurm-cluster local, or use "
                              "--executor local")
        self.jobs, self.max_retries = jobs or (default_jobs() if self.local else None), max_retries
        self._token, self._env = _new_token(workdir), _forwarded_env()
        self._handles: list[_SubmititHandle] = []

    def room(self) -> float:
        if not self.local:
            return math.inf  # SLURM queues them (slurm_array_parallelism caps the running ones)
        return self.jobs - sum(h.job is not None and not h.job.done() for h in self._handles)

    def submit_job(self, run_dir: Path):
        return self._ex.submit(_slurm_point, str(Path(run_dir).resolve()), self._token,
                               self._env)

    def submit(self, run_dirs: Sequence[Path]) -> list[Handle]:
        with self._ex.batch():  # one array job
            jobs = [self.submit_job(d) for d in run_dirs]
        handles = [_SubmititHandle(self, Path(d), None) for d in run_dirs]
        for h, job in zip(handles, jobs):
            h.job = job
        self._handles = [h for h in self._handles if not h.job.done()] + handles
        return handles

    def describe(self) -> str:
        return (f"as submitit jobs on the {self._ex.cluster} cluster"
                + (f", {self.jobs} at a time" if self.jobs else ""))

    def close(self) -> None:
        pass


# The options (CLI flags) each executor takes.
OPTIONS = {"local": (), "ray": ("address", "point_cpus", "point_gpus", "resources", "max_retries"),
           "slurm": ("point_cpus", "point_gpus", "max_retries", "partition", "time_min",
                     "cluster")}


def check_options(name: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """The options given (None: not given) for executor ``name``; another executor's options are
    refused (they would be ignored)."""
    if name not in OPTIONS:
        raise ConfigError(f"unknown executor {name!r}; choose from {', '.join(EXECUTORS)}")
    given = {k: v for k, v in (options or {}).items() if v is not None}
    wrong = [k for k in given if k not in OPTIONS[name]]
    if wrong and name == "local":
        raise ConfigError(f"--executor local takes none of {sorted(wrong)}")
    if wrong:
        raise ConfigError(f"--executor {name} takes no {', '.join(wrong)} (its options: "
                          f"{', '.join(OPTIONS[name]) or 'none'})")
    if name == "slurm":  # whole CPUs and GPUs per job
        given.update({k: int(given[k]) for k in ("point_cpus", "point_gpus") if k in given})
    return given


def make_executor(name: str, workdir: Path, *, jobs: int | None = None, processes: int = 0,
                  options: dict[str, Any] | None = None):
    """The executor called ``name`` (local | ray | slurm) with its options (the CLI's flags), for
    ``processes`` points' processes, at most ``jobs`` at once."""
    options = check_options(name, options)
    if name == "local":
        return LocalExecutor(min(jobs or default_jobs(), max(processes, 1)))
    if name == "ray":
        return RayExecutor(workdir, **options)
    return SlurmExecutor(workdir, jobs=jobs and min(jobs, max(processes, 1)), **options)
