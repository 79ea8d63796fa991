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
