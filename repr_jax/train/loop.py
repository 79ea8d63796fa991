"""``train_and_evaluate(config, workdir)``: one training run, read top to bottom.

workdir/ after a run::

    config.json        the full config (a rerun with the same workdir resumes; a different config fails)
    metrics.jsonl      one row per ``train.log_every`` steps: loss, lr, grad_norm, examples/s, ...
    checkpoints/       orbax checkpoints of the TrainState (the data position is the step)
    eval/              step_<N>.json (rows: representation, evaluator, metric, value), reference.json
    plots/loss.png     loss and learning rate against step
"""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import config as config_lib
from repr_jax.config import Config, ConfigError
from repr_jax.data import BatchStream, Dataset
from repr_jax.eval import EVALUATORS, Embedder
from repr_jax.methods import Method
from repr_jax.train import sharding
from repr_jax.train.build import build_method, load_dataset, make_optimizer
from repr_jax.train.checkpoint import Checkpointer
from repr_jax.train.log import MetricsWriter, format_table, plot_metrics
from repr_jax.train.state import TrainState, create_train_state
from repr_jax.train.step import hyperparams, train_step

# Keys that change bookkeeping only, never the trained numbers: a resumed run may change them.
RESUMABLE_CHANGES = ("eval.", "train.eval_every", "train.ckpt_every", "train.log_every",
                     "train.keep_checkpoints", "train.num_devices")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""


def _check_workdir(cfg: Config, workdir: Path) -> None:
    saved_path = workdir / "config.json"
    if saved_path.exists():
        changed = {k: v for k, v in config_lib.diff(config_lib.load_json(saved_path), cfg).items()
                   if not k.startswith(RESUMABLE_CHANGES)}
        if changed:
            desc = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
            raise ConfigError(f"{workdir} holds a run with a different config ({desc}); "
                              f"use a new --workdir, or the saved settings to resume")
    workdir.mkdir(parents=True, exist_ok=True)
    if jax.process_index() == 0:
        config_lib.save_json(cfg, saved_path)


def sample_batch(dataset: Dataset, n: int = 2) -> dict[str, np.ndarray]:
    """The first ``n`` training examples: what ``init`` traces shapes from."""
    return {k: v[:n] for k, v in dataset.splits["train"].items()}


def init_state(cfg: Config, method: Method, sample: dict[str, np.ndarray], mesh) -> TrainState:
    """The initial state, created directly with its (replicated) sharding."""
    init_key, loop_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    tx = make_optimizer(cfg.optim, total_steps=cfg.train.steps)

    def init_fn(batch):
        variables = method.init(init_key, batch)
        extra = method.init_extra(jax.random.fold_in(init_key, 1), variables)
        return create_train_state(variables, tx, loop_key, extra)

    return jax.jit(init_fn, out_shardings=sharding.replicated(mesh))(sample)


def build_run(cfg: Config, dataset: Dataset | None = None):
    """Mesh, dataset, method and a fresh sharded state for ``cfg``: what training and re-evaluation
    both start from."""
    mesh = sharding.make_mesh(cfg.train.num_devices)
    dataset = dataset or load_dataset(cfg)
    method = build_method(cfg, dataset)
    return mesh, dataset, method, init_state(cfg, method, sample_batch(dataset), mesh)


def make_step_fn(cfg: Config, method: Method, mesh):
    step = functools.partial(train_step, method=method, total_steps=cfg.train.steps)
    rep = sharding.replicated(mesh)
    return jax.jit(step, in_shardings=(rep, sharding.batch_sharding(mesh), rep),
                   out_shardings=(rep, rep), donate_argnums=0)


