"""Page faults per call of the default CNN's forward+backward, with and without keeping freed host
memory (``repr_jax.host_memory.keep_host_memory``: glibc's malloc top pad), each in a fresh process.

    python bench/host_memory_faults.py

Prints the fewest minor page faults of 8 calls for both settings and their ratio. One CPU device,
as a user's process.
"""

import os
import subprocess
import sys

# The default experiment's encoder, forward and backward on its 512 views.
PROBE = """
import resource, sys
from repr_jax.host_memory import keep_host_memory
kept = keep_host_memory() if sys.argv[1] == "keep" else False
import jax, jax.numpy as jnp
from repr_jax.encoders.cnn import CNN
model, x = CNN(), jax.random.normal(jax.random.PRNGKey(0), (512, 40))
variables = model.init(jax.random.PRNGKey(1), x)
loss = lambda v: (model.apply(v, x, train=True, mutable=["batch_stats"])[0][0] ** 2).mean()
f = jax.jit(jax.grad(loss))
for _ in range(3):
    jax.block_until_ready(f(variables))
faults = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    jax.block_until_ready(f(variables))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, min(faults))
"""


def faults_per_call(mode: str) -> tuple[str, float]:
    """(whether memory is kept, the fewest page faults of a call) in a fresh process."""
    env = dict(os.environ, XLA_FLAGS=" ".join(
        f for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")))
    if not env["XLA_FLAGS"]:
        del env["XLA_FLAGS"]  # a lone " " would be read as a flags file name
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return out[-2], float(out[-1])


def main() -> None:
    if not sys.platform.startswith("linux"):
        sys.exit("glibc's mallopt: Linux only")
    kept, faults = faults_per_call("keep")
    default_kept, default_faults = faults_per_call("default")
    print(f"kept memory ({kept}): {faults:,.0f} faults per call; glibc defaults "
          f"({default_kept}): {default_faults:,.0f}; ratio {default_faults / max(faults, 1):,.1f}x")


if __name__ == "__main__":
    main()
