"""Reruns the commands whose results the documentation prints and checks the printed numbers
against a fresh run's: the README's default-experiment table and time, and each experiment
header's "Expected" table (one row per representation, one column per evaluator/metric) and
runtime.

    python bench/docs_numbers.py                           # the README's default run
    python bench/docs_numbers.py byol_mnist1d moco_mnist1d  # those experiments' headers
    python bench/docs_numbers.py --headers                 # every header with an Expected table
    python bench/docs_numbers.py --headers --write         # ... and rewrite what differs

Each command runs in a fresh work directory, alone, timed from start to exit. The numbers are
deterministic on one machine (the README's table is the same on every run there), so a
difference means the code or the machine changed; times depend on the load, which is measured
and written beside them. Tables of other shapes (studies' results, simclr_shapes' ablation) are
not parsed: rerun those by hand.
"""

from __future__ import annotations

import argparse
import datetime
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repr_jax import files
from repr_jax.train.log import eval_steps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import busy_cores, busy_text, describe as machine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXPERIMENTS = ROOT / "experiments"
NUMBER = r"-?\d+\.\d+"
TABLE_HEAD = re.compile(r"^(\s+)representation\s+(\S+(?:\s+\S+)*)\s*$")
RUNTIME = re.compile(r"Runtime:   \d+ s for the whole command \(training and evaluation\), "
                     r"measured \d{4}-\d{2}-\d{2}\n\s+[^\n]*\.\n")


def duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60} s" if s >= 120 else f"{s} s"


