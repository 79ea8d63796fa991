"""Every evaluator's time and peak memory across N (examples) and D (dimensions), and the fitted
exponents beside the order its docstring states.

    python bench/eval_scaling.py                      # the grid below, ~25 min on 2 cores
    python bench/eval_scaling.py --only ridge_probe,knn --n 100,10000 --d 64,1024
    python bench/eval_scaling.py --table bench/eval_scaling.csv   # the table and exponents again

Each (evaluator, N, D) cell runs in a fresh process (its peak RSS is the cell's own) on synthetic
features: 10 Gaussian classes, ``N`` training rows and 1,000 test rows / queries, float32. Time is
a warm call (the first call, which compiles, is reported beside it; a first call past 20 s is the
time). Peak memory is the cell process's peak RSS while the evaluator runs (reset after the
synthetic features are made; it includes them, ``input_mb``, and ~260-400 MB of JAX runtime). A cell
that needs more than ``--max-gb`` of input, or runs past ``--timeout``, is recorded as skipped or
timed out; results go to a CSV (written atomically after each cell; a rerun skips the cells it
holds, so the bench resumes).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

QUERIES, CLASSES = 1_000, 10
# name: (stated time order, stated memory order, N values beyond the common grid)
EVALUATORS = {
    "ridge_probe": ("N D min(N,D)", "N D + min(N,D)^2", ()),
    "logistic_probe": ("N D^2 + iters N D C", "N D + D^2", ()),
    "fewshot": ("shots^2 C^2 D + Q D C per draw", "Q D + shots^2 C^2", ()),
    "knn": ("Q N D", "N D + tile", (1_000_000,)),
    "retrieval": ("Q N D", "N D + tile", (1_000_000,)),
    "bootstrap": ("R N", "min(R N, 2^24)", (1_000_000,)),
    "clustering": ("iters N K D", "N D", ()),
    "geometry": ("N D min(N,D)", "N D + min(N,D)^2", ()),
}
FIELDS = ["evaluator", "n", "d", "status", "first_s", "warm_s", "peak_mb", "input_mb"]


def _features(n: int, d: int, seed: int = 0):
    import jax
    import jax.numpy as jnp
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
    means = jax.random.normal(k1, (CLASSES, d)) * (3 / math.sqrt(d))
    y = jax.random.randint(k2, (n + QUERIES,), 0, CLASSES)
    x = means[y] + jax.random.normal(k3, (n + QUERIES, d)) / math.sqrt(d)
    x, y = jax.block_until_ready((x.astype(jnp.float32), y))
    return x[:n], y[:n], x[n:], y[n:]


def _call(name: str, n: int, d: int):
    """A function running evaluator ``name`` once on fresh synthetic features of ``n x d``."""
    import jax.numpy as jnp

    from repr_jax import eval as E
    if name == "bootstrap":
        v = jnp.asarray((jnp.arange(n) % 3 == 0).astype(jnp.float32))
        return lambda: E.bootstrap_ci(v, num_resamples=1000).high
    tr, ytr, te, yte = _features(n, d)
    if name == "ridge_probe":
        return lambda: E.linear_probe(tr, ytr, te, yte, kind="ridge")["accuracy"]
    if name == "logistic_probe":
        return lambda: E.linear_probe(tr, ytr, te, yte, kind="logistic", l2=1e-4)["accuracy"]
    if name == "fewshot":
        return lambda: E.fewshot(tr, ytr, te, yte, shots=(1, 5, 10, 25), seeds=5)["25shot"]
    if name == "knn":
        return lambda: E.knn_classifier(tr, ytr, te, yte, k=20)["accuracy"]
    if name == "retrieval":
        return lambda: E.retrieve(te, tr, k=10)[1]
    if name == "clustering":
        return lambda: E.ami(ytr, E.kmeans(tr, CLASSES, num_inits=1, max_iters=50)["labels"])
    if name == "geometry":  # the library functions on all N rows (the evaluator subsamples)
        return lambda: (E.effective_rank(tr), E.coding_rate(tr), E.linear_cka(tr, tr[:, :32]),
                        E.uniformity(tr[:20_000]), E.anisotropy(tr))
    raise ValueError(f"unknown evaluator {name!r}; choose from {tuple(EVALUATORS)}")


def _reset_peak() -> bool:
    """Resets this process's peak RSS (Linux: ``clear_refs`` 5), so the peak read afterwards is
    the evaluator's, not the synthetic data's generation."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_cell(name: str, n: int, d: int) -> dict:
    import gc

    import jax
    fn = _call(name, n, d)
    gc.collect()
    _reset_peak()
    t = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - t
    warm = first  # a call past 20 s is timed once: compilation is a rounding error there
    if first < 20:
        t = time.perf_counter()
        jax.block_until_ready(fn())
        warm = time.perf_counter() - t
    return {"first_s": round(first, 4), "warm_s": round(warm, 4), "peak_mb": round(_peak_mb())}


def _input_mb(name: str, n: int, d: int) -> float:
    return (n * 4 if name == "bootstrap" else (n + QUERIES) * d * 4) / 2 ** 20


