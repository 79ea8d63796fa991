"""Host memory for XLA's CPU backend: keep freed memory in the process rather than fault it back.

XLA's CPU runtime allocates a step's temporary buffers afresh on every call. With glibc's default
malloc settings that memory goes back to the operating system between calls and comes back as
fresh pages, a large share of a small CPU step. :func:`keep_host_memory` raises glibc's top pad so
each malloc heap keeps freed memory for the next step (``bench/host_memory_faults.py`` measures it;
``bench/README.md`` has the numbers).

It must run before JAX's CPU backend starts. It changes the whole process, so ``import repr_jax``
does not call it: the ``repr-jax`` command and the training entry points opt in. Opt out with
``REPR_JAX_KEEP_HOST_MEMORY=0``.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TOP_PAD = -2  # glibc's mallopt parameter (malloc.h)
TOP_PAD = 256 << 20  # bytes of freed memory a heap keeps
kept = False  # whether keep_host_memory() took effect in this process


def keep_host_memory() -> bool:
    """Sets glibc's malloc top pad to ``TOP_PAD``; returns whether it is in effect.

    The process then keeps up to ``TOP_PAD`` of freed memory per malloc heap (resident memory it
    held at its peak anyway). Does nothing off Linux/glibc or with ``REPR_JAX_KEEP_HOST_MEMORY=0``.
    Idempotent. ``M_MMAP_THRESHOLD`` is left alone: fixing it freezes glibc's dynamic thresholds."""
    global kept
    if kept or os.environ.get("REPR_JAX_KEEP_HOST_MEMORY", "1") == "0" or sys.platform != "linux":
        return kept
    try:
        kept = bool(ctypes.CDLL("libc.so.6").mallopt(_M_TOP_PAD, TOP_PAD))
    except (OSError, AttributeError):  # musl or another libc: no mallopt
        kept = False
    return kept
