"""Host memory for XLA's CPU backend: keep freed memory in the process rather than fault it back.

XLA's CPU runtime allocates a step's temporary buffers afresh on every call (tens of MB for the
default experiment's CNN step). With glibc's default malloc settings that memory went back to the
operating system between calls and came back as fresh pages, so each step paid ~10,000 minor page
faults — measured on the default experiment's step (2 cores, ``python bench/train_vs_pytorch.py
--model cnn`` with and without ``--default-malloc``): 23–26 ms per step, most of it system time,
vs 12–14 ms with the memory kept. Raising glibc's top pad (``mallopt(M_TOP_PAD)``) keeps up to that
much freed memory in each malloc heap for the next step.

It has to happen before JAX's CPU backend starts (set afterwards, the faults stayed: measured), so
``import repr_jax`` does it. Opt out with ``REPR_JAX_KEEP_HOST_MEMORY=0``.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TOP_PAD = -2  # glibc's mallopt parameter (malloc.h)
TOP_PAD = 256 << 20  # bytes of freed memory a heap keeps (64 MiB sufficed here, 16 did not)
kept = False  # whether keep_host_memory() took effect in this process


def keep_host_memory() -> bool:
    """Sets glibc's malloc top pad to ``TOP_PAD``; returns whether it is in effect.

    The process then keeps up to ``TOP_PAD`` of freed memory per malloc heap (resident memory it
    held at its peak anyway). Does nothing off Linux/glibc or with ``REPR_JAX_KEEP_HOST_MEMORY=0``.
    Idempotent. Only also fixing ``M_MMAP_THRESHOLD`` (which freezes glibc's dynamic thresholds)
    brought the page faults back, so it is left alone."""
    global kept
    if kept or os.environ.get("REPR_JAX_KEEP_HOST_MEMORY", "1") == "0" or sys.platform != "linux":
        return kept
    try:
        kept = bool(ctypes.CDLL("libc.so.6").mallopt(_M_TOP_PAD, TOP_PAD))
    except (OSError, AttributeError):  # musl or another libc: no mallopt
        kept = False
    return kept