def evaluate(cfg: Config, dataset: Dataset, representations: dict[str, tuple[Any, Any]],
             *, step: int) -> list[dict[str, Any]]:
    """Runs every configured evaluator on each ``{name: (predict_fn, variables)}`` representation."""
    rows = []
    options = {"knn": dict(k=cfg.eval.knn_k, temperature=cfg.eval.knn_temperature)}
    for rep_name, (predict_fn, variables) in representations.items():
        embedder = Embedder(predict_fn, dataset.splits, batch_size=cfg.eval.batch_size)
        for name in cfg.eval.evaluators:
            evaluator = EVALUATORS[name](embedder, **options.get(name, {}))
            for metric, value in evaluator.run(variables):
                rows.append(dict(step=step, representation=rep_name, evaluator=name,
                                 metric=metric, value=float(value)))
    return rows


def _raw_inputs(variables, x):
    del variables
    return x.reshape(x.shape[0], -1)


def _bag_of_words(vocab_size: int):
    """Raw-input reference for token ids: counts of each non-padding token."""
    def predict(variables, ids):
        del variables
        return jnp.sum(jax.nn.one_hot(ids, vocab_size) * (ids > 0)[..., None], axis=1)
    return predict


def reference_rows(cfg: Config, method: Method, dataset: Dataset, workdir: Path):
    """Raw-input and random-init-encoder rows, computed once per workdir (they never change)."""
    path = workdir / "eval" / "reference.json"
    if path.exists():
        return json.loads(path.read_text())
    random_init = method.init(jax.random.split(jax.random.PRNGKey(cfg.seed))[0],
                              sample_batch(dataset))
    raw = _bag_of_words(len(dataset.vocab)) if dataset.vocab else _raw_inputs
    rows = evaluate(cfg, dataset, {"raw inputs": (raw, None),
                                   "random-init encoder": (method.embed, random_init)}, step=0)
    if jax.process_index() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=1))
    return rows


def run_evaluation(cfg: Config, method: Method, dataset: Dataset, state: TrainState,
                   workdir: Path, *, reference: bool) -> list[dict[str, Any]]:
    step = int(jax.device_get(state.step))
    rows = reference_rows(cfg, method, dataset, workdir) if reference else []
    rows = rows + evaluate(cfg, dataset, {f"{cfg.method.name} encoder":
                                          (method.embed, state.variables)}, step=step)
    if jax.process_index() == 0:
        (workdir / "eval").mkdir(parents=True, exist_ok=True)
        (workdir / "eval" / f"step_{step}.json").write_text(json.dumps(rows, indent=1))
    return rows


def _progress(total: int, initial: int, enabled: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", dynamic_ncols=True,
                desc="train")


