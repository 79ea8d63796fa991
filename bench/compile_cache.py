"""Compile once per machine (issue 53): time to a run's first logged step, and the logistic probe's
first call, with JAX's persistent compilation cache off, cold (the first run, which writes it) and
warm (the second identical run, which reads it).

    python bench/compile_cache.py                    # README's `repr-jax train`, 2 rounds
    python bench/compile_cache.py --rounds 3 --probe-train 20000

Each run is a fresh process (``python -m repr_jax.cli train --workdir <fresh> --no-progress``, the
README's default experiment) timed from its start to the first row of its ``metrics.jsonl`` (step
25, ``train.log_every``), then killed; every round uses a fresh cache folder
(``REPR_JAX_COMPILE_CACHE=<folder>``; ``0`` for off). The probe process times
``linear_probe(kind="logistic", l2=1e-4)`` on ``probe_vs_sklearn.py``'s features (20,000 x 256,
10 classes): its first call (compiling, or reading the cache) and its second. Compilation is
CPU-bound, so on shared cores these times move by a second or more: the load is printed with them.

Measured 2026-12-06 11:14-11:16 (``--rounds 3``) on 2 shared cores, not idle (2-core Intel Xeon,
AVX-512; ``uptime`` load 8.2 before the run and 10.7 after: other jobs shared the cores, so every
time here is inflated and approximate), jax 0.10.2 on CPU; best of 3 rounds, seconds:

    best of 3 (s)            | cache off | cold (1st run) | warm (2nd run)
    repr-jax train, 1st step |     10.93 |          11.93 |           5.34
    logistic probe, 1st call |      2.89 |           3.03 |           0.95
    logistic probe, 2nd call |      0.30 |           0.32 |           0.33

The train cache held 4 entries (0.4 MiB: ``train_step``, ``init_fn`` and two small ones; logged with
``JAX_LOG_COMPILES=1`` at 11:06, load 6, a warm run read ``train_step`` back in 0.20 s where the
cold one compiled it in 3.1 s), the probe's 20
(0.1 MiB). Of the warm run's 5.3 s, importing ``repr_jax`` takes 2.4 s on these cores; the rest is
the data, the 25 steps and the programs' tracing, which the cache does not skip. The cold run
pays the writes (the rounds: +1.0, -0.2, +0.4 s against off).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine  # noqa: E402

_PROBE = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {bench!r})
from repr_jax import compile_cache
compile_cache.enable()
from probe_vs_sklearn import features
from repr_jax.eval import linear_probe
(x, y), (tx, ty) = features({n}, 5000, 256, 10)
times = []
for _ in range(2):
    t = time.perf_counter()
    linear_probe(x, y, tx, ty, kind="logistic", l2=1e-4)
    times.append(time.perf_counter() - t)
print(times[0], times[1], time.perf_counter() - t0)
"""


def _env(cache: str) -> dict:
    return dict(os.environ, REPR_JAX_COMPILE_CACHE=cache, TQDM_DISABLE="1")


def first_logged_step(cache: str, scratch: Path, timeout: float = 600.0) -> tuple[float, int]:
    """Seconds from the start of ``repr-jax train`` to its first logged step, and that step."""
    workdir = Path(tempfile.mkdtemp(dir=scratch, prefix="run_"))
    metrics = workdir / "metrics.jsonl"
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "repr_jax.cli", "train", "--workdir",
                             str(workdir), "--no-progress"], env=_env(cache),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while time.perf_counter() - start < timeout:
            if metrics.exists() and metrics.read_text().endswith("\n"):
                elapsed = time.perf_counter() - start
                return elapsed, json.loads(metrics.read_text().splitlines()[0])["step"]
            if proc.poll() is not None:
                raise RuntimeError(f"repr-jax train ended ({proc.returncode}) before a logged "
                                   f"step: {proc.stderr.read()[-2000:]}")
            time.sleep(0.02)
        raise RuntimeError(f"no logged step in {timeout:.0f} s")
    finally:
        proc.kill()
        proc.wait()


def probe(cache: str, n: int) -> tuple[float, float]:
    """The logistic probe's first and second call, in seconds, in a fresh process."""
    code = _PROBE.format(bench=str(Path(__file__).resolve().parent), n=n)
    out = subprocess.run([sys.executable, "-c", code], env=_env(cache), capture_output=True,
                         text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def _size(folder: Path) -> str:
    files = [p for p in folder.glob("*.xla")]
    return f"{len(files)} entries, {sum(p.stat().st_size for p in files) / 2**20:.1f} MiB"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--probe-train", type=int, default=20000)
    args = p.parse_args(argv)
    print(Machine.now().line())
    print(f"uptime: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    train = {"off": [], "cold": [], "warm": []}
    first = {"off": [], "cold": [], "warm": []}
    second = {"off": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="compile_cache_bench_") as scratch:
        scratch = Path(scratch)
        for r in range(args.rounds):
            folder = scratch / f"xla_train_{r}"
            for label, cache in (("off", "0"), ("cold", str(folder)), ("warm", str(folder))):
                seconds, step = first_logged_step(cache, scratch)
                train[label].append(seconds)
                print(f"round {r + 1} train {label:4}: first logged step (step {step}) after "
                      f"{seconds:.2f} s", flush=True)
            print(f"  train cache: {_size(folder)}")
            folder = scratch / f"xla_probe_{r}"
            for label, cache in (("off", "0"), ("cold", str(folder)), ("warm", str(folder))):
                a, b = probe(cache, args.probe_train)
                first[label].append(a)
                second[label].append(b)
                print(f"round {r + 1} probe {label:4}: first call {a:.2f} s, second {b:.2f} s",
                      flush=True)
            print(f"  probe cache: {_size(folder)}")
    print(f"uptime after: {os.getloadavg()[0]:.2f}")
    print(f"\nbest of {args.rounds} (s)     | cache off | cold (1st run) | warm (2nd run)")
    print("-" * 64)
    print(f"repr-jax train, 1st step | {min(train['off']):9.2f} | {min(train['cold']):14.2f} "
          f"| {min(train['warm']):14.2f}")
    print(f"logistic probe, 1st call | {min(first['off']):9.2f} | {min(first['cold']):14.2f} "
          f"| {min(first['warm']):14.2f}")
    print(f"logistic probe, 2nd call | {min(second['off']):9.2f} | {min(second['cold']):14.2f} "
          f"| {min(second['warm']):14.2f}")


if __name__ == "__main__":
    main()
