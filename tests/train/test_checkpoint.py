"""Orbax checkpoints of a state: round trip, how many are kept, the latest, and a run without one."""

from typing import Any

import chex
import flax.struct
import jax
import jax.numpy as jnp
import pytest

from repr_jax.config import ConfigError
from repr_jax.train.checkpoint import Checkpointer, restore_latest


@flax.struct.dataclass
class State:
    step: jax.Array
    w: jax.Array
    nested: Any


def _state(step: int) -> State:
    return State(step=jnp.asarray(step, jnp.int32), w=jnp.full((3, 4), float(step)),
                 nested={"b": jnp.arange(5.0) * step})


def test_round_trip_keeps_the_latest_and_the_structure(tmp_path):
    ckpt = Checkpointer(tmp_path / "checkpoints", keep=2)
    assert ckpt.latest_step() is None
    for step in (1, 2, 3):
        ckpt.save(_state(step))
    ckpt.save(_state(3))  # a step already saved is not written twice
    ckpt.close()
    ckpt.close()  # idempotent
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()
                  if p.name.isdigit()) == [2, 3]
    restored = restore_latest(tmp_path, _state(0))
    chex.assert_trees_all_equal(restored, _state(3))
    assert jax.tree.structure(restored) == jax.tree.structure(_state(0))
    again = Checkpointer(tmp_path / "checkpoints")
    chex.assert_trees_all_equal(again.restore(_state(0), step=2), _state(2))
    again.close()


def test_a_stacked_population_state_saves_under_its_shared_step(tmp_path):
    stacked = jax.tree.map(lambda *x: jnp.stack(x), _state(4), _state(4))
    ckpt = Checkpointer(tmp_path / "checkpoints")
    ckpt.save(stacked)
    ckpt.close()
    assert Checkpointer(tmp_path / "checkpoints").latest_step() == 4


def test_restoring_a_run_without_checkpoints_says_so(tmp_path):
    with pytest.raises(ConfigError, match="has no checkpoint yet"):
        restore_latest(tmp_path, _state(0))
