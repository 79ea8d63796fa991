"""Training: the optimizer, the state, the jitted sharded step, run assembly, evaluation of a run,
checkpoints, logs, and the one loop (single runs and populations)."""

from repr_jax.train.checkpoint import Checkpointer
from repr_jax.train.evaluation import evaluate, evaluate_workdir
from repr_jax.train.loop import TrainingDiverged, train_and_evaluate
from repr_jax.train.optim import make_optimizer, warmup_cosine
from repr_jax.train.run import (build_method, build_run, init_state, load_dataset, load_trained,
                                make_step_fn, sample_batch)
from repr_jax.train.sharding import global_batch, make_mesh
from repr_jax.train.state import TrainState, create_train_state
from repr_jax.train.step import hyperparams, train_step

__all__ = ["Checkpointer", "TrainState", "TrainingDiverged", "build_method", "build_run",
           "create_train_state", "evaluate", "evaluate_workdir", "global_batch", "hyperparams",
           "init_state", "load_dataset", "load_trained", "make_mesh", "make_optimizer",
           "make_step_fn", "sample_batch", "train_and_evaluate", "train_step", "warmup_cosine"]
