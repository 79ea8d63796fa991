"""The mesh and shardings: 8 fake CPU devices (data, or data x fsdp) train like one device."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import setup_step, tiny_config

from repr_jax import data
from repr_jax.train import global_batch, hyperparams, make_mesh
from repr_jax.train import sharding


def test_mesh_shapes_and_refusals():
    assert dict(make_mesh(0).shape) == {"data": 8, "fsdp": 1}
    assert dict(make_mesh(8, fsdp=4).shape) == {"data": 2, "fsdp": 4}
    assert make_mesh(2).size == 2
    with pytest.raises(ValueError, match="train.num_devices=9 but only 8 devices exist"):
        make_mesh(9)
    with pytest.raises(ValueError, match="train.fsdp=3 does not divide the 8 devices"):
        make_mesh(8, fsdp=3)


def test_state_sharding_splits_only_large_arrays_along_a_divisible_dimension():
    mesh = make_mesh(8, fsdp=4)
    state = {"kernel": jnp.zeros((6, 512)), "odd": jnp.zeros((33, 35)), "bias": jnp.zeros(512),
             "scalar": jnp.zeros(())}
    specs = {k: tuple(s.spec) for k, s in sharding.state_sharding(state, mesh).items()}
    assert specs == {"kernel": (None, sharding.FSDP), "odd": (), "bias": (), "scalar": ()}
    replicated = sharding.state_sharding(state, make_mesh(8))
    assert all(tuple(s.spec) == () for s in replicated.values())


def test_global_batch_is_split_along_the_data_axis():
    mesh = make_mesh(8)
    batch = global_batch({"x": np.arange(32.0).reshape(16, 2)}, mesh)
    assert batch["x"].shape == (16, 2) and len(batch["x"].addressable_shards) == 8
    assert {s.data.shape for s in batch["x"].addressable_shards} == {(2, 2)}
    np.testing.assert_array_equal(np.asarray(batch["x"]), np.arange(32.0).reshape(16, 2))


def test_eight_devices_equal_one_device(mnist1d_small):
    """The data-parallel step on 8 (fake CPU) devices equals the single-device step."""
    assert len(jax.devices()) == 8
    cfg = tiny_config()
    stream = data.BatchStream(mnist1d_small.splits["train"], batch_size=32, seed=0)
    results = {}
    for n in (1, 8):
        mesh, state, step_fn = setup_step(cfg, n, mnist1d_small)
        for step in range(3):
            state, metrics = step_fn(state, global_batch(stream.batch(step), mesh),
                                     hyperparams(cfg))
        assert all(len(x.sharding.device_set) == n for x in jax.tree.leaves(state.params))
        results[n] = jax.device_get((state.params, state.batch_stats, metrics))
    chex.assert_trees_all_close(results[1], results[8], atol=1e-5, rtol=1e-5)


def test_batchnorm_statistics_are_global_under_sharding(mnist1d_small):
    """With the batch split over 8 devices, BatchNorm still averages over the whole batch."""
    cfg = tiny_config()
    stream = data.BatchStream(mnist1d_small.splits["train"], batch_size=32, seed=0)
    stats = []
    for n in (1, 8):
        mesh, state, step_fn = setup_step(cfg, n, mnist1d_small)
        state, _ = step_fn(state, global_batch(stream.batch(0), mesh), hyperparams(cfg))
        stats.append(jax.device_get(state.batch_stats))
    chex.assert_trees_all_close(stats[0], stats[1], atol=1e-6)


@pytest.mark.parametrize("fsdp", [8, 4])
def test_fsdp_step_equals_one_device(mnist1d_small, fsdp):
    """8 devices as data x fsdp (1 x 8, 2 x 4): the large arrays of the state are split over fsdp
    (and stay split after the step), and three steps equal the single-device ones to 1e-5."""
    from repr_jax.config import override
    from repr_jax.train.sharding import FSDP
    cfg = override(tiny_config(), ["encoder.widths=(32,64)", "method.proj_hidden=64",
                                   f"train.fsdp={fsdp}", "train.num_devices=0"])
    stream = data.BatchStream(mnist1d_small.splits["train"], batch_size=32, seed=0)
    results = {}
    for n, f in ((1, 1), (8, fsdp)):
        mesh, state, step_fn = setup_step(cfg, n, mnist1d_small, f)
        for step in range(3):
            state, metrics = step_fn(state, global_batch(stream.batch(step), mesh),
                                     hyperparams(cfg))
        split = [x for x in jax.tree.leaves((state.params, state.opt_state))
                 if FSDP in jax.tree.leaves(tuple(x.sharding.spec))]
        assert bool(split) == (f > 1)
        results[n] = jax.device_get((state.params, state.batch_stats, metrics))
    chex.assert_trees_all_close(results[1], results[8], atol=1e-5, rtol=1e-5)


def test_multihost_launchers_are_recognised_from_the_environment():
    from repr_jax.train.sharding import initialize_distributed, multihost_launcher
    assert multihost_launcher({}) is None
    assert multihost_launcher({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}) is None  # sbatch shell
    assert multihost_launcher({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4"}) == "SLURM (srun)"
    assert multihost_launcher({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"}) is None
    assert multihost_launcher({"OMPI_COMM_WORLD_SIZE": "2"}) == "Open MPI"
    assert multihost_launcher({"TPU_WORKER_HOSTNAMES": "t-0,t-1"}) == "a multi-host TPU slice"
    assert multihost_launcher({"TPU_WORKER_HOSTNAMES": "localhost"}) is None  # one TPU VM
    assert multihost_launcher({"JAX_COORDINATOR_ADDRESS": "h:1234"}) == "JAX_COORDINATOR_ADDRESS"
    assert initialize_distributed("auto", env={}) is False
    assert initialize_distributed("no", env={"OMPI_COMM_WORLD_SIZE": "2"}) is False
