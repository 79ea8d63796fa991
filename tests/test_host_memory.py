"""repr_jax.host_memory: a step's temporaries stay in the process instead of being faulted back in.

Each case runs in a fresh process (the settings must precede JAX's backend) and counts minor page
faults per call of a program whose temporaries (one 128 MiB matrix) are larger than a glibc
thread arena can hold: the case that top pad alone did not fix (a ViT step's 1.1 GB)."""

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")]

PROBE = """
import resource
from repr_jax.host_memory import keep_host_memory
kept = keep_host_memory()
import jax, jax.numpy as jnp
def two_uses(y):  # y [8192, 4096] float32 (128 MiB) feeds a dot and a reduction: a temporary
    return (y @ c).sum() + y.max(axis=0).sum()
f = jax.jit(lambda a, b: two_uses(jnp.tanh(a @ b)))
a, b, c = (jnp.ones(s) for s in ((8192, 64), (64, 4096), (4096, 8)))
temp = f.lower(a, b).compile().memory_analysis().temp_size_in_bytes
for _ in range(3):
    jax.block_until_ready(f(a, b))
faults = []
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    jax.block_until_ready(f(a, b))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, jax.config.read("jax_cpu_enable_async_dispatch"), min(faults), temp // 4096)
"""


def _probe(keep: str) -> tuple[bool, bool, int, int]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one device, as a user's run
    out = subprocess.run([sys.executable, "-c", PROBE], env=dict(env, REPR_JAX_KEEP_HOST_MEMORY=keep),
                         capture_output=True, text=True, check=True).stdout.split()
    return out[-4] == "True", out[-3] == "True", int(out[-2]), int(out[-1])


def test_kept_memory_serves_large_temporaries_without_page_faults():
    kept, async_dispatch, faults, temp_pages = _probe("1")
    assert kept and not async_dispatch
    assert temp_pages >= (128 << 20) // 4096
    assert faults < temp_pages // 20, (faults, temp_pages)


def test_without_it_the_temporaries_are_faulted_in_every_call():
    """The control: glibc's defaults map and unmap the 128 MiB buffer on every call."""
    kept, async_dispatch, faults, temp_pages = _probe("0")
    assert not kept and async_dispatch
    assert faults > temp_pages // 2, (faults, temp_pages)


RELEASE = """
import numpy as np
from repr_jax.host_memory import keep_host_memory, release_host_memory, resident_bytes
def rss():
    return resident_bytes() >> 20
kept = keep_host_memory()
block = np.ones(256 << 18, np.float32)  # 256 MiB, touched
del block
freed = rss()
released = release_host_memory()
print(kept, released, freed - rss())
"""


@pytest.mark.parametrize("keep", ["1", "0"])
def test_release_hands_the_kept_memory_back(keep):
    """Kept, 256 MiB freed stays resident until released (about all of it goes back); not
    kept, glibc unmapped it already and there is nothing to release."""
    out = subprocess.run([sys.executable, "-c", RELEASE],
                         env=dict(os.environ, REPR_JAX_KEEP_HOST_MEMORY=keep),
                         capture_output=True, text=True, check=True).stdout.split()
    kept, released, dropped_mib = out[-3] == "True", out[-2] == "True", int(out[-1])
    assert kept == released == (keep == "1")
    assert dropped_mib > 200 if keep == "1" else dropped_mib < 50, dropped_mib
