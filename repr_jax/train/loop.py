"""The one training loop, for single runs and populations: ``train_and_evaluate(config, workdir)``.

A single run is one member; a population (:mod:`repr_jax.train.population`) is K members whose
states are stacked and updated by one compiled step. Both go through :func:`train_members`: one
resume path, one checkpoint and evaluation schedule, one metrics path, and one NaN policy — a
member whose loss or gradient norm becomes non-finite is recorded as diverged at that step and
left out of evaluation; training stops (:class:`TrainingDiverged`, naming the step and the last
checkpoint) when no member is left, so a single run stops at its first non-finite step. No
non-finite state is kept: a save is skipped when the parameters are not finite, and when training
stops, the checkpoints from the first step whose loss was not finite on are moved aside to
``checkpoints.nonfinite/`` (finite parameters can still give NaN: lr=1e30). Checkpoints are
verified on resume (:mod:`repr_jax.train.checkpoint`).

workdir/ after a run::

    config.json        the full config (a rerun with the same workdir resumes; a different config fails)
    run.json           what the run costs: parameter counts (total, non-embedding), FLOPs of one
                       train step (XLA cost analysis), batch size, steps, devices, train examples
    metrics.jsonl      one row per ``train.log_every`` steps: loss, lr, grad_norm, examples/s, ...
    checkpoints/       orbax checkpoints of the TrainState (the data position is the step)
    eval/              step_<N>.json (rows: representation, evaluator, metric, value[, ci_low,
                       ci_high]; ``upstream/loss`` is the objective on the test split),
                       reference.json (reference rows, keyed by the eval section)
    plots/             loss.png (train and held-out loss, learning rate); layerwise.png,
                       matryoshka.png, quantization.png when those evaluators ran
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np

from repr_jax import config as config_lib
from repr_jax import files
from repr_jax.config import Config, ConfigError
from repr_jax.data import BatchStream, Dataset
from repr_jax.data.source import Prefetcher
from repr_jax.host_memory import keep_host_memory
from repr_jax.train import sharding
from repr_jax.train.checkpoint import Checkpointer, finite_members
from repr_jax.train.evaluation import (make_upstream_loss, run_evaluation, table_notes,
                                       trained_name)
from repr_jax.train.log import format_table, plot_metrics
from repr_jax.train.run import (batch_packs, batch_pad_id, build_run, check_resumable,
                                compile_step, load_eval_sets, resolved_paths)
from repr_jax.train.step import hyperparams
from repr_jax.train.writers import JsonlWriter, RunLog


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""


@dataclasses.dataclass(frozen=True)
class Member:
    """One run the loop trains: its name, config and directory (a single run's is the workdir);
    ``hparams``: what TensorBoard's HParams view and W&B compare it by (default: its config)."""
    name: str
    cfg: Config
    workdir: Path
    hparams: dict[str, Any] | None = None


@dataclasses.dataclass
class Trainee:
    """What :func:`train_members` trains: the members, their (stacked, for a population) state,
    the compiled step, and how to get batches and evaluate. ``stacked``: the state and metrics
    have a leading member axis."""
    members: Sequence[Member]
    state: Any
    step_fn: Callable
    batch_at: Callable[[int], Any]
    hp: Any
    evaluate: Callable[[Any, Member, int, bool], list]  # (state, member, index, final) -> rows
    stacked: bool
    workdir: Path  # the checkpoints' home (and a population's combined metrics.jsonl)
    records: Sequence[Callable[[], Any]] = ()  # the run's first writes (config.json, run.json)
    close: Callable[[], Any] = lambda: None  # stops the input's read-ahead threads


def train_members(trainee: Trainee, *, progress: bool, desc: str = "train"
                  ) -> tuple[Any, dict[str, list], dict[str, int]]:
    """Holds ``trainee.workdir`` (one process per run directory: :class:`files.WorkdirLock`),
    writes the run's records, trains from the latest checkpoint to ``train.steps`` evaluating on
    the schedule, and plots each member's loss; returns ``(state, {member: final eval rows},
    {diverged member: step})``."""
    lead = jax.process_index() == 0
    with files.WorkdirLock(trainee.workdir, process=jax.process_index()):
        for write in trainee.records if lead else ():
            write()
        logs: list[RunLog] = []  # _loop opens them; closed here whatever happens (flushing them)
        try:
            state, rows, diverged = _loop(trainee, logs, progress=progress, desc=desc)
            for m, log in zip(trainee.members, logs) if lead else ():
                if (m.workdir / "metrics.jsonl").exists():
                    plot_metrics(m.workdir / "metrics.jsonl", m.workdir / "plots" / "loss.png")
                if m.name in rows:
                    log.finish(m.cfg.train.steps, rows[m.name])
        finally:
            for log in logs:
                log.close()
    return state, rows, diverged


def _loop(trainee: Trainee, logs: list[RunLog], *, progress: bool, desc: str
          ) -> tuple[Any, dict[str, list], dict[str, int]]:
    """The loop itself: resume, train, checkpoint, evaluate; opens each member's log into
    ``logs`` (the caller closes them)."""
    from tqdm.auto import tqdm
    t, members, lead = trainee.members[0].cfg.train, trainee.members, jax.process_index() == 0
    # ---------------------------------------------------------------- resume
    ckpt = Checkpointer(trainee.workdir / "checkpoints", keep=t.keep_checkpoints)
    found = ckpt.restore_verified(trainee.state)  # damaged checkpoints are moved aside
    state = trainee.state if found is None else found[0]
    start = int(np.asarray(jax.device_get(state.step)).flat[0])
    if found is not None and lead:
        print(f"resuming from step {start} ({ckpt.directory})", flush=True)
    damaged = ckpt.directory.with_name(ckpt.directory.name + ".damaged")
    if found is None and lead and damaged.is_dir() and any(damaged.iterdir()):
        print(f"repr-jax: warning: no checkpoint in {ckpt.directory} restores and verifies (the "
              f"damaged ones are in {damaged}); training starts again from step 0",
              file=sys.stderr, flush=True)
    logs += [RunLog(m.workdir, m.cfg.log, resume_step=start, lead=lead,
                   hparams=m.hparams if m.hparams is not None else config_lib.flatten(m.cfg),
                   trained=trained_name(m.cfg)) for m in members]
    combined = (JsonlWriter(trainee.workdir / "metrics.jsonl", resume_step=start)
                if trainee.stacked else None)

    # ---------------------------------------------------------------- metrics of one step
    diverged: dict[str, int] = {}
    bar = tqdm(total=t.steps, initial=start, unit="step", dynamic_ncols=True, desc=desc,
               disable=not (progress and lead))
    window = [time.perf_counter(), 0, 0.0]  # start time, examples since, seconds waiting for input

    def stop(what: str, first_bad: int) -> None:
        """Raises TrainingDiverged after moving aside the checkpoints from ``first_bad`` on."""
        ckpt.wait()
        poisoned = [k for k in ckpt.all_steps() if k >= first_bad]
        for k in poisoned:
            ckpt.move_aside(k, "nonfinite")
        good = ckpt.latest_step()
        raise TrainingDiverged(
            f"{what}; training stopped. "
            + (f"Moved aside the checkpoints of steps {', '.join(map(str, poisoned))} (their "
               f"states give non-finite losses) to {ckpt.directory}.nonfinite/. "
               if poisoned else "")
            + (f"The last good checkpoint (step {good}) in {ckpt.directory} is intact."
               if good is not None else "No finite checkpoint had been written yet."))

    def finish_step(step: int, metrics) -> None:
        """Fetches ``step``'s metrics (dispatched earlier), applies the NaN policy, logs."""
        m = {k: np.atleast_1d(np.asarray(v, np.float64)) for k, v in
             jax.device_get(metrics).items()}
        for i, member in enumerate(members):
            if member.name not in diverged and not (math.isfinite(m["loss"][i])
                                                    and math.isfinite(m["grad_norm"][i])):
                diverged[member.name] = step
                if len(members) > 1:
                    bar.write(f"population: member {member.name} diverged (loss "
                              f"{m['loss'][i]}) at step {step}")
        if len(diverged) == len(members):
            # A state whose loss is not finite is poison, and so is every later one.
            i = int(np.argmax(~np.isfinite(m["loss"]) | ~np.isfinite(m["grad_norm"])))
            stop(f"loss is {m['loss'][i]} (gradient norm {m['grad_norm'][i]}) at step {step}",
                 first_bad=step if not math.isfinite(m["loss"][i]) else step + 1)
        window[1] += t.batch_size
        bar.update(1)
        if (step + 1) % t.log_every and step + 1 != t.steps:
            return
        now = time.perf_counter()
        elapsed = max(now - window[0], 1e-9)
        rate, waiting = window[1] / elapsed, min(window[2] / elapsed, 1.0)
        window[:] = [now, 0, 0.0]
        # The share of wall time the loop sat waiting for the next batch: input-bound when high.
        bar.set_postfix(loss=f"{np.nanmean(m['loss']):.4f}", ex_per_s=f"{rate:,.0f}",
                        input_wait=f"{waiting:.0%}")
        if lead:
            for i, log in enumerate(logs):
                log.train(step + 1, dict(**{k: float(v[i]) for k, v in m.items()},
                                         examples_per_sec=rate,
                                         examples_seen=(step + 1) * t.batch_size,
                                         input_wait_frac=waiting))
            if combined is not None:
                combined.write_scalars(step + 1, {k: v.tolist() for k, v in m.items()})

    def check_finite(state, done: int) -> None:
        """Members whose parameters after step ``done`` are not finite have diverged."""
        for member, ok in zip(members, finite_members(state.params, trainee.stacked)):
            if not ok:
                diverged.setdefault(member.name, done)
        if len(diverged) == len(members):
            stop(f"the parameters after step {done} are not finite", first_bad=done)

    def evaluate(state, final: bool) -> dict[str, list]:
        out = {m.name: trainee.evaluate(state, m, i, final) for i, m in enumerate(members)
               if m.name not in diverged}
        for m, log in zip(members, logs):
            if m.name in out and not final:  # the final rows go with the plots, once written
                log.evaluation(out[m.name])
        return out

    # ---------------------------------------------------------------- train
    pending = None
    try:
        for step in range(start, t.steps):
            t0 = time.perf_counter()
            batch = trainee.batch_at(step)
            window[2] += time.perf_counter() - t0
            state, metrics = trainee.step_fn(state, batch, trainee.hp)
            if pending is not None:  # step t+1 is dispatched before step t's metrics are fetched
                finish_step(*pending)
            pending, done = (step, metrics), step + 1
            save = t.ckpt_every and done % t.ckpt_every == 0
            evaluate_now = t.eval_every and done % t.eval_every == 0 and done < t.steps
            if save or evaluate_now:
                finish_step(*pending)
                pending = None
                check_finite(state, done)
                if save:
                    ckpt.save(state, require_finite=not trainee.stacked)
                if evaluate_now:
                    for name, rows in evaluate(state, final=False).items():
                        bar.write(f"step {done}{' ' + name if name else ''}: " + ", ".join(
                            f"{r['evaluator']}/{r['metric']}={r['value']:.4f}" for r in rows
                            if "/" not in r["metric"])[:400])
        if pending is not None:
            finish_step(*pending)
        check_finite(state, t.steps)
        ckpt.save(state, require_finite=not trainee.stacked)
    finally:
        trainee.close()
        bar.close()
        ckpt.close()

    # ---------------------------------------------------------------- evaluate
    return state, evaluate(state, final=True), diverged


def write_run_info(path: Path, run_costs: dict, **info) -> None:
    files.write_json(path, dict(run_costs, **info))


def train_and_evaluate(cfg: Config, workdir: str | Path, *, progress: bool = True,
                       verbose: bool = True, dataset: Dataset | None = None,
                       stream: BatchStream | None = None,
                       hparams: dict[str, Any] | None = None) -> dict[str, Any]:
    """Trains ``cfg`` in ``workdir`` (resuming from its latest checkpoint), evaluates, returns
    ``{"state", "eval_rows", "workdir"}``. ``progress`` shows the bar, ``verbose`` prints the final
    table; ``dataset``/``stream`` override the configured data (tests inject faults this way);
    ``hparams``: what the writers compare the run by (a sweep point's grid values; default: the
    flattened config). Keeps freed host memory for XLA's CPU steps (:mod:`repr_jax.host_memory`) when called before
    JAX's backend has started."""
    keep_host_memory()
    cfg = resolved_paths(cfg)  # config.json records absolute paths: `eval` works from anywhere
    workdir, t = Path(workdir), cfg.train
    # ---------------------------------------------------------------- checks before compiling
    cfg.check_devices(sharding.make_mesh(t.num_devices, t.fsdp).size)
    if t.batch_size % jax.process_count():
        raise ConfigError(f"train.batch_size={t.batch_size} is not divisible by the "
                          f"{jax.process_count()} processes")
    check_resumable(cfg, workdir)

    # ---------------------------------------------------------------- assemble
    mesh, dataset, method, state = build_run(cfg, dataset)
    eval_sets = load_eval_sets(cfg, dataset)
    stream = stream or BatchStream(dataset.splits["train"], batch_size=t.batch_size, seed=cfg.seed,
                                   pad_id=batch_pad_id(cfg, dataset),
                                   pack=batch_packs(cfg, mesh.size))

    def host_batch(step: int):
        return stream.batch(step, process_index=jax.process_index(),
                            process_count=jax.process_count())

    read_ahead = Prefetcher(host_batch, stop=t.steps, workers=cfg.data.workers,
                            buffer=cfg.data.prefetch)

    def batch_at(step: int):
        return sharding.global_batch(read_ahead(step), mesh)

    # Compiled for the first batch's shapes; the resumed state has the fresh state's shapes.
    step_fn, run_costs = compile_step(cfg, method, mesh, state,
                                      sharding.global_batch(host_batch(0), mesh))
    records = [lambda: config_lib.save_json(cfg, workdir / "config.json"),
               lambda: write_run_info(workdir / "run.json", run_costs, batch_size=t.batch_size,
                                      steps=t.steps, num_devices=mesh.size,
                                      num_processes=jax.process_count(),
                                      backend=jax.default_backend(),
                                      train_examples=len(dataset.splits["train"]["label"]))]
    upstream_loss = make_upstream_loss(cfg, method)

    def evaluate(state, member: Member, index: int, final: bool) -> list:
        del index
        return run_evaluation(cfg, method, dataset, state, member.workdir,
                              reference=final and cfg.eval.reference_rows, eval_sets=eval_sets,
                              progress=final and progress and jax.process_index() == 0,
                              upstream_loss=upstream_loss, cache=final)

    # ---------------------------------------------------------------- train, evaluate
    def finish_training() -> None:
        read_ahead.close()
        step_fn.release()  # the train step's executables are not needed to evaluate

    trainee = Trainee(members=[Member("", cfg, workdir, hparams)], state=state, step_fn=step_fn,
                      batch_at=batch_at, hp=hyperparams(cfg), evaluate=evaluate, stacked=False,
                      workdir=workdir, records=records, close=finish_training)
    state, rows, _ = train_members(trainee, progress=progress)
    eval_rows = rows[""]
    if jax.process_index() == 0:
        if verbose:
            last = [r["loss"] for r in _read_last(workdir / "metrics.jsonl")]
            print(f"\n{dataset.name}: evaluation at step {t.steps} (test split; final train loss "
                  f"{last[0] if last else math.nan:.4f})\n"
                  + format_table(eval_rows, table_notes(cfg, dataset, eval_rows)))
    return {"state": state, "eval_rows": eval_rows, "workdir": workdir}


def _read_last(path: Path) -> list[dict]:
    from repr_jax.train.log import read_jsonl
    return read_jsonl(path)[-1:] if path.exists() else []
