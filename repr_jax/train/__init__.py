"""Training: state, the jitted sharded step, checkpoints, logs, and the loop."""

from repr_jax.train.build import build_method, load_dataset, make_optimizer, warmup_cosine
from repr_jax.train.checkpoint import Checkpointer
from repr_jax.train.loop import (TrainingDiverged, evaluate, evaluate_workdir, init_state,
                                 load_trained, make_step_fn, sample_batch, train_and_evaluate)
from repr_jax.train.sharding import global_batch, make_mesh
from repr_jax.train.state import TrainState, create_train_state
from repr_jax.train.step import hyperparams, train_step

__all__ = ["Checkpointer", "TrainState", "TrainingDiverged", "build_method", "create_train_state",
           "evaluate", "evaluate_workdir", "global_batch", "hyperparams", "init_state",
           "load_dataset", "load_trained", "make_mesh", "make_optimizer", "make_step_fn", "sample_batch",
           "train_and_evaluate", "train_step", "warmup_cosine"]
