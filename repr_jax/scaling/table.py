"""Fits from a results table: ``repr-jax fit --table results.csv --law NAME --x COLS --y COL``.

Reads a CSV (one row per run × evaluation point), keeps the rows matching every ``--where COL=VALUE``,
fits the law with bootstrap intervals, optionally holding out the rows above a threshold of the first
input to measure extrapolation, and writes ``fit_<law>.json`` and ``fit_<law>.png`` next to the table
(or into ``out_dir``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from repr_jax import files
from repr_jax.scaling.fit import bootstrap, fit_law
from repr_jax.scaling.laws import get_law


def _csv_value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"
    return v


def _json_value(v: Any) -> Any:
    return v.item() if isinstance(v, (np.generic, np.ndarray)) and np.ndim(v) == 0 else str(v)


def write_table(rows: Sequence[dict[str, Any]], stem: str | Path,
                columns: Sequence[str] | None = None) -> None:
    """``stem.csv`` (empty cell = missing) and ``stem.json`` of ``rows``; ``columns`` default to
    every key in first-seen order."""
    stem = Path(stem)
    columns = list(columns or dict.fromkeys(k for r in rows for k in r))
    files.write_text(stem.with_suffix(".json"), json.dumps(
        [{c: r.get(c) for c in columns} for r in rows], indent=1, default=_json_value) + "\n")
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, columns)
    w.writeheader()
    for r in rows:
        w.writerow({c: _csv_value(r.get(c)) for c in columns})
    files.write_text(stem.with_suffix(".csv"), text.getvalue())


def read_table(path: str | Path, where: Sequence[str] = ()) -> list[dict[str, str]]:
    """The CSV's rows (as strings) that match every ``COL=VALUE`` filter (numeric columns compare
    as numbers)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results table at {path}")
    if not path.is_file():
        raise ValueError(f"{path} is a directory, not a results table (a CSV file such as "
                         f"{path / 'results.csv'})")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header:
                raise ValueError(f"{path} is empty: no header row")
            twice = sorted({c for c in header if header.count(c) > 1})
            if twice:
                raise ValueError(f"{path}: the header names {', '.join(map(repr, twice))} twice "
                                 f"(columns {[i + 1 for i, c in enumerate(header) if c in twice]})"
                                 f": rename one, or a column would shadow the other")
            rows = []
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise ValueError(f"{path} line {reader.line_num} has {len(row)} cells, the "
                                     f"header has {len(header)}: a ragged or damaged table")
                rows.append(dict(zip(header, row)))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a text CSV (byte {e.start} is not UTF-8)") from None
    except csv.Error as e:
        raise ValueError(f"{path} is not a readable CSV: {e}") from None
    for cond in where:
        col, sep, value = cond.partition("=")
        if not sep:
            raise ValueError(f"--where {cond!r}: expected COL=VALUE")
        if rows and col not in rows[0]:
            raise ValueError(f"--where: no column {col!r}; columns: {', '.join(rows[0])}")
        rows = [r for r in rows if _equal(r[col], value)]
    return rows


def _equal(a: str, b: str) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except ValueError:
        return a == b


def _column(rows, col) -> np.ndarray:
    """A numeric column; ``1-COL`` is one minus ``COL`` (an error rate from an accuracy)."""
    if col.startswith("1-") and not (rows and col in rows[0]):
        return 1.0 - _column(rows, col[2:])
    if rows and col not in rows[0]:
        raise ValueError(f"no column {col!r} in the table; columns: {', '.join(rows[0])}")
    try:  # an empty cell (a failed run, a metric not measured) is missing: NaN, dropped below
        return np.asarray([float(r[col]) if r[col] != "" else np.nan for r in rows], np.float64)
    except ValueError as e:
        raise ValueError(f"column {col!r} is not numeric: {e}") from None


