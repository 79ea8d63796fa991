"""Orbax checkpoints of a state: round trip, how many are kept, the latest, a run without one, and
verification: damaged checkpoints named, moved aside and skipped; non-finite states never saved."""

import json
import re
from typing import Any

import chex
import flax.struct
import jax
import jax.numpy as jnp
import pytest

from repr_jax.config import ConfigError
from repr_jax.train.checkpoint import (CheckpointDamaged, Checkpointer, NoVerifiedCheckpoint,
                                      all_finite, finite_members, restore_latest, summarize)


@flax.struct.dataclass
class State:
    step: jax.Array
    w: jax.Array
    nested: Any


def _state(step: int) -> State:
    return State(step=jnp.asarray(step, jnp.int32), w=jnp.full((3, 4), float(step)),
                 nested={"b": jnp.arange(5.0) * step,
                         "big": jnp.sin(jnp.arange(4096.0) + step)})  # not inlined by orbax


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


def test_a_state_of_other_shapes_or_arrays_is_refused_and_nothing_is_moved(tmp_path):
    """A run whose data or config changed under it (an activation store of another width) gives
    arrays of other shapes, or other arrays: one line naming the array, the checkpoint stays."""
    ckpt = Checkpointer(tmp_path / "checkpoints")
    ckpt.save(_state(2))
    ckpt.close()
    wider = _state(0).replace(w=jnp.zeros((3, 6)))
    with pytest.raises(ConfigError, match=r"holds w of shape \[3, 4\], but this run's config "
                                          r"and data give \[3, 6\].*nothing moved"):
        restore_latest(tmp_path, wider)
    more = _state(0).replace(nested={**_state(0).nested, "k": jnp.zeros(())})
    with pytest.raises(ConfigError, match="lacks nested/k, which this run's config needs"):
        restore_latest(tmp_path, more)
    fewer = _state(0).replace(nested={"b": jnp.zeros(5)})
    with pytest.raises(ConfigError, match="holds nested/big, which this run's config does not"):
        restore_latest(tmp_path, fewer)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoints"]  # nothing moved aside
    chex.assert_trees_all_equal(restore_latest(tmp_path, _state(0)), _state(2))


def test_restoring_a_run_without_checkpoints_says_so(tmp_path):
    with pytest.raises(ConfigError, match="has no checkpoint yet"):
        restore_latest(tmp_path, _state(0))


# --------------------------------------------------------------------------------------------------
# Verification and fallback
# --------------------------------------------------------------------------------------------------

def _two_checkpoints(tmp_path):
    ckpt = Checkpointer(tmp_path / "checkpoints", keep=3)
    for step in (1, 2):
        ckpt.save(_state(step))
    ckpt.close()
    step_dir = tmp_path / "checkpoints" / "2"
    data = max((p for p in step_dir.rglob("*") if p.is_file() and "/d/" in str(p)),
               key=lambda p: p.stat().st_size)
    return step_dir, data


def _flip(path, at=None, n=64):
    raw = bytearray(path.read_bytes())
    at = len(raw) // 2 if at is None else at
    raw[at:at + n] = bytes(b ^ 0xFF for b in raw[at:at + n])
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage, reason", [
    ("flip", "fails its CRC32 check"), ("truncate", "bytes, .* were written"),
    ("garbage", "were written"), ("metadata", r"state/_METADATA is missing"),
    ("flip_unrecorded", "does not match its checksum|does not restore"),
    ("checksums", "does not restore|no valid checksums")])
def test_a_damaged_checkpoint_is_named_moved_aside_and_the_previous_one_used(
        tmp_path, capfd, damage, reason):
    step_dir, data = _two_checkpoints(tmp_path)
    if damage == "flip":
        _flip(data)
    elif damage == "truncate":
        data.write_bytes(data.read_bytes()[:10])
    elif damage == "garbage":
        data.write_bytes(b"\x00garbage" * 100)
    elif damage == "metadata":
        (step_dir / "state" / "_METADATA").unlink()
    elif damage == "flip_unrecorded":  # a save cut short before its file manifest: the arrays
        (step_dir / "files.json").unlink()  # are checked against their checksums instead
        _flip(data)
    elif damage == "checksums":
        (step_dir / "files.json").unlink()
        (step_dir / "checksums" / "metadata").write_text("{not json")
    restored = restore_latest(tmp_path, _state(0))
    chex.assert_trees_all_equal(restored, _state(1))
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert re.search(f"checkpoint step 2.*({reason}).*moved to .*checkpoints.damaged/2", lines[0])
    assert (tmp_path / "checkpoints.damaged" / "2" / "state").is_dir()  # kept, not deleted
    assert Checkpointer(tmp_path / "checkpoints").all_steps() == [1]


