"""Studies: a claim, the runs that test it, and the analysis that turns them into a table and plots.

An experiment file that defines ``get_study(arg) -> Study`` runs with

    repr-jax study NAME[:quick] --workdir DIR [--jobs N] [--set KEY=VALUE]

which trains the study's sweep (if it has one) under ``DIR/`` exactly as ``repr-jax sweep`` does —
several points at once, failures isolated, resumable — then calls ``analyze(DIR, table)`` with the
sweep's rows and writes what it returns to ``DIR/study.csv`` and ``DIR/study.json``; the analysis
writes its plots under ``DIR/plots/``. Rerunning skips the finished runs and redoes the analysis.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from repr_jax import config as config_lib
from repr_jax import files
from repr_jax.scaling.sweep import FINISHED, Sweep, run_sweep
from repr_jax.scaling.table import write_table

Rows = list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Study:
    """``claim``: what the paper says (one line, written with the results). ``sweep``: the training
    runs, if any. ``analyze(workdir, table) -> rows``: reads the runs (``table`` is the sweep's
    results; :func:`runs_by_point` finds each point's directory) and returns the result rows."""
    claim: str
    analyze: Callable[[Path, Rows], Rows]
    sweep: Sweep | None = None


def load_study(name_or_path: str) -> Study:
    """``get_study(arg)`` of an experiment file (``name[:arg]``, as for experiments)."""
    return config_lib.load_from(name_or_path, "get_study", Study)


def runs_by_point(workdir: str | Path) -> dict[str, Path]:
    """Each sweep point's run directory (a population member's is its population's job
    directory, which holds the checkpoint), by point name."""
    workdir = Path(workdir)
    points = json.loads((workdir / "sweep.json").read_text())["points"]
    return {p["name"]: workdir / "runs" / p.get("run", p["name"]).split("/members/")[0]
            for p in points}


def _embed_splits(method, dataset, variables: Sequence[Any], which: str,
                  extra_splits: dict | None) -> list[dict[str, tuple[Any, Any]]]:
    """One Embedder (compiled once) over the dataset's splits for each variables in turn."""
    from repr_jax.eval import Embedder
    splits = dict(dataset.splits, **(extra_splits or {}))
    from repr_jax.data.tokenizer import pad_id_of
    embedder = Embedder(method.embed, splits, query_fn=method.embed_query,
                        pos_fn=method.embed_pos, layers_fn=method.embed_layers,
                        pad_id=None if dataset.vocab is None else pad_id_of(dataset.vocab))

    def features(v, s):
        if which == "pair":
            return embedder.embed(v, s["x"], "query"), embedder.embed(v, s["x_pos"], "pos")
        return embedder.embed(v, s["x"], which)

    return [{name: (features(v, s), s["label"]) for name, s in splits.items()} for v in variables]


def embedded(run_dir: str | Path, *, which: str = "x", extra_splits: dict | None = None,
             initial: bool = False) -> dict[str, tuple[Any, Any]]:
    """``{split: (features, labels)}`` of a trained run (its latest checkpoint) on every split of
    its dataset plus ``extra_splits`` (``{name: {"x", "label"}}``). ``which``: ``"x"`` (the
    representation), ``"pair"`` (a pair's two sides, ``x`` and ``x_pos``, in the space where pairs
    are compared: a tuple) or ``"layers"`` (a tuple of every layer's pooled features, then the
    representation). ``initial=True``: the run's encoder at initialisation instead (its seed;
    the random-init reference)."""
    from repr_jax.train import load_trained
    from repr_jax.train.run import build_run
    if initial:
        _, dataset, method, state = build_run(config_lib.load_json(Path(run_dir) / "config.json"))
    else:
        _, dataset, method, state = load_trained(run_dir)
    return _embed_splits(method, dataset, [state.variables], which, extra_splits)[0]


def embedded_members(population_dir: str | Path, *, which: str = "x",
                     extra_splits: dict | None = None) -> list[dict[str, tuple[Any, Any]]]:
    """:func:`embedded` for every member of a trained population, in member order."""
    from repr_jax.train.population import load_population, member
    pop = load_population(population_dir)
    variables = [member(pop["state"], i).variables for i in range(len(pop["names"]))]
    return _embed_splits(pop["method"], pop["dataset"], variables, which, extra_splits)


def probe_accuracy(feats: dict[str, tuple[Any, Any]], transform: Callable = lambda f: f,
                   test: str = "test") -> float:
    """Linear-probe (ridge) accuracy on ``feats[test]``, fit on ``train`` with the penalty chosen
    on ``validation``; ``transform`` maps each split's features first (a prefix, a layer)."""
    from repr_jax.eval import linear_probe
    (tr, ytr), (va, yva), (te, yte) = (feats["train"], feats["validation"], feats[test])
    return linear_probe(transform(tr), ytr, transform(te), yte, val_x=transform(va),
                        val_y=yva)["accuracy"]


def run_study(study: Study, workdir: str | Path, *, jobs: int | None = None,
              overrides: Sequence[str] = (), retry_failed: bool = False,
              progress: bool = True, executor: str = "local",
              executor_options: dict[str, Any] | None = None) -> Rows:
    """Trains the study's sweep (resuming; its points placed by ``executor``, as
    :func:`run_sweep`'s), analyses it, writes ``study.csv``/``.json``."""
    workdir = Path(workdir)
    table: Rows = []
    if study.sweep is not None:
        table = run_sweep(study.sweep, workdir, jobs=jobs, overrides=overrides,
                          retry_failed=retry_failed, progress=progress, executor=executor,
                          executor_options=executor_options)
        failed = sorted({r["point"] for r in table if r["status"] != FINISHED})
        if failed:
            raise RuntimeError(f"study: {len(failed)} run(s) did not finish ({', '.join(failed)}); "
                               f"see {workdir}/runs/*/status.json, then rerun (--retry-failed "
                               f"for failed ones)")
    elif overrides:
        raise config_lib.ConfigError("this study trains nothing: --set has nothing to override")
    workdir.mkdir(parents=True, exist_ok=True)
    rows = study.analyze(workdir, table)
    write_table(rows, workdir / "study")
    files.write_text(workdir / "claim.txt", study.claim.strip() + "\n")
    return rows
