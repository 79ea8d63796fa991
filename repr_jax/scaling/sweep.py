"""Sweeps: one base experiment trained at every point of a grid, resumably, into one tidy table.

A sweep file is an experiment file (in ``experiments/`` or anywhere) that also defines
``get_sweep(arg=None) -> Sweep``::

    def get_sweep(arg=None):
        return Sweep(base=get_config(), grid={
            "encoder.widths": [(8, 16, 32), (16, 32, 64)],
            "data.train_examples": [1000, 4000],
            ("optim.lr", "optim.warmup_steps"): [(1e-3, 100), (3e-4, 300)],  # coupled keys
        })

``repr-jax sweep FILE --workdir DIR`` (:func:`run_sweep`) writes::

    DIR/sweep.json          the points (name and overrides) in sweep order
    DIR/runs/<point>/       a ``repr-jax train`` run directory per point (config.json, run.json,
                            metrics.jsonl, checkpoints/, eval/), plus status.json and log.txt
    DIR/results.csv, .json  one row per point × evaluation step (:func:`collect`)
    DIR/plots/loss_vs_flops.png

Each point trains in its own process (a crash, an out-of-memory kill or a divergence is recorded in
that point's ``status.json`` and the sweep goes on; on CPU the processes are pinned to disjoint
cores). Rerunning the command skips finished points, retries nothing that failed unless
``--retry-failed``, and continues interrupted points from their latest checkpoint: training is a
pure function of (config, step), so the resumed table equals an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from repr_jax import config as config_lib
from repr_jax import files
from repr_jax.config import Config, ConfigError, point_name
from repr_jax.scaling.executors import FAILED, FINISHED, RUNNING, point_status
from repr_jax.scaling.executors import read_json_or as _read_json
from repr_jax.scaling.table import write_table

# Leading columns of results.csv; then the metrics, then the grid's keys, then every config key.
RUN_COLUMNS = ("point", "status", "step", "final", "examples_seen", "epochs", "train_examples",
               "params", "non_embedding_params", "flops_per_step", "flops", "train/loss", "error",
               "node")


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A base config and a grid over its keys.

    ``grid`` maps a config key (``"encoder.widths"``) to the values it takes, or a tuple of keys to
    tuples of values that change together; the points are the product over its entries, in order.
    ``overrides`` (``"key=value"`` strings) apply to every point first.

    ``population`` names grid keys (``seed`` or numeric hyperparameters such as ``optim.lr``) whose
    points train together as one population in one compiled step
    (:mod:`repr_jax.train.population`), one population per combination of the other keys;
    ``shared_batches=False`` draws each member's batches from its own seed. Every member is still
    a point of the table.
    """
    base: Config | str
    grid: Mapping[str | tuple[str, ...], Sequence[Any]]
    overrides: Sequence[str] = ()
    population: Sequence[str] = ()
    shared_batches: bool = True

    def base_config(self) -> Config:
        base = config_lib.load(self.base) if isinstance(self.base, str) else self.base
        return config_lib.override(base, list(self.overrides))

    def axes(self) -> list[tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
        """``[(keys, [values per point of this axis])]`` with every value a tuple over ``keys``."""
        out = []
        for keys, values in self.grid.items():
            keys = (keys,) if isinstance(keys, str) else tuple(keys)
            values = list(values)
            if not values:
                raise ConfigError(f"sweep grid {'/'.join(keys)} has no values")
            if len(keys) > 1:
                for v in values:
                    if not isinstance(v, (tuple, list)) or len(v) != len(keys):
                        raise ConfigError(f"sweep grid {keys}: each value must be a tuple of "
                                          f"{len(keys)} values, got {v!r}")
                values = [tuple(v) for v in values]
            else:
                values = [(v,) for v in values]
            out.append((keys, values))
        return out

    def points(self, extra_overrides: Sequence[str] = ()) -> list["Point"]:
        """Every point's name, grid values and full config; any bad key or value raises
        ConfigError (naming the valid keys) before anything runs."""
        base = config_lib.override(self.base_config(), list(extra_overrides))
        axes = self.axes()
        keys = [k for ks, _ in axes for k in ks]
        if len(set(keys)) != len(keys):
            raise ConfigError(f"sweep grid names a key twice: {keys}")
        unknown = [k for k in self.population if k not in keys]
        if unknown:
            raise ConfigError(f"sweep population keys {unknown} are not grid keys ({keys})")
        points, names = [], set()
        for combo in itertools.product(*(values for _, values in axes)):
            values = dict(zip(keys, itertools.chain.from_iterable(combo)))
            cfg = config_lib.override(base, [f"{k}={v!r}" for k, v in values.items()])
            name = point_name(values)
            if name in names:
                raise ConfigError(f"two sweep points are both named {name!r}: the grid repeats "
                                  f"a value")
            names.add(name)
            run = name
            if self.population:
                group = point_name({k: v for k, v in values.items()
                                    if k not in self.population}) if len(keys) > len(
                    self.population) else "population"
                run = f"{group}/members/{point_name({k: values[k] for k in self.population})}"
            points.append(Point(name, values, cfg, run))
        if self.population:
            from repr_jax.train.population import member_differences
            for members in _groups(points).values():
                member_differences([p.config for p in members])  # only seeds and hyper leaves
        return points


@dataclasses.dataclass(frozen=True)
class Point:
    """One run of the sweep: its name, grid values, config and run directory under ``runs/``
    (``<population>/members/<member>`` for a population member)."""
    name: str
    values: dict[str, Any]
    config: Config
    run: str

    @property
    def job(self) -> str:
        """The directory of the process that trains it: its own, or its population's."""
        return self.run.split("/members/")[0]


def _groups(points: Sequence[Point]) -> dict[str, list[Point]]:
    """Points by the job (process) that trains them, in sweep order."""
    out: dict[str, list[Point]] = {}
    for p in points:
        out.setdefault(p.job, []).append(p)
    return out


def load_sweep(name_or_path: str) -> Sweep:
    """``get_sweep(arg)`` of a sweep file (``name[:arg]``, as for experiments). An ``arg`` the file
    ignores (the same sweep as without it) is a ConfigError, not a silently full-length sweep."""
    sweep = config_lib.load_from(name_or_path, "get_sweep", Sweep)
    name, _, arg = name_or_path.partition(":")
    if arg:
        if sweep == config_lib.load_from(name, "get_sweep", Sweep):
            raise ConfigError(f"sweep {name!r} ignores ':{arg}' (its get_sweep returns the same "
                              f"sweep with and without it); run it without, or narrow it with "
                              f"--set")
    return sweep


def grid_sweep(config: str, grid: Sequence[str], population: Sequence[str] = ()) -> Sweep:
    """A sweep from the command line: ``config`` (an experiment, as ``--config`` takes it) and
    ``KEY=[v1, v2, ...]`` strings (Python literals; the same as ``grid={KEY: [v1, v2]}`` in a
    sweep file); ``population`` more of them, whose points train together as one population
    (``population=(KEY, ...)`` in a sweep file). Bad syntax is a one-line ConfigError."""
    import ast
    axes: dict[str, list[Any]] = {}
    for item in [*grid, *population]:
        key, sep, text = item.partition("=")
        key = key.strip()
        try:
            values = ast.literal_eval(text.strip()) if sep else None
        except (ValueError, SyntaxError):
            values = None
        if not key or not isinstance(values, (list, tuple)):
            raise ConfigError(f"--grid {item!r}: expected KEY=[v1, v2, ...] with Python literals, "
                              f"e.g. --grid 'optim.lr=[1e-3, 3e-3]'")
        if key in axes:
            raise ConfigError(f"--grid {key} is given twice")
        axes[key] = list(values)
    if not axes:
        raise ConfigError("a sweep needs a sweep file or at least one --grid KEY=[...]")
    members = tuple(item.partition("=")[0].strip() for item in population)
    return Sweep(base=config, grid=axes, population=members)


def dry_run(sweep: Sweep, overrides: Sequence[str] = (), *, jobs: int = 1,
            time_step: bool = True) -> list[str]:
    """The lines ``repr-jax sweep --dry-run`` prints: each point with its steps, then the count,
    the total steps and, with ``time_step``, an estimate of the wall time: one step of each
    distinct model (:func:`_step_shape`) timed here, times its points' steps, over ``jobs``."""
    points = sweep.points(overrides)
    lines = [f"{p.name}  ({p.config.train.steps} steps)" for p in points]
    total = sum(p.config.train.steps for p in points)
    summary = f"{_count(len(points), 'point')}, {total:,} train steps in all"
    if time_step:
        shapes = {}
        for p in points:
            shapes.setdefault(_step_shape(p.config), p.config)
        seconds = {k: timed_step(cfg)[0] for k, cfg in shapes.items()}
        work = sum(p.config.train.steps * seconds[_step_shape(p.config)] for p in points)
        fastest, slowest = min(seconds.values()), max(seconds.values())
        summary += (f"; ~{_duration(work / max(1, min(jobs, len(points))))} of training at "
                    f"{jobs} at once ({len(shapes)} distinct model{'s' if len(shapes) > 1 else ''}"
                    f", {fastest * 1e3:.0f}-{slowest * 1e3:.0f} ms per step here, timed on all "
                    f"cores; evaluation extra)")
    return lines + [summary]


def _step_shape(cfg: Config) -> tuple:
    """What a train step's cost depends on: the encoder, the method, the batch and the inputs
    (not the data size, seed, schedule or evaluation)."""
    flat = config_lib.flatten(cfg)
    return tuple(sorted((k, repr(v)) for k, v in flat.items() if k.startswith(
        ("encoder.", "method.", "data.views.")) or k in (
        "train.batch_size", "data.name", "data.image_size", "data.max_len")))


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def timed_step(cfg: Config, steps: int = 5, warmup: int = 1) -> tuple[float, dict[str, Any]]:
    """Seconds per train step of ``cfg``'s compiled step on one device (after compiling and
    ``warmup`` steps), as a sweep point would train, and XLA's costs of the step."""
    import jax

    from repr_jax.train.run import single_device_step
    step, state, batches, hp, costs = single_device_step(cfg, warmup + steps)
    for batch in batches[:warmup]:
        state, metrics = step(state, batch, hp)
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for batch in batches[warmup:]:
        state, metrics = step(state, batch, hp)
    jax.block_until_ready(metrics)
    return (time.perf_counter() - start) / steps, costs


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------

def _write_json(path: Path, value: Any) -> None:
    files.write_json(path, value, default=str)


def _prepare_data(points: Sequence[Point]) -> None:
    """Prepares each distinct dataset (and its eval sets) once, here, so concurrent points only
    read them: two processes preparing one TFDS dataset would race."""
    from repr_jax.train.run import check_buildable, load_dataset, load_eval_sets
    seen = set()
    for p in points:
        try:
            check_buildable(p.config)
        except ConfigError as e:
            raise ConfigError(f"sweep point {p.name}: {e}") from None
        d = {k: v for k, v in config_lib.flatten(p.config.data).items()
             if k not in ("in_memory_mb", "workers", "prefetch") and not k.startswith("views.")}
        key = (tuple(sorted(d.items())), p.config.eval.sets)  # what the data and sets are
        if key not in seen:
            seen.add(key)
            try:
                load_eval_sets(p.config, load_dataset(p.config))
            except (ConfigError, ValueError, FileNotFoundError) as e:
                raise ConfigError(f"sweep point {p.name}: {e}") from None


def _last_step(run_dir: Path) -> int:
    """The last logged step of a point's metrics.jsonl (0 when none)."""
    path = run_dir / "metrics.jsonl"
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 4096))
            lines = f.read().decode(errors="ignore").strip().splitlines()
        return int(json.loads(lines[-1])["step"]) if lines else 0
    except (OSError, ValueError, KeyError, IndexError):
        return 0


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def run_sweep(sweep: Sweep, workdir: str | Path, *, jobs: int | None = None,
              overrides: Sequence[str] = (), retry_failed: bool = False, progress: bool = True,
              executor: str = "local", executor_options: Mapping[str, Any] | None = None
              ) -> list[dict[str, Any]]:
    """Trains every point not finished yet, then writes and returns the results table
    (:func:`collect`). ``executor`` places the points' processes (:mod:`.executors`: ``local``,
    ``jobs`` at a time; ``ray``; ``slurm``) with ``executor_options`` (its flags). Ctrl-C stops
    the running processes (each resumes next time from its latest checkpoint) and still writes
    the table of what finished. A point whose process is still running from an earlier, killed
    sweep is waited for, not started twice."""
    from tqdm.auto import tqdm

    from repr_jax.scaling.executors import (EX_DUPLICATE, WatchHandle, make_executor,
                                            running_elsewhere)
    from repr_jax.train.run import check_resumable
    workdir = Path(workdir)
    runs = workdir / "runs"
    points = sweep.points(overrides)
    for p in points:  # a changed base or grid must not silently mix two studies in one table
        check_resumable(p.config, runs / p.run)
    runs.mkdir(parents=True, exist_ok=True)
    _write_json(workdir / "sweep.json", {"points": [dict(name=p.name, values=p.values, run=p.run)
                                                    for p in points]})
    groups = _groups(points)
    statuses = {job: point_status(runs / job)["status"] for job in groups}
    todo = [job for job, st in statuses.items()
            if not (st == FINISHED or (st == FAILED and not retry_failed))]
    for job in todo:
        (runs / job).mkdir(parents=True, exist_ok=True)
        members = groups[job]
        if sweep.population:
            _write_json(runs / job / "members.json", dict(
                shared_batches=sweep.shared_batches,
                members=[dict(name=p.run.split("/members/")[1], values=p.values,
                              config=config_lib.to_dict(p.config)) for p in members]))
        else:
            config_lib.save_json(members[0].config, runs / job / "config.json")
            _write_json(runs / job / "point.json", dict(name=members[0].name,
                                                        values=members[0].values))
    elsewhere = {job: who for job in todo if (who := running_elsewhere(runs / job))}
    before = [st for job, st in statuses.items() if job not in todo]
    n_finished, n_failed = before.count(FINISHED), before.count(FAILED)
    what = "populations" if sweep.population else "points"
    if todo:
        _prepare_data([groups[job][0] for job in todo])
    # Nothing to run starts nothing (no Ray instance, no SLURM folder).
    place = make_executor(executor, workdir, jobs=jobs, processes=len(todo),
                          options=dict(executor_options or {})) if todo else None
    grouped = f" in {len(groups)} {what}" if sweep.population else ""
    print(f"sweep: {_count(len(points), 'point')}{grouped}; {len(groups) - len(todo)} done "
          f"or failed before, {len(todo)} to run"
          + (f" {place.describe()}" if place else "")
          + (f" ({len(elsewhere)} still running from before: waited for)" if elsewhere else "")
          + f" -> {workdir}", flush=True)

    def steps_done(job: str) -> int:  # from the metrics its (first) run has logged
        return _last_step(runs / groups[job][0].run)

    steps = {job: groups[job][0].config.train.steps for job in groups}
    done_steps = {job: steps[job] if job not in todo else steps_done(job) for job in groups}
    bar = tqdm(total=sum(steps.values()), initial=sum(done_steps.values()), unit="step",
               desc="sweep", disable=not progress, dynamic_ncols=True,
               mininterval=0.5 if sys.stderr.isatty() else 30)
    running: dict[str, Any] = {job: WatchHandle(runs / job) for job in elsewhere}
    queue = [job for job in todo if job not in elsewhere]
    try:
        while queue or running:
            room = place.room()
            if queue and room > 0:
                n = int(min(room, len(queue)))
                batch, queue = queue[:n], queue[n:]
                running.update(zip(batch, place.submit([runs / job for job in batch])))
            time.sleep(0.5)
            for job, handle in list(running.items()):
                outcome = handle.poll()
                if outcome is None:
                    done_steps[job] = steps_done(job)
                    continue
                del running[job]
                status = point_status(runs / job)
                if outcome.returncode == EX_DUPLICATE or isinstance(handle, WatchHandle) and (
                        status["status"] not in (FINISHED, FAILED)):
                    if running_elsewhere(runs / job):  # another process runs it: wait for that
                        running[job] = WatchHandle(runs / job)
                    else:  # it stopped (killed with its old sweep) without an outcome: resume
                        queue.append(job)
                    continue
                if outcome.returncode == 0 and status["status"] == FINISHED:
                    n_finished += 1
                    done_steps[job] = steps[job]
                else:
                    if status["status"] != FAILED:  # died without saying why (killed, OOM)
                        tail = _log_tail(runs / job / "log.txt", 3)
                        status = dict(status=FAILED, returncode=outcome.returncode,
                                      error=outcome.error or f"the process exited with code "
                                                             f"{outcome.returncode}: {tail}")
                        _write_json(runs / job / "status.json", status)
                    n_failed += 1
                    bar.write(f"sweep: {job} failed: {status['error'].splitlines()[0]} "
                              f"(log: {runs / job / 'log.txt'})")
            bar.set_postfix_str(f"{n_finished}/{len(groups)} done, {n_failed} failed, "
                                f"{len(running)} running", refresh=False)
            bar.update(sum(done_steps.values()) - bar.n)
    except KeyboardInterrupt:
        bar.write("sweep: interrupted; stopping the running points (rerun to resume them)")
        for handle in running.values():
            handle.cancel()
        raise
    finally:
        bar.close()
        if place is not None:
            place.close()
        rows = collect(workdir)
    print(f"sweep: {n_finished} of {_count(len(groups), what[:-1])} finished, {n_failed} failed; "
          f"table: {workdir / 'results.csv'}")
    return rows