def train_and_evaluate(cfg: Config, workdir: str | Path, *, progress: bool = True,
                       verbose: bool = True, dataset: Dataset | None = None,
                       stream: BatchStream | None = None
                       ) -> dict[str, Any]:
    """Trains ``cfg`` in ``workdir`` (resuming from its latest checkpoint), evaluates, returns
    ``{"state", "eval_rows", "workdir"}``. ``progress`` shows the bar, ``verbose`` prints the final
    table; ``dataset``/``stream`` override the configured data (tests inject faults this way)."""
    workdir = Path(workdir)
    t = cfg.train
    # ---------------------------------------------------------------- setup: checks before compiling
    cfg.check_devices(sharding.make_mesh(t.num_devices).size)
    if t.batch_size % jax.process_count():
        raise ConfigError(f"train.batch_size={t.batch_size} is not divisible by the "
                          f"{jax.process_count()} processes")
    _check_workdir(cfg, workdir)

    # ---------------------------------------------------------------- state: fresh or resumed
    mesh, dataset, method, state = build_run(cfg, dataset)
    stream = stream or BatchStream(dataset.splits["train"], batch_size=t.batch_size, seed=cfg.seed)
    ckpt = Checkpointer(workdir / "checkpoints", keep=t.keep_checkpoints)
    if ckpt.latest_step() is not None:
        state = ckpt.restore(state)
    start = int(jax.device_get(state.step))
    metrics_out = MetricsWriter(workdir / "metrics.jsonl", resume_step=start)
    step_fn = make_step_fn(cfg, method, mesh)
    hp = hyperparams(cfg)

    # ---------------------------------------------------------------- train
    pbar = _progress(t.steps, start, progress and jax.process_index() == 0)
    window_start, window_examples = time.perf_counter(), 0
    last_loss = math.nan

    def finish_step(step: int, metrics) -> None:
        """Fetches ``step``'s metrics (dispatched earlier), stops on a non-finite loss, logs."""
        nonlocal window_start, window_examples, last_loss
        m = {k: float(v) for k, v in jax.device_get(metrics).items()}
        if not (math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"])):
            ckpt.close()
            good = ckpt.latest_step()
            raise TrainingDiverged(
                f"loss is {m['loss']} (gradient norm {m['grad_norm']}) at step {step}; training "
                f"stopped. "
                + (f"The last good checkpoint (step {good}) in {ckpt.directory} is intact."
                   if good is not None else "No checkpoint had been written yet."))
        last_loss = m["loss"]
        window_examples += t.batch_size
        pbar.update(1)
        if (step + 1) % t.log_every == 0 or step + 1 == t.steps:
            now = time.perf_counter()
            rate = window_examples / max(now - window_start, 1e-9)
            window_start, window_examples = now, 0
            pbar.set_postfix(loss=f"{m['loss']:.4f}", ex_per_s=f"{rate:,.0f}")
            if jax.process_index() == 0:
                metrics_out.write(dict(step=step + 1, **m, examples_per_sec=rate,
                                       examples_seen=stream.examples_seen(step + 1)))

    pending = None
    try:
        for step in range(start, t.steps):
            local = stream.batch(step, process_index=jax.process_index(),
                                 process_count=jax.process_count())
            state, metrics = step_fn(state, sharding.global_batch(local, mesh), hp)
            if pending is not None:  # step t+1 is dispatched before step t's metrics are fetched
                finish_step(*pending)
            pending = (step, metrics)
            done = step + 1
            if (t.ckpt_every and done % t.ckpt_every == 0) or (
                    t.eval_every and done % t.eval_every == 0 and done < t.steps):
                finish_step(*pending)
                pending = None
                if t.ckpt_every and done % t.ckpt_every == 0:
                    ckpt.save(state)
                if t.eval_every and done % t.eval_every == 0 and done < t.steps:
                    rows = run_evaluation(cfg, method, dataset, state, workdir, reference=False)
                    pbar.write(f"step {done}: " + ", ".join(
                        f"{r['evaluator']}/{r['metric']}={r['value']:.4f}" for r in rows))
        if pending is not None:
            finish_step(*pending)
        ckpt.save(state)
    finally:
        pbar.close()
        ckpt.close()

    # ---------------------------------------------------------------- evaluate
    eval_rows = run_evaluation(cfg, method, dataset, state, workdir,
                               reference=cfg.eval.reference_rows)
    if jax.process_index() == 0:
        if (workdir / "metrics.jsonl").exists():
            plot_metrics(workdir / "metrics.jsonl", workdir / "plots" / "loss.png")
        if verbose:
            print(f"\n{dataset.name}: evaluation at step {t.steps} (test split; final train loss "
                  f"{last_loss:.4f})\n" + format_table(eval_rows))
    return {"state": state, "eval_rows": eval_rows, "workdir": workdir}


def evaluate_workdir(workdir: str | Path, *, progress: bool = True) -> list[dict[str, Any]]:
    """Re-evaluates the latest checkpoint of a finished or interrupted run (``repr-jax eval``)."""
    workdir = Path(workdir)
    if not (workdir / "config.json").exists():
        raise ConfigError(f"{workdir} has no config.json: not a repr-jax run directory")
    cfg = config_lib.load_json(workdir / "config.json")
    _, dataset, method, state = build_run(cfg)
    ckpt = Checkpointer(workdir / "checkpoints", keep=cfg.train.keep_checkpoints)
    try:
        if ckpt.latest_step() is None:
            raise ConfigError(f"{workdir} has no checkpoint yet")
        state = ckpt.restore(state)
    finally:
        ckpt.close()
    rows = run_evaluation(cfg, method, dataset, state, workdir, reference=cfg.eval.reference_rows)
    if progress:
        print(format_table(rows))
    return rows