def fit_table(table: str | Path, *, law: str, x: Sequence[str], y: str, where: Sequence[str] = (),
              out_dir: str | Path | None = None, n_bootstrap: int = 4000,
              holdout_above: float | None = None, holdout_below: float | None = None,
              seed: int = 0, plot: bool = True, name: str | None = None,
              log_space: bool = True) -> dict[str, Any]:
    """Fits ``law`` to ``y`` against the columns ``x`` (in the law's input order, e.g. ``N,D`` for
    Chinchilla); returns (and writes as ``fit_<name or law>.json``) parameters with standard errors
    and 95% intervals, and the relative errors on the rows held out for extrapolation: those whose
    first input is above ``holdout_above`` (larger models) or below ``holdout_below`` (e.g. lower
    upstream loss). ``log_space``: fit relative errors (residuals of log y; needs y > 0), else
    absolute ones."""
    law_obj = get_law(law)
    if len(x) != len(law_obj.inputs):
        raise ValueError(f"law {law!r} takes {len(law_obj.inputs)} inputs "
                         f"({', '.join(law_obj.inputs)}); got --x {','.join(x)}")
    for flag, value in (("--holdout-above", holdout_above), ("--holdout-below", holdout_below)):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{flag} must be a finite number, got {value}")
    if name is not None and (Path(name).name != name or name in ("", ".", "..")):
        raise ValueError(f"--name {name!r} must be a plain name (fit_<NAME>.json is written in "
                         f"the --out folder), not a path")
    out = files.check_output(out_dir or Path(table).absolute().parent, flag="--out",
                             inputs=[table], folder=True)
    rows = read_table(table, where)
    data = {name: _column(rows, col) for name, col in zip(law_obj.inputs, x)}
    target = _column(rows, y)
    ok = np.isfinite(target) & np.all([np.isfinite(v) for v in data.values()], axis=0)
    data, target = {k: v[ok] for k, v in data.items()}, target[ok]
    for col, (inp, values) in zip(x, data.items()):
        if (values <= 0).any():  # every law takes the log of its inputs
            raise ValueError(f"column {col!r} has {int((values <= 0).sum())} rows <= 0 (e.g. "
                             f"{values[values <= 0][0]:g}); law {law_obj.name!r} takes log "
                             f"{inp}: drop them with --where")
    first = data[law_obj.inputs[0]]
    train = np.ones_like(first, bool)
    if holdout_above is not None:
        train &= first <= holdout_above
    if holdout_below is not None:
        train &= first >= holdout_below
    if train.sum() < len(law_obj.params) + 1:
        raise ValueError(f"{int(train.sum())} rows to fit {len(law_obj.params)} parameters "
                         f"(after --where and the hold-out)")
    if log_space and (target[train] <= 0).any():
        bad = int((target[train] <= 0).sum())
        raise ValueError(f"{bad} rows have {y} <= 0 (e.g. {target[train][target[train] <= 0][0]}),"
                         f" which a fit in log space cannot take; drop them with --where, or fit "
                         f"absolute errors with --linear-y")
    fit_inputs = {k: v[train] for k, v in data.items()}
    fit = fit_law(law_obj, fit_inputs, target[train], log_space=log_space)
    boot = bootstrap(law_obj, fit_inputs, target[train], n=n_bootstrap, seed=seed, start=fit,
                     log_space=log_space)
    result: dict[str, Any] = {
        "law": law_obj.name, "source": law_obj.source, "table": str(table), "x": list(x), "y": y,
        "where": list(where), "points": int(train.sum()), "objective": fit.objective,
        "starts_in_best_basin": fit.starts_in_best_basin, "num_starts": fit.num_starts,
        "params": {k: {"value": v, "se": boot.se[k], "low": boot.low[k], "high": boot.high[k]}
                   for k, v in fit.params.items()},
        "bootstrap_resamples": n_bootstrap, "bootstrap_failed": boot.failed,
        "log_space": log_space, "warnings": fit_warnings(fit, boot, int(train.sum()), n_bootstrap)}
    if (~train).any():
        pred = fit.predict({k: v[~train] for k, v in data.items()})
        rel = np.abs(pred - target[~train]) / np.abs(target[~train])
        result["holdout"] = {"above": holdout_above, "below": holdout_below,
                             "points": int((~train).sum()),
                             "mean_relative_error": float(rel.mean()),
                             "max_relative_error": float(rel.max()),
                             "rows": [dict({c: float(data[k][~train][i])
                                            for c, k in zip(x, law_obj.inputs)},
                                           observed=float(target[~train][i]),
                                           predicted=float(pred[i]),
                                           relative_error=float(rel[i]))
                                      for i in range(int((~train).sum()))]}
    stem = f"fit_{name or law_obj.name}"
    result["json"] = str(out / f"{stem}.json")
    if plot:
        result["plot"] = str(out / f"{stem}.png")
    files.write_json(out / f"{stem}.json", result)
    if plot:
        from repr_jax.scaling.plots import plot_fit
        plot_fit(law_obj, fit, boot, data, target, train, out / f"{stem}.png", x_label=x[0],
                 y_label=y)
    return result


MIN_POINTS_PER_PARAM = 5


def fit_warnings(fit, boot, points: int, resamples: int) -> list[str]:
    """What a reader of the fit should not miss: too few points per parameter (the bootstrap then
    understates the uncertainty), refits that failed, parameters the points do not pin down."""
    out = []
    n_params = len(fit.params)
    if points < MIN_POINTS_PER_PARAM * n_params:
        out.append(f"{points} points for {n_params} parameters ({points / n_params:.1f} per "
                   f"parameter, fewer than {MIN_POINTS_PER_PARAM}): the fit is barely determined "
                   f"and its bootstrap intervals understate the uncertainty; fit more runs or a "
                   f"law with fewer parameters")
    if boot.failed:
        out.append(f"{boot.failed} of {resamples} bootstrap refits did not converge and are left "
                   f"out of the intervals")
    loose = [k for k, v in fit.params.items() if boot.se[k] > abs(v)]
    if loose:
        out.append(f"{', '.join(loose)}: standard error larger than the value; these points do "
                   f"not determine {'it' if len(loose) == 1 else 'them'}")
    return out


def format_fit(result: dict[str, Any]) -> str:
    lines = [f"{result['law']} fit on {result['points']} points of {result['table']} "
             f"({result['starts_in_best_basin']} of {result['num_starts']} starts in the best "
             f"basin; {result['bootstrap_resamples']} bootstrap resamples)"]
    for k, p in result["params"].items():
        lines.append(f"  {k:8} {p['value']:12.6g}  SE {p['se']:10.4g}  95% "
                     f"[{p['low']:.6g}, {p['high']:.6g}]")
    if "holdout" in result:
        h = result["holdout"]
        where = " and ".join(f"{side} {h[side]:g}" for side in ("above", "below")
                             if h.get(side) is not None)
        lines.append(f"  held out {h['points']} points {where}: mean relative error "
                     f"{h['mean_relative_error']:.4f}, max {h['max_relative_error']:.4f}")
    lines += [f"warning: {w}" for w in result.get("warnings", ())]
    lines.append("wrote " + ", ".join(result[k] for k in ("json", "plot") if k in result))
    return "\n".join(lines)