def test_a_changed_array_fails_its_checksum(tmp_path):
    """The arrays' own checksums catch what a file check cannot: a state that differs from the
    one saved (here: restored into the checkpoint from another state's checksums)."""
    ckpt = Checkpointer(tmp_path / "checkpoints")
    ckpt.save(_state(2))
    ckpt.close()
    meta = tmp_path / "checkpoints" / "2" / "checksums" / "metadata"
    saved = json.loads(meta.read_text())
    saved["arrays"][".w"][1] += 1
    meta.write_text(json.dumps(saved))
    (tmp_path / "checkpoints" / "2" / "files.json").unlink()
    with pytest.raises(CheckpointDamaged, match=r"step 2 .* fails verification: \.w does not match"):
        Checkpointer(tmp_path / "checkpoints").restore(_state(0))


def test_when_no_checkpoint_verifies_restoring_says_so(tmp_path):
    step_dir, data = _two_checkpoints(tmp_path)
    for step in ("1", "2"):
        (tmp_path / "checkpoints" / step / "state" / "_METADATA").unlink()
    with pytest.raises(NoVerifiedCheckpoint, match="no checkpoint restores and verifies"):
        restore_latest(tmp_path, _state(0))
    assert sorted(p.name for p in (tmp_path / "checkpoints.damaged").iterdir()) == ["1", "2"]


def test_a_non_finite_state_is_not_saved(tmp_path):
    ckpt = Checkpointer(tmp_path / "checkpoints")
    bad = _state(3).replace(w=jnp.full((3, 4), jnp.nan))
    assert ckpt.save(bad) is False
    assert ckpt.save(bad, require_finite=False) is True  # a population keeps diverged members
    ckpt.close()
    assert Checkpointer(tmp_path / "checkpoints").all_steps() == [3]
    assert not all_finite(bad) and all_finite(_state(3))
    stacked = jax.tree.map(lambda *x: jnp.stack(x), _state(1), bad)
    assert finite_members(stacked, stacked=True).tolist() == [True, False]


def test_checksums_see_every_dtype_and_position():
    tree = {"f": jnp.arange(6.0).reshape(2, 3), "h": jnp.arange(4, dtype=jnp.bfloat16),
            "i": jnp.arange(3, dtype=jnp.int8), "b": jnp.array([True, False]),
            "k": jax.random.PRNGKey(0)}
    sums, finite = summarize(tree)
    assert finite and set(sums) == {"['f']", "['h']", "['i']", "['b']", "['k']"}
    swapped, _ = summarize({**tree, "f": tree["f"][:, ::-1]})  # the same words, reordered
    assert swapped["['f']"][0] == sums["['f']"][0] and swapped["['f']"][1] != sums["['f']"][1]


def test_a_checkpoint_from_before_checksums_restores_with_a_warning(tmp_path, capfd):
    """Run directories written by earlier versions (one unnamed orbax item) still resume; new saves
    in them carry checksums."""
    import orbax.checkpoint as ocp
    old = ocp.CheckpointManager(tmp_path / "checkpoints",
                                options=ocp.CheckpointManagerOptions(create=True))
    old.save(5, args=ocp.args.StandardSave(_state(5)))
    old.wait_until_finished()
    old.close()
    ckpt = Checkpointer(tmp_path / "checkpoints")
    chex.assert_trees_all_equal(ckpt.restore(_state(0)), _state(5))
    assert "step 5" in (err := capfd.readouterr().err) and "predates checksums" in err
    ckpt.save(_state(6))
    ckpt.close()
    assert (tmp_path / "checkpoints" / "6" / "checksums").is_dir()
    chex.assert_trees_all_equal(restore_latest(tmp_path, _state(0)), _state(6))
