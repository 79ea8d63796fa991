"""The one switch for CPU-specific speed tricks: ``cpu_tuned()``.

On XLA's CPU backend repr_jax works around two of its slow paths, which change speed, never
values: the CNN's convolutions write their gradient as channels-last convolutions
(``encoders.layers.conv``), and a population of CNN members is trained member after member inside
its one compiled step (``train.population.members_per_chunk``). Elsewhere, or with
``REPR_JAX_CPU_TUNING=0``, the plain XLA paths run. (Keeping freed host memory,
``repr_jax.host_memory``, has its own switch: it must act before the backend starts.)
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import jax


def cpu_tuned() -> bool:
    """Whether the CPU-specific paths are on: the default backend is XLA's CPU backend and
    ``REPR_JAX_CPU_TUNING`` is not ``0``."""
    return os.environ.get("REPR_JAX_CPU_TUNING", "1") != "0" and jax.default_backend() == "cpu"


@functools.cache
def cpu_has_bf16_dots() -> bool:
    """Whether the default backend is a CPU with bfloat16 dot-product instructions (AVX512-BF16 or
    AMX, read from ``/proc/cpuinfo``): where XLA's bfloat16-input, float32-result products beat
    float32 ones (the search's ``scan_dtype="auto"``, the mixed-precision policy's ``"auto"``)."""
    if jax.default_backend() != "cpu":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))
