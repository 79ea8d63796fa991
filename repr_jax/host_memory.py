"""Host memory for XLA's CPU backend: keep freed memory in the process rather than fault it back.

XLA's CPU runtime allocates a step's temporary buffers afresh on every call. With glibc's default
malloc settings that memory goes back to the operating system between calls and comes back as
fresh pages, a large share of a CPU step. :func:`keep_host_memory` makes glibc keep it:

- the top pad and trim threshold keep up to ~2 GiB of freed memory on the heap; no ``mmap`` for
  large blocks, which glibc would unmap on free (every block over 32 MiB is one otherwise);
- single-device programs run on the calling thread (JAX's ``jax_cpu_enable_async_dispatch``
  off), whose heap is the main one: a worker thread's malloc arena cannot hold a block over
  64 MiB and maps it afresh on every call whatever the settings (a ViT step's 1.1 GB of
  temporaries: 300,000 page faults a step). JAX releases the GIL while the program runs, so
  input threads go on; multi-device programs stay asynchronous.

``bench/host_memory_faults.py`` measures the faults per step of both kinds; ``bench/README.md``
has the numbers. It must run before JAX's CPU backend starts. It changes the whole process, so
``import repr_jax`` does not call it: the ``repr-jax`` command and the training entry points opt
in. Opt out with ``REPR_JAX_KEEP_HOST_MEMORY=0``.

What is kept is resident: memory freed by a compilation, by a step of another shape or by training
before evaluation stays in the process. :func:`release_host_memory` hands the free pages back
(glibc's ``malloc_trim``); the training loop calls it where the working set changes (after each
compilation, before an evaluation) and when what is kept outgrows what one step needs
(:func:`resident_bytes` past its mark: steps of several shapes leave their temporaries in
different places), never between steps that reuse what is kept.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4  # glibc's mallopt parameters (malloc.h)
TOP_PAD = 256 << 20  # bytes of freed memory the heap keeps after it trims
TRIM_THRESHOLD = (1 << 31) - 1  # free bytes at the heap's top before it trims (mallopt takes an int)
kept = False  # whether keep_host_memory() took effect in this process


def keep_host_memory() -> bool:
    """Keeps freed host memory in the process for XLA's next step; returns whether it is in effect.

    Sets glibc's malloc top pad (``TOP_PAD``), trim threshold (``TRIM_THRESHOLD``) and no
    ``mmap`` blocks, and turns JAX's asynchronous CPU dispatch off (the module docstring says
    why). Resident memory stays near the peak a step needed anyway. Does nothing off Linux/glibc
    or with ``REPR_JAX_KEEP_HOST_MEMORY=0``. Idempotent. ``M_MMAP_THRESHOLD`` is left alone:
    fixing it freezes glibc's dynamic thresholds."""
    global kept
    if kept or os.environ.get("REPR_JAX_KEEP_HOST_MEMORY", "1") == "0" or sys.platform != "linux":
        return kept
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl or another libc: no mallopt
        return False
    kept = all(mallopt(k, v) for k, v in ((_M_TOP_PAD, TOP_PAD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                                          (_M_MMAP_MAX, 0)))
    if kept:
        import jax
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    return kept


def release_host_memory() -> bool:
    """Returns the heap's free pages to the operating system (glibc's ``malloc_trim(0)``: free
    chunks anywhere in the heap, not only at its top), where :func:`keep_host_memory` took effect;
    the next step faults back only the pages it uses. Returns whether it released any. Time
    ``O(heap)``; call it where the working set changes, not every step."""
    if not kept:
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def resident_bytes() -> int:
    """This process's resident memory in bytes (Linux's ``/proc/self/statm``); 0 where unknown.
    Time: one small read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