def _write(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, FIELDS)
    w.writeheader()
    w.writerows(rows)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, path)


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = list(csv.DictReader(path.open()))
    for r in rows:
        r["n"], r["d"] = int(r["n"]), int(r["d"])
    return rows


def exponents(rows: list[dict]) -> dict[str, tuple[float | None, float | None]]:
    """Per evaluator, the log-log slope of warm time in N (at the largest D with two timed N) and
    in D (at the largest N with two timed D), from cells that took at least 20 ms."""
    out = {}
    for name in EVALUATORS:
        ok = [r for r in rows if r["evaluator"] == name and r["status"] == "ok"
              and float(r["warm_s"]) >= 0.02]

        def slope(key, fixed):
            best = None
            for value in sorted({r[fixed] for r in ok}, reverse=True):
                pts = sorted((r[key], float(r["warm_s"])) for r in ok if r[fixed] == value)
                if len(pts) >= 2:
                    (a, ta), (b, tb) = pts[-2], pts[-1]
                    best = math.log(tb / ta) / math.log(b / a)
                    break
            return best
        out[name] = (slope("n", "d"), slope("d", "n"))
    return out


def table(rows: list[dict]) -> str:
    lines = ["| evaluator | stated time / memory | fitted exponent N, D | N | D | warm s | first s "
             "| peak MB |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    fits = exponents(rows)
    for name, (t_order, m_order, _) in EVALUATORS.items():
        en, ed = fits[name]
        fit = f"{en:.2f}, {ed:.2f}" if en is not None and ed is not None else (
            f"{en if en is None else round(en, 2)}, {ed if ed is None else round(ed, 2)}")
        for i, r in enumerate(r for r in rows if r["evaluator"] == name):
            cells = ([name, f"{t_order} / {m_order}", fit] if i == 0 else ["", "", ""])
            timing = ([str(r["warm_s"]), str(r["first_s"]), str(r["peak_mb"])]
                      if r["status"] == "ok" else [r["status"], "", ""])
            lines.append("| " + " | ".join(cells + [f"{r['n']:,}", f"{r['d']:,}"] + timing) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(EVALUATORS), help="comma-separated evaluators")
    p.add_argument("--n", default="100,10000,100000", help="training rows (comma-separated)")
    p.add_argument("--d", default="64,1024,4096,16384", help="dimensions (comma-separated)")
    p.add_argument("--out", default=str(Path(__file__).with_name("eval_scaling.csv")))
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per cell")
    p.add_argument("--max-gb", type=float, default=4.0, help="largest input per cell (GiB)")
    p.add_argument("--table", metavar="CSV", help="print the table of a results CSV and exit")
    p.add_argument("--cell", nargs=3, metavar=("EVALUATOR", "N", "D"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cell:
        name, n, d = args.cell[0], int(args.cell[1]), int(args.cell[2])
        print(json.dumps(run_cell(name, n, d)))
        return 0
    if args.table:
        print(table(_read(Path(args.table))))
        return 0
    names = [s for s in args.only.split(",") if s]
    unknown = sorted(set(names) - set(EVALUATORS))
    if unknown:
        p.error(f"unknown evaluators {unknown}; choose from {tuple(EVALUATORS)}")
    ns, ds = [int(v) for v in args.n.split(",")], [int(v) for v in args.d.split(",")]
    out = Path(args.out)
    rows = _read(out)
    done = {(r["evaluator"], r["n"], r["d"]) for r in rows}
    for name in names:
        extra = EVALUATORS[name][2]
        grid = [(n, d) for n in ns for d in ds] + [(n, min(ds)) for n in extra]
        if name == "bootstrap":  # D plays no part
            grid = [(n, 1) for n in sorted(set(ns) | set(extra))]
        for n, d in grid:
            if (name, n, d) in done:
                continue
            row = {"evaluator": name, "n": n, "d": d, "input_mb": round(_input_mb(name, n, d))}
            if row["input_mb"] > args.max_gb * 1024:
                row["status"] = f"skipped (input over {args.max_gb:g} GiB)"
            else:
                try:
                    proc = subprocess.run([sys.executable, __file__, "--cell", name, str(n),
                                           str(d)], capture_output=True, text=True,
                                          timeout=args.timeout)
                    if proc.returncode == 0:
                        row.update(json.loads(proc.stdout.strip().splitlines()[-1]), status="ok")
                    else:
                        tail = (proc.stderr.strip().splitlines() or ["?"])[-1][:120]
                        row["status"] = f"failed: {tail}"
                except subprocess.TimeoutExpired:
                    row["status"] = f"timed out (> {args.timeout:g} s)"
            rows.append(row)
            _write(out, rows)
            print(f"{name:15s} N={n:>9,} D={d:>6,}: {row['status']:10s} "
                  f"warm {row.get('warm_s', '-')} s, first {row.get('first_s', '-')} s, "
                  f"peak {row.get('peak_mb', '-')} MB", flush=True)
    print(table([r for r in rows if r["evaluator"] in names]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
