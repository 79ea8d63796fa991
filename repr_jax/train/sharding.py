"""The one place that knows about devices: the mesh, shardings, and global batches.

One ``Mesh`` with axes ``data`` × ``fsdp`` over the devices. Batches are split along their leading
axis over both. With ``fsdp = 1`` (the default) the state is replicated: pure data parallelism. With
``fsdp > 1`` every large enough array of the state (parameters, optimizer moments, EMA teachers) is
split along one of its dimensions over the ``fsdp`` devices; the compiler gathers each where a layer
needs it and reduce-scatters its gradient (fully sharded data parallelism, without hand-written
collectives). Every process of a multi-host run (``jax.distributed.initialize()``) feeds only its
own rows, assembled into one global array.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA, FSDP = "data", "fsdp"
MIN_SHARDED_SIZE = 1024  # smaller arrays (biases, norms, scalars) stay replicated


def make_mesh(num_devices: int = 0, fsdp: int = 1) -> Mesh:
    """A ``(data, fsdp)`` mesh over the first ``num_devices`` devices (0 = all)."""
    devices = jax.devices()
    if num_devices > len(devices):
        raise ValueError(f"train.num_devices={num_devices} but only {len(devices)} devices exist "
                         f"({devices[0].platform})")
    devices = devices[: num_devices or len(devices)]
    if len(devices) % fsdp:
        raise ValueError(f"train.fsdp={fsdp} does not divide the {len(devices)} devices")
    return Mesh(np.asarray(devices).reshape(len(devices) // fsdp, fsdp), (DATA, FSDP))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P((DATA, FSDP)))


def state_sharding(state: Any, mesh: Mesh) -> Any:
    """Each leaf's sharding: replicated, or (``fsdp > 1``) split over ``fsdp`` along its largest
    dimension that the axis size divides, for leaves of at least ``MIN_SHARDED_SIZE`` elements."""
    n = mesh.shape[FSDP]

    def leaf(x) -> NamedSharding:
        shape = getattr(x, "shape", ())
        if n == 1 or int(np.prod(shape, dtype=np.int64)) < MIN_SHARDED_SIZE:
            return replicated(mesh)
        dims = sorted((d for d in range(len(shape)) if shape[d] % n == 0),
                      key=lambda d: -shape[d])
        if not dims:
            return replicated(mesh)
        spec = [None] * len(shape)
        spec[dims[0]] = FSDP
        return NamedSharding(mesh, P(*spec))
    return jax.tree.map(leaf, state)


def global_batch(local: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """This process's rows → global arrays sharded along ``data`` (one process: the whole batch)."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}


def multihost_launcher(env: dict[str, str]) -> str | None:
    """What started this process as one of several of a multi-host run, judged from ``env``
    (None: a single process): an explicit coordinator, a SLURM step of several tasks (``srun``),
    Open MPI, or a multi-host TPU slice — the environments ``jax.distributed.initialize()``
    configures itself from (an explicit coordinator with ``JAX_NUM_PROCESSES`` and
    ``JAX_PROCESS_ID``)."""
    def count(key: str) -> int:
        try:
            return int(env.get(key, "1").split("(")[0])
        except ValueError:
            return 1
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return "JAX_COORDINATOR_ADDRESS"
    if env.get("SLURM_STEP_ID") is not None and count("SLURM_STEP_NUM_TASKS") > 1:
        return "SLURM (srun)"
    if count("OMPI_COMM_WORLD_SIZE") > 1:
        return "Open MPI"
    if "," in env.get("TPU_WORKER_HOSTNAMES", ""):
        return "a multi-host TPU slice"
    return None


def initialize_distributed(mode: str = "auto", env: dict[str, str] | None = None) -> bool:
    """Calls ``jax.distributed.initialize()`` (before anything touches a device) when ``mode`` is
    "yes", or "auto" and :func:`multihost_launcher` recognises the environment; returns whether it
    did. JAX reads the coordinator, process count and id from that environment."""
    import os
    env = dict(os.environ if env is None else env)
    if mode not in ("auto", "yes", "no"):
        raise ValueError(f"distributed mode {mode!r}: choose auto, yes or no")
    if mode == "no" or (mode == "auto" and multihost_launcher(env) is None):
        return False
    # With an explicit coordinator, the process count and id come from these two as well.
    explicit = {k: int(env[v]) for k, v in (("num_processes", "JAX_NUM_PROCESSES"),
                                            ("process_id", "JAX_PROCESS_ID")) if env.get(v)}
    jax.distributed.initialize(**explicit)
    return True