def run(args: list[str], workdir: Path) -> dict:
    """Runs ``repr-jax ARGS --workdir WORKDIR --no-progress``; its time, the cores busy before
    it, peak memory, output and the rows of its last evaluation."""
    load = busy_cores()
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "repr_jax.cli", *args, "--workdir", str(workdir),
                           "--no-progress"], capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode:
        raise SystemExit(f"repr-jax {' '.join(args)} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    steps = eval_steps(workdir)
    rows = files.read_json(workdir / "eval" / f"step_{steps[-1]}.json")
    return dict(seconds=seconds, load=load, stdout=done.stdout, step=steps[-1],
                peak_gb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20,
                values={(r["representation"], f"{r['evaluator']}/{r['metric']}"): r["value"]
                        for r in rows})


def final_loss(stdout: str) -> str | None:
    m = re.search(r"final train loss (\S+?)\)", stdout)
    return m[1] if m else None


CELL = rf"({NUMBER})(?:\s*±{NUMBER})?"  # a value, with its interval's half-width or not


def _row(line: str, cells: int) -> re.Match | None:
    return re.match(rf"^(\s+)(.+?)((?:\s+{CELL}){{{cells}}})\s*$", line)


def expected_table(lines: list[str]) -> tuple[int, list[str]] | None:
    """Where a header's "Expected" table starts and its metrics (``evaluator/metric`` names), when
    its first row has a number per metric; None for a table of another shape."""
    for i, line in enumerate(lines[:-1]):
        head = TABLE_HEAD.match(line)
        if head:
            metrics = head[2].split()
            if all("/" in m for m in metrics) and _row(lines[i + 1], len(metrics)):
                return i, metrics
    return None


def check_header(name: str, write: bool) -> list[str]:
    """Reruns experiment ``name`` and returns its header's differences (rewriting them when
    ``write``)."""
    path = EXPERIMENTS / f"{name}.py"
    text = path.read_text()
    doc_end = text.index('"""', 3)
    doc = text[:doc_end]
    lines = doc.splitlines(keepends=True)
    table = expected_table(lines)
    if table is None:  # before the run: a bespoke table is not worth minutes of training
        raise SystemExit(f"{path.name}: its header has no 'representation  EVALUATOR/METRIC ...' "
                         f"table with a number per metric in each row")
    at, metrics = table
    with tempfile.TemporaryDirectory() as tmp:
        got = run(["train", "--config", name], Path(tmp) / name)
    diffs = []
    for i in range(at + 1, len(lines)):
        m = _row(lines[i], len(metrics))
        if not m:
            break
        rep, old = m[2], re.findall(CELL, m[3])
        new = [f"{got['values'].get((rep, k), float('nan')):.4f}" for k in metrics]
        if old != new:
            diffs.append(f"{name}: {rep}: header {' '.join(old)}, fresh run {' '.join(new)}")
            fresh = iter(new)
            cells = re.sub(CELL, lambda c: c[0].replace(c[1], next(fresh), 1), m[3])
            lines[i] = f"{m[1]}{m[2]}{cells}\n"
    doc = "".join(lines)
    loss = final_loss(got["stdout"])
    old_loss = re.search(rf"final train loss ({NUMBER})", doc)
    if old_loss and loss and old_loss[1] != loss:
        diffs.append(f"{name}: final train loss: header {old_loss[1]}, fresh run {loss}")
        doc = doc.replace(old_loss[0], f"final train loss {loss}")
    today = datetime.date.today().isoformat()
    stamp = (f"Runtime:   {round(got['seconds'])} s for the whole command (training and "
             f"evaluation), measured {today}\n           on a {machine()} with "
             f"{busy_text(got['load'])}.\n")
    old_time = re.search(r"Runtime:\s+(.*?)(?:, measured|\(|$)", doc, re.M)
    print(f"{name}: {duration(got['seconds'])} (header: {old_time[1] if old_time else '?'}), "
          f"{busy_text(got['load'])}")
    if write and RUNTIME.search(doc):
        doc = RUNTIME.sub(stamp, doc, count=1)
    if write:
        files.write_text(path, doc + text[doc_end:])
    return diffs


def check_readme(write: bool) -> list[str]:
    """Reruns ``repr-jax train`` (the default experiment) and compares the README's table, the
    final train loss and the time it quotes."""
    text = README.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        got = run(["train"], Path(tmp) / "default")
    block = re.search(r"```\n(mnist1d: evaluation at step \d+ .*?)```", text, re.S)
    if block is None:
        raise SystemExit("README.md: no 'mnist1d: evaluation at step N' block")
    printed = {line.split()[0]: line for line in got["stdout"].splitlines() if line.strip()}
    new, diffs = [], []
    for line in block[1].splitlines():
        key = line.split()[0] if line.strip() else ""
        head = key == "mnist1d:" and "mnist1d:" in printed
        fresh = printed.get(key) if key in printed and ("/" in key or head or key == "metric") \
            else None
        if fresh is not None and fresh != line:
            diffs.append(f"README: {key}: printed {line.split()[1:]!s}, fresh run "
                         f"{fresh.split()[1:]!s}")
        new.append(fresh if fresh is not None else line)
    took = re.search(r"^`repr-jax train` took (.+?) for the whole command .*$", text, re.M)
    if took is None:
        raise SystemExit("README.md: no line '`repr-jax train` took ... for the whole command'")
    busy = busy_text(got["load"])
    line = (f"`repr-jax train` took {duration(got['seconds'])} for the whole command (training, "
            f"the full evaluation battery, plots; peak memory {got['peak_gb']:.1f} GB), measured "
            f"{datetime.date.today().isoformat()} on a {machine()} with {busy}.")
    print(f"README default run: {duration(got['seconds'])} (README: {took[1]}), {busy}, "
          f"peak memory {got['peak_gb']:.1f} GB")
    if write:
        text = text.replace(block[1], "\n".join(new) + "\n").replace(took[0], line)
        files.write_text(README, text)
    return diffs


def headers_with_tables() -> list[str]:
    """The experiments run by ``repr-jax train`` whose header has an Expected table of
    :func:`expected_table`'s shape (``simclr_shapes``' bespoke table is not)."""
    names = []
    for p in sorted(EXPERIMENTS.glob("[!_]*.py")):
        doc = p.read_text().split('"""', 2)[1]
        if re.search(r"^Command:\s+repr-jax train\b", doc, re.M) and expected_table(
                doc.splitlines()):
            names.append(p.stem)
    return names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="experiments whose headers to check")
    p.add_argument("--headers", action="store_true", help="every header with an Expected table")
    p.add_argument("--readme", action="store_true", help="the README's default run (the default "
                                                        "when no experiment is named)")
    p.add_argument("--write", action="store_true", help="rewrite the numbers that differ, and "
                                                       "the runtimes")
    args = p.parse_args()
    names = headers_with_tables() if args.headers else args.names
    unknown = sorted(set(names) - set(headers_with_tables()))
    if unknown:
        p.error(f"no Expected table this script reads (a row per representation, a number per "
                f"evaluator/metric) in the header of: {', '.join(unknown)}; those that have one: "
                f"{', '.join(headers_with_tables())}")
    print(f"on a {machine()}: the trained rows depend on the CPU (XLA's kernels sum in its order); "
          f"the raw-input and random-init rows do not", flush=True)
    diffs = check_readme(args.write) if args.readme or not names else []
    for name in names:
        diffs += check_header(name, args.write)
    print("\n".join(diffs) if diffs else "every number checked equals the fresh run's")
    if diffs and args.write:
        print("rewritten: review with git diff")
    return 1 if diffs and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
