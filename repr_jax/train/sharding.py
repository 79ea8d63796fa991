"""The one place that knows about devices: the mesh, shardings, and global batches.

One ``Mesh`` with a ``data`` axis over the devices. State is replicated; batches are split along
their leading axis. Every process of a multi-host run (``jax.distributed.initialize()``) feeds only its
own rows, assembled into one global array.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA = "data"


def make_mesh(num_devices: int = 0) -> Mesh:
    """A 1-D mesh over the first ``num_devices`` devices (0 = all) with axis ``data``."""
    devices = jax.devices()
    if num_devices > len(devices):
        raise ValueError(f"train.num_devices={num_devices} but only {len(devices)} devices exist "
                         f"({devices[0].platform})")
    return Mesh(np.asarray(devices[: num_devices or len(devices)]), (DATA,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(DATA))


def global_batch(local: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """This process's rows → global arrays sharded along ``data`` (one process: the whole batch)."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}
