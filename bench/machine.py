"""The machine a bench runs on, and whether its cores were idle enough for a ratio to count.

Peers on threaded BLAS lose more to other work on the cores than XLA does (issue 42: 3.3x busy vs
0.7x idle for the same search), so a ratio is a measurement only when the cores were idle when it
started: the 1-minute load average and the cores other work kept busy in the 3 s before (from
``/proc/stat``; the load average lags by minutes) both at most ``BUSY_PER_CORE`` a core.

    from machine import Machine
    m = Machine.now()          # before the bench's own work
    print(m.line())            # CPU model, cores, load
    print(m.ratio("repr_jax / faiss time", 0.71))   # "busy" instead of a number when not idle
    best = take_turns({"ours": ours, "theirs": theirs}, repeats=3)   # best times, alternating
    run = timed_steps(step_fn, state, hp, stream, mesh)   # run(n): n train steps' times
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import time
from pathlib import Path

BUSY_PER_CORE = 0.5


def autocast(dtype: str):
    """A peer's side at ``dtype``: torch's bfloat16 autocast on the CPU for
    ``dtype="bfloat16"``, else nothing."""
    import contextlib

    import torch
    if dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def describe() -> str:
    """``2-core Intel Xeon ... (AVX-512)``, from /proc/cpuinfo where there is one."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{os.cpu_count()}-core {platform.processor() or 'CPU'}"
    model = re.search(r"model name\s*:\s*(.+)", info)
    avx = " (AVX-512)" if re.search(r"\bavx512f\b", info) else ""
    return f"{os.cpu_count()}-core {model[1].strip() if model else 'CPU'}{avx}"


def busy_cores(seconds: float = 3.0) -> float:
    """How many cores other work kept busy over the last ``seconds`` (from /proc/stat; the load
    average lags by minutes). NaN where there is no /proc/stat."""
    def sample():
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return float("nan")
    return os.cpu_count() * (1 - (idle1 - idle0) / max(total1 - total0, 1))


def busy_text(cores: float) -> str:
    return ("no other work on the cores" if cores < 0.1 else
            f"{cores:.1f} cores busy with other work at the start")


@dataclasses.dataclass(frozen=True)
class Machine:
    """The CPU (:func:`describe`), its core count, and the load when a bench started."""
    cpu: str
    cores: int
    load: float  # 1-minute load average
    busy: float  # cores busy with other work in the 3 s before

    @classmethod
    def now(cls, seconds: float = 3.0) -> "Machine":
        busy = busy_cores(seconds)
        return cls(describe(), os.cpu_count() or 1, os.getloadavg()[0], busy)

    @property
    def idle(self) -> bool:
        """Whether a ratio measured now counts (load and busy cores at most 0.5 a core)."""
        worst = max(self.load, self.busy if self.busy == self.busy else 0.0)
        return worst <= BUSY_PER_CORE * self.cores

    def line(self) -> str:
        state = "idle" if self.idle else "BUSY"
        return (f"{self.cpu}; load average {self.load:.2f}, {self.busy:.2f} cores busy before "
                f"the run: {state}")

    def ratio(self, label: str, value: float, unit: str = "x") -> str:
        """``label: value`` when the cores were idle, else the value marked busy (not a
        measurement)."""
        if self.idle:
            return f"{label}: {value:.2f}{unit} ({self.cpu}, idle)"
        return (f"{label}: busy ({value:.2f}{unit} with load {self.load:.2f} on {self.cores} "
                f"cores; not a measurement: rerun on idle cores)")


def take_turns(fns: dict, repeats: int) -> dict:
    """Each function's best wall time over ``repeats`` rounds, the functions taking turns within a
    round: the drift of a shared host (faiss alone ranged 1.55-2.5 s over minutes) falls on all of
    them alike, where timing one side after the other would hand it to one."""
    times = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name] = min(times[name], time.perf_counter() - t)
    return times


def timed_steps(fn, state, hp, stream, mesh):
    """``run(n)``: the times (seconds) of the next ``n`` calls ``state, metrics = fn(state,
    batch, hp)`` on ``stream``'s batches, after two (the first compiles, the second settles)."""
    import jax
    import numpy as np

    from repr_jax.train import sharding
    step = 0

    def run(n: int) -> list[float]:
        nonlocal state, step
        times = []
        for _ in range(n):
            batch = sharding.global_batch(stream.batch(step), mesh)
            t = time.perf_counter()
            state, metrics = fn(state, batch, hp)
            jax.block_until_ready(metrics)
            times.append(time.perf_counter() - t)
            step += 1
        assert np.isfinite(np.asarray(metrics["loss"])).all()
        return times

    run(2)
    return run

