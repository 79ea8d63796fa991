"""Orbax checkpoints of the whole TrainState (the data position is ``state.step``)."""

from __future__ import annotations

from pathlib import Path

import jax
import orbax.checkpoint as ocp

from repr_jax.config import ConfigError


class Checkpointer:
    """Saves every state it is given (asynchronously) and restores the latest one, sharded."""

    def __init__(self, directory: str | Path, *, keep: int = 2):
        self.directory = Path(directory).absolute()
        self._closed = False
        self._manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, state) -> None:
        step = int(jax.device_get(state.step).flat[0])  # a population's steps are all equal
        if step not in self._manager.all_steps():
            self._manager.save(step, args=ocp.args.StandardSave(state))

    def restore(self, like_state, step: int | None = None):
        """The checkpoint at ``step`` (default latest), with ``like_state``'s structure, dtypes and
        shardings."""
        step = self.latest_step() if step is None else step
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like_state)
        return self._manager.restore(step, args=ocp.args.StandardRestore(abstract))

    def close(self) -> None:
        """Waits for pending saves and releases the manager; safe to call twice."""
        if not self._closed:
            self._manager.wait_until_finished()
            self._manager.close()
            self._closed = True


def restore_latest(workdir: str | Path, like_state, *, keep: int = 2):
    """The latest checkpoint of the run (or population) in ``workdir``, shaped like
    ``like_state``; ConfigError when there is none yet."""
    ckpt = Checkpointer(Path(workdir) / "checkpoints", keep=keep)
    try:
        if ckpt.latest_step() is None:
            raise ConfigError(f"{workdir} has no checkpoint yet")
        return ckpt.restore(like_state)
    finally:
        ckpt.close()