def _count(n: int, noun: str) -> str:
    """``1 point``, ``2 points``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def run_point(run_dir: Path) -> int:
    """A point's process: trains ``run_dir/config.json`` (or the population of
    ``run_dir/members.json``) in ``run_dir`` and records the outcome in ``status.json`` (a
    population's members each get theirs: finished, or failed where they diverged). Holds the
    point's lock while it runs: a second process for the point exits with EX_DUPLICATE, and a
    finished point is not trained again."""
    import socket
    import traceback

    from repr_jax import compile_cache
    from repr_jax.files import WorkdirBusy
    from repr_jax.scaling.executors import EX_DUPLICATE, point_lock
    compile_cache.enable()  # a point's own process: the CLI's cache (REPR_JAX_COMPILE_CACHE=0: off)
    try:
        lock = point_lock(run_dir).acquire()
    except WorkdirBusy as e:
        print(f"sweep point {run_dir.name}: already running ({e.holder}); this process exits",
              flush=True)
        return EX_DUPLICATE
    if point_status(run_dir)["status"] == FINISHED:
        return 0
    node = os.environ.get("REPR_JAX_NODE") or socket.gethostname()
    _write_json(run_dir / "status.json", {"status": RUNNING, "pid": os.getpid(), "node": node})
    started = time.time()
    try:
        if (run_dir / "members.json").exists():
            from repr_jax.train.population import train_population
            spec = json.loads((run_dir / "members.json").read_text())
            names = [m["name"] for m in spec["members"]]
            result = train_population([config_lib.from_dict(m["config"]) for m in spec["members"]],
                                      run_dir, shared_batches=spec["shared_batches"],
                                      progress=False, names=names,
                                      hparams=[m.get("values", {}) for m in spec["members"]])
            for name in names:
                step = result["diverged"].get(name)
                _write_json(run_dir / "members" / name / "status.json", dict(
                    status=FINISHED, node=node) if step is None else dict(
                    status=FAILED, node=node,
                    error=f"TrainingDiverged: the loss became non-finite by step "
                          f"{step} (the population's other members went on)"))
        else:
            from repr_jax.train import train_and_evaluate
            cfg = config_lib.load_json(run_dir / "config.json")
            point = _read_json(run_dir / "point.json", {})
            train_and_evaluate(cfg, run_dir, progress=False, verbose=False,
                               hparams=point.get("values"))
        _write_json(run_dir / "status.json", dict(status=FINISHED, node=node,
                                                  seconds=time.time() - started))
        return 0
    except Exception as e:  # noqa: BLE001 - recorded for the table; the sweep goes on
        traceback.print_exc()
        _write_json(run_dir / "status.json", dict(status=FAILED, error=f"{type(e).__name__}: {e}",
                                                  node=node, seconds=time.time() - started))
        return 1
    finally:
        lock.release()  # after status.json: a waiting sweep reads the outcome once it is free


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

def _cell(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _point_rows(run_dir: Path, name: str, values: Mapping[str, Any], job_dir: Path
                ) -> list[dict[str, Any]]:
    from repr_jax.train.log import eval_steps, read_jsonl
    status = point_status(run_dir if (run_dir / "status.json").exists() else job_dir)
    cfg_path = run_dir / "config.json"
    flat = config_lib.flatten(config_lib.load_json(cfg_path)) if cfg_path.exists() else {}
    info = _read_json(run_dir / "run.json", {})
    train_loss = {r["step"]: r.get("loss") for r in read_jsonl(run_dir / "metrics.jsonl")
                  } if (run_dir / "metrics.jsonl").exists() else {}
    steps = eval_steps(run_dir) or [None]
    if status["status"] != FINISHED:
        steps = [s for s in steps if s is not None and s < flat.get("train.steps", 0)]
        steps.append(None)  # a row that says why the point has no final step
    rows = []
    for step in steps:
        row: dict[str, Any] = dict(point=name, status=status["status"], step=step,
                                   final=step is not None and step == flat.get("train.steps"),
                                   error=status.get("error", ""), node=status.get("node", ""))
        if step is not None:
            n = info.get("train_examples")
            seen = step * flat["train.batch_size"]
            row.update(examples_seen=seen, epochs=seen / n if n else None, train_examples=n,
                       params=info.get("params"),
                       non_embedding_params=info.get("non_embedding_params"),
                       flops_per_step=info.get("flops_per_step"),
                       flops=info.get("flops_per_step", math.nan) * step,
                       **{"train/loss": train_loss.get(step)})
            for r in _read_json(run_dir / "eval" / f"step_{step}.json", []):
                if r["step"] != step:  # reference rows (raw inputs, random init) live at step 0
                    continue
                key = f"{r['evaluator']}/{r['metric']}"
                row[key] = r["value"]
                if "ci_low" in r:
                    row[f"{key}.ci_low"], row[f"{key}.ci_high"] = r["ci_low"], r["ci_high"]
        row.update({k: _cell(v) for k, v in values.items()})
        row.update({k: _cell(v) for k, v in flat.items() if k not in row})
        rows.append(row)
    return rows


def collect(workdir: str | Path) -> list[dict[str, Any]]:
    """Reads every point of ``workdir/sweep.json`` into rows (one per point × evaluation step,
    plus one saying why for a point that failed or has not finished) and writes
    ``results.csv``, ``results.json`` and ``plots/loss_vs_flops.png``."""
    workdir = Path(workdir)
    sweep = _read_json(workdir / "sweep.json")
    if sweep is None:
        raise FileNotFoundError(f"{workdir} has no sweep.json: not a sweep directory")
    rows = []
    for p in sweep["points"]:
        run = p.get("run", p["name"])
        rows.extend(_point_rows(workdir / "runs" / run, p["name"], p["values"],
                                workdir / "runs" / run.split("/members/")[0]))
    grid_keys = list(dict.fromkeys(k for p in sweep["points"] for k in p["values"]))
    metric_keys = sorted({k for r in rows for k in r if "/" in k and k not in RUN_COLUMNS
                          and "." not in k.split("/")[0]},
                         key=lambda k: (k != "upstream/loss", k))
    rest = list(dict.fromkeys(k for r in rows for k in r))
    columns = list(RUN_COLUMNS) + metric_keys + [k for k in grid_keys if k not in metric_keys]
    columns += [k for k in rest if k not in columns]
    write_table(rows, workdir / "results", columns)
    from repr_jax.scaling.plots import loss_vs_flops_figure
    from repr_jax.train.log import save_figure
    fig = loss_vs_flops_figure(rows, {p["name"]: p["values"] for p in sweep["points"]})
    if fig is not None:
        save_figure(fig, workdir / "plots" / "loss_vs_flops.png")
    return rows


if __name__ == "__main__":  # python -m repr_jax.scaling.sweep RUN_DIR: one point, here
    sys.exit(run_point(Path(sys.argv[1])))
