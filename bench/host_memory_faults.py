"""Page faults and time per call of a model's forward+backward, with and without keeping freed
host memory (``repr_jax.host_memory.keep_host_memory``), each in a fresh process.

    python bench/host_memory_faults.py            # --model cnn|vit|both

cnn: the default experiment's CNN on its 512 views (temporaries of tens of MiB); vit: the ViT-Ti
encoder of ``train_vs_pytorch.py`` on 256 views (1.1 GB of temporaries: more than a glibc thread
arena holds). Prints the fewest minor page faults and the best time of the timed calls for both
settings. One CPU device, as a user's process.
"""

import argparse
import os
import subprocess
import sys

MODELS = {  # (model and input, timed calls)
    "cnn": ("from repr_jax.encoders.cnn import CNN\n"
            "model, x = CNN(), jax.random.normal(jax.random.PRNGKey(0), (512, 40))", 8),
    "vit": ("from repr_jax.encoders.vit import ViT\n"
            "model = ViT(width=192, depth=12, num_heads=3, mlp_dim=768, patch_size=2)\n"
            "x = jax.random.normal(jax.random.PRNGKey(0), (256, 8, 8, 1))", 4),
}

PROBE = """
import resource, sys, time
from repr_jax.host_memory import keep_host_memory
kept = keep_host_memory() if sys.argv[1] == "keep" else False
import jax, jax.numpy as jnp
{model}
variables = model.init(jax.random.PRNGKey(1), x)
def loss(v):
    train = dict(mutable=["batch_stats"]) if "batch_stats" in v else {{}}
    out = model.apply(v, x, train=True, **train)
    return ((out[0] if train else out)[0] ** 2).mean()
f = jax.jit(jax.grad(loss))
for _ in range(3):
    jax.block_until_ready(f(variables))
faults, times = [], []
for _ in range({calls}):
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    jax.block_until_ready(f(variables))
    times.append(time.perf_counter() - start)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, min(faults), min(times))
"""


def faults_per_call(model: str, mode: str) -> tuple[str, float, float]:
    """(whether memory is kept, the fewest page faults of a call, the best seconds of a call)
    in a fresh process."""
    env = dict(os.environ, XLA_FLAGS=" ".join(
        f for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")))
    if not env["XLA_FLAGS"]:
        del env["XLA_FLAGS"]  # a lone " " would be read as a flags file name
    source, calls = MODELS[model]
    out = subprocess.run([sys.executable, "-c", PROBE.format(model=source, calls=calls), mode],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    return out[-3], float(out[-2]), float(out[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("cnn", "vit", "both"), default="both")
    args = p.parse_args(argv)
    if not sys.platform.startswith("linux"):
        sys.exit("glibc's mallopt: Linux only")
    for model in ("cnn", "vit") if args.model == "both" else (args.model,):
        kept, faults, seconds = faults_per_call(model, "keep")
        default_kept, default_faults, default_seconds = faults_per_call(model, "default")
        print(f"{model}: kept memory ({kept}): {faults:,.0f} faults, {seconds * 1e3:,.1f} ms per "
              f"call; glibc defaults ({default_kept}): {default_faults:,.0f} faults, "
              f"{default_seconds * 1e3:,.1f} ms")


if __name__ == "__main__":
    main()
