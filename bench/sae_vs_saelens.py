"""SAE training throughput: repr_jax's TopK SAE step vs. sae-lens 6.54.12's, on the same activations
and machine; a population of K dictionaries vs. K sequential runs; memory against N (issue 50,
"Speed and memory").

    python bench/sae_vs_saelens.py                  # 262,144 synthetic vectors, D 384, L 4,096
    python bench/sae_vs_saelens.py --store DIR      # a `repr-jax activations` store's vectors
    python bench/sae_vs_saelens.py --vectors 16384 --dim 64 --latents 256 --k 8 --batch 512 \\
        --steps 5 --rounds 2 --population-steps 3 --memory-steps 5   # a check in ~2 minutes

sae-lens runs in a torch venv (``--torch-python``, default ``/tmp/saevenv/bin/python``); to make
it (torch==2.13.0 exactly: a local wheel; another version downloads GBs)::

    python3 -m venv /tmp/saevenv && /tmp/saevenv/bin/pip install torch==2.13.0 sae-lens==6.54.12

What it does and prints (markdown tables; every ratio through ``bench/machine.py``, so one taken on
busy cores reads ``busy (...; not a measurement)``):

1. **Activations.** By default ``--vectors`` synthetic vectors of width ``--dim`` with known
   structure: each the sum of 16 atoms of a random unit dictionary of ``--latents`` atoms
   (exponential coefficients) plus Gaussian noise (0.01 a coordinate), seeded; written once as an
   activation store (``repr_jax.data.activations``' format: ``vectors.npy``, digests, ``meta.json``)
   under ``--out`` (reused when it is there) or a temporary folder. ``--store DIR`` trains on a real
   store instead. Both sides read the same float32 rows of the same ``vectors.npy`` (memory-mapped):
   the batches of repr_jax's ``BatchStream`` (seed 0) over the store's train split, whose row
   numbers are written to ``rows.npy`` for sae-lens's side (checked equal on the first batch).
2. **Throughput.** TopK SAE, ``--latents`` 4,096, ``--k`` 32, batch ``--batch`` 4,096, AuxK at
   1/32 (dead after ``--dead-window`` 1,000 forward passes: sae-lens's default), Adam lr 4e-4
   (beta 0.9, 0.999), constant LR, gradient norm clipped at 1.0 (sae-lens's trainer always clips),
   no input scaling, decoder rows at norm 0.1, activations rescaled by decoder norms (sae-lens's
   TopK defaults). Ours: the jitted step ``repr-jax train`` runs for ``method.name=sae`` on
   ``data.name=activations:DIR`` (``compile_step``; the store streamed, ``data.in_memory_mb=0``, as
   sae-lens's side reads it), in a fresh process with host memory kept as the CLI keeps it.
   sae-lens: ``SAETrainer.step`` in the venv (``bench/sae_vs_saelens_torch.py`` says what it
   includes), glibc's malloc as torch ships, ``torch.set_num_threads(cores)``; XLA uses every core.
   Both processes set up and take 3 warm-up steps, then ``--rounds`` rounds alternate them (the
   order flipping per round), ``--steps`` steps a side a round, each step's batch read then its
   step run to completion (no overlap on either side). Printed: read and step ms per step, tokens/s
   (batch x steps / (read + step) time, and step alone), median over rounds; each process's peak
   RSS, peak anonymous RSS and wall time (import, setup, compile, warm-up and all rounds); the
   ratio ours / sae-lens. (sae-lens's ``use_sparse_activations=True`` is not timed: with torch
   2.13.0 on CPU its backward fails, ``aten::view`` has no SparseCPU kernel.)
3. **Population.** ``--members`` K dictionaries (differing in seed and AuxK coefficient; with
   ``--population-k`` also in ``method.k``) trained in one compiled step (``repr-jax train
   --population``'s ``make_population_step``, members vmapped) vs. the K single runs' steps one
   after another; shared batches, step time only (batches read outside the timing, as
   ``bench/population_vs_sequential.py``), median of ``--rounds`` interleaved rounds of
   ``--population-steps``. Printed: member-tokens/s each way and the ratio.
4. **Memory vs. N.** Our side again in fresh processes on synthetic stores of ``--vectors`` and 4x
   that many vectors (streamed: ``data.in_memory_mb=0``), ``--memory-steps`` steps each: peak RSS
   and peak anonymous RSS beside the store's size. The anonymous peak should not grow with N
   beyond the split's row map and the epoch's permutation (O(N) integers: 16 bytes a vector, vs.
   4 D bytes of data); ``ru_maxrss`` also counts the store's pages the reads touched (page cache
   mapped in: at most steps x batch rows' pages, reclaimable).

Cost at the defaults: the stores (0.4 and 1.6 GB, in ``--out`` or a temporary folder) ~40 s of
numpy once; then every part is ``O(steps x batch x D x L)``: ``2 x (3 + rounds x steps)`` steps for
the throughput, ``(K + K) x (2 + rounds x population-steps)`` single-run steps' worth for the
population, ``2 x (3 + memory-steps)`` for the memory check, plus a compile per process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import Machine, timed_steps  # noqa: E402

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
TORCH_SCRIPT = HERE / "sae_vs_saelens_torch.py"
ATOMS_PER_VECTOR, NOISE = 16, 0.01
CHUNK = 8192  # rows generated at a time (the first N rows of a larger store are the smaller's)
WARMUP = 3


# --------------------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------------------

def synthetic_store(folder: Path, n: int, d: int, atoms: int, seed: int = 0) -> Path:
    """An activation store of ``n`` vectors ``[d]``: each the sum of ``ATOMS_PER_VECTOR`` atoms
    of a random unit dictionary ``[atoms, d]`` with exponential coefficients, plus Gaussian noise
    ``NOISE`` a coordinate. Written once (reused when ``meta.json`` records the same
    parameters); rows are generated ``CHUNK`` at a time (memory O(CHUNK d + atoms d))."""
    from repr_jax import __version__, files
    from repr_jax.data import activations as store_lib
    identity = f"synthetic n={n} d={d} atoms={atoms} k={ATOMS_PER_VECTOR} noise={NOISE} seed={seed}"
    if store_lib.is_store(folder) and store_lib.read_meta(folder).get("identity") == identity:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / store_lib.META).unlink(missing_ok=True)
    dictionary = np.random.default_rng([seed, 0]).normal(size=(atoms, d)).astype(np.float32)
    dictionary /= np.linalg.norm(dictionary, axis=1, keepdims=True)
    vectors = np.lib.format.open_memmap(folder / store_lib.VECTORS, mode="w+", dtype=np.float32,
                                        shape=(n, d))
    for c, start in enumerate(range(0, n, CHUNK)):
        rng = np.random.default_rng([seed, 1, c])
        m = min(CHUNK, n - start)
        idx = rng.integers(0, atoms, size=(m, ATOMS_PER_VECTOR))
        coef = rng.exponential(1.0, size=(m, ATOMS_PER_VECTOR)).astype(np.float32)
        x = NOISE * rng.standard_normal((m, d), dtype=np.float32)
        for j in range(ATOMS_PER_VECTOR):
            x += coef[:, j:j + 1] * dictionary[idx[:, j]]
        vectors[start:start + m] = x
    vectors.flush()
    del vectors
    index = np.stack([np.arange(n, dtype=np.int32), np.full(n, -1, np.int32)], axis=1)
    np.save(folder / store_lib.INDEX, index)
    for name in (store_lib.VECTORS, store_lib.INDEX):
        files.record_digest(folder / name)
    files.write_json(folder / store_lib.META, dict(
        format=store_lib.FORMAT_NAME, version=store_lib.VERSION,
        model="synthetic (bench/sae_vs_saelens.py)", step=None, encoder="synthetic",
        layer="embedding", width=d, dtype="float32", vectors=n, examples=n,
        data=f"synthetic:{identity}", split=None, max_len=0, tokenizer=None,
        kept="every vector (one per example)", test_rule=store_lib.TEST_RULE,
        created_by=f"bench/sae_vs_saelens.py (repr_jax {__version__})", identity=identity))
    return folder


def write_rows(folder: Path, out: Path, batch: int, steps: int, seed: int = 0) -> Path:
    """``out``: ``[steps, batch]`` int64, the store rows of repr_jax's training batches 0..steps-1
    (``BatchStream`` over the store's train split, ``seed``), for sae-lens's side."""
    from repr_jax.data import BatchStream
    from repr_jax.data import activations as store_lib
    train = store_lib.open_store(folder, verify=False).split_rows()["train"]
    stream = BatchStream({"label": np.zeros(len(train), np.int8)}, batch_size=batch, seed=seed)
    np.save(out, np.stack([train[stream.indices(i)] for i in range(steps)]))
    return out


# --------------------------------------------------------------------------------------------------
# Workers: a fresh process per side, answering bench/sae_vs_saelens_torch.py's line protocol
# --------------------------------------------------------------------------------------------------

class Worker:
    """A side in its own process: ``run(n)`` -> ``{"read", "step"}`` seconds; ``quit()`` -> its
    memory and wall time."""

    def __init__(self, name: str, argv: list[str], env: dict | None = None):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.ready = self._answer()["ready"]

    def _answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("@@ "):
                return json.loads(line[3:])
        raise RuntimeError(f"{self.name}: the worker exited (code {self.proc.wait()}) before "
                           f"answering; its error is above")

    def _ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def run(self, n: int) -> dict:
        return self._ask(f"run {n}")

    def quit(self) -> dict:
        answer = self._ask("quit")
        self.proc.wait()
        return answer

    def close(self) -> None:
        """Ends the process if it is still running (after an error elsewhere)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def sae_config(store: Path, args, *sets: str):
    """The TopK SAE run both sides train, as ``repr-jax train`` would configure it."""
    from repr_jax import config as C
    cfg = C.Config(seed=0, data=C.DataConfig(name=f"activations:{store}"),
                   method=C.MethodConfig(name="sae"),
                   train=C.TrainConfig(batch_size=args.batch, steps=10 ** 6, ckpt_every=0,
                                       num_devices=1),
                   eval=C.EvalConfig(evaluators=("sae",)))
    return C.override(cfg, [
        "data.in_memory_mb=0", "method.activation=topk", f"method.latents={args.latents}",
        f"method.k={args.k}", f"method.aux_k_coefficient={args.aux}",
        f"method.dead_feature_window={args.dead_window}", f"optim.lr={args.lr}",
        "optim.weight_decay=0.0", "optim.warmup_steps=0", "optim.min_lr_ratio=1.0",
        "optim.clip_norm=1.0", *sets])


def ours_worker(args) -> None:
    """Our side (``--worker``): the compiled step of ``repr-jax train`` on the store, served."""
    from repr_jax.host_memory import keep_host_memory
    keep_host_memory()  # as the CLI: before JAX starts
    import jax

    from repr_jax.data import BatchStream
    from repr_jax.data import activations as store_lib
    from repr_jax.train import build_method, load_dataset, sharding
    from repr_jax.train.run import compile_step, init_state, sample_batch
    from repr_jax.train.step import hyperparams
    from sae_vs_saelens_torch import serve

    cfg = sae_config(Path(args.worker_store), args)
    dataset = load_dataset(cfg)
    mesh = sharding.make_mesh(1)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, sample_batch(dataset), mesh)
    stream = BatchStream(dataset.splits["train"], batch_size=args.batch, seed=0)
    first = stream.batch(0)
    if args.worker_rows:  # the rows sae-lens reads are ours
        vectors = store_lib.open_store(args.worker_store, verify=False).vectors
        rows = np.load(args.worker_rows, mmap_mode="r")
        assert np.array_equal(first["x"], np.asarray(vectors[np.asarray(rows[0])], np.float32))
    step_fn, costs = compile_step(cfg, method, mesh, state, sharding.global_batch(first, mesh))
    hp, last = hyperparams(cfg), {}

    def step(batch) -> None:
        nonlocal state
        state, metrics = step_fn(state, sharding.global_batch(batch, mesh), hp)
        last["metrics"] = jax.block_until_ready(metrics)

    def info() -> dict:
        m = last["metrics"]
        return {"loss": float(m["loss"]), "l0": float(m["l0"]),
                "dead": round(float(m["dead_fraction"]) * args.latents),
                "flops": costs["flops_per_step"], "train_rows": len(dataset.splits["train"]["x"]),
                "versions": f"jax {jax.__version__}, XLA CPU, {os.cpu_count()} cores"}

    serve(stream.batch, step, warmup=WARMUP, info=info)


def ours(args, store: Path, rows: Path | None = None) -> Worker:
    argv = [sys.executable, __file__, "--worker", "--worker-store", str(store),
            *(["--worker-rows", str(rows)] if rows else []), *common_args(args)]
    return Worker("repr_jax", argv)


def theirs(args, store: Path, rows: Path) -> Worker:
    argv = [args.torch_python, str(TORCH_SCRIPT), "--vectors", str(store / "vectors.npy"),
            "--rows", str(rows), "--latents", str(args.latents), "--k", str(args.k),
            "--batch", str(args.batch), "--lr", str(args.lr), "--aux", str(args.aux),
            "--dead-window", str(args.dead_window), "--warmup", str(WARMUP),
            "--threads", str(os.cpu_count())]
    # glibc's malloc as torch ships it (our setting, kept in our process, slows it)
    return Worker("sae-lens", argv, env=dict(os.environ, REPR_JAX_KEEP_HOST_MEMORY="0"))


def common_args(args) -> list[str]:
    return ["--latents", str(args.latents), "--k", str(args.k), "--batch", str(args.batch),
            "--lr", str(args.lr), "--aux", str(args.aux), "--dead-window", str(args.dead_window)]


# --------------------------------------------------------------------------------------------------
# The three parts
# --------------------------------------------------------------------------------------------------

def throughput(args, machine: Machine, store: Path, rows: Path) -> None:
    sides = {"repr_jax": lambda: ours(args, store, rows),
             "sae-lens": lambda: theirs(args, store, rows)}
    workers = {}
    try:
        for name, start in sides.items():  # one at a time: setups and compiles do not overlap
            workers[name] = start()
        times = {name: [] for name in workers}
        for r in range(args.rounds):
            order = list(workers) if r % 2 == 0 else list(workers)[::-1]
            for name in order:
                times[name].append(workers[name].run(args.steps))
        done = {name: w.quit() for name, w in workers.items()}
    finally:
        for w in workers.values():
            w.close()
    b, s = args.batch, args.steps
    print(f"\n### Throughput: TopK SAE, D {args.dim_used}, L {args.latents}, k {args.k}, batch {b}"
          f" (median of {args.rounds} alternating rounds x {s} steps, after {WARMUP} warm-up "
          f"steps)\n")
    print("| side | read ms/step | step ms/step | tokens/s | tokens/s, step alone | peak RSS MiB | "
          "peak anon MiB | wall s | loss, L0, dead at the end |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    speed, alone = {}, {}
    for name in workers:
        read = statistics.median(t["read"] for t in times[name]) / s
        step = statistics.median(t["step"] for t in times[name]) / s
        speed[name] = statistics.median(b * s / (t["read"] + t["step"]) for t in times[name])
        alone[name] = statistics.median(b * s / t["step"] for t in times[name])
        d = done[name]
        print(f"| {name} ({d['versions']}) | {read * 1e3:.1f} | {step * 1e3:.1f} | "
              f"{speed[name]:,.0f} | {alone[name]:,.0f} | {d['peak_rss_mib']:,.0f} | "
              f"{d['peak_anon_mib']:,.0f} | {d['wall']:.1f} | {d['loss']:.4g}, {d['l0']:.1f}, "
              f"{d['dead']} |")
    peer = "sae-lens"
    flops = done["repr_jax"]["flops"]
    print(f"\nXLA counts {flops / 1e9:.2f} GFLOP per step: ours achieved "
          f"{flops * speed['repr_jax'] / b / 1e9:.1f} GFLOP/s (read + step), "
          f"{flops * alone['repr_jax'] / b / 1e9:.1f} GFLOP/s (step alone)")
    print(machine.ratio(f"repr_jax / {peer} tokens/s (read + step)",
                        speed["repr_jax"] / speed[peer]))
    print(machine.ratio(f"repr_jax / {peer} tokens/s (step alone)",
                        alone["repr_jax"] / alone[peer]))


def population(args, store: Path) -> None:
    """K members in one compiled step vs. the K single runs' steps, interleaved rounds."""
    from repr_jax.data import BatchStream
    from repr_jax.train import build_method, load_dataset, sharding
    from repr_jax.train.population import (_init_population, make_population_step,
                                           member_differences, members_per_chunk, stack)
    from repr_jax.train.run import init_state, make_step_fn, sample_batch
    from repr_jax.train.step import hyperparams
    k_of = args.population_k or [args.k] * args.members
    if len(k_of) != args.members:
        raise SystemExit(f"--population-k gives {len(k_of)} values for {args.members} members")
    configs = [sae_config(store, args, f"seed={i}", f"method.k={k_of[i]}",
                          f"method.aux_k_coefficient={args.aux * 2 ** i}",
                          f"train.population_chunk={args.population_chunk}")
               for i in range(args.members)]
    varying = member_differences(configs)
    dataset = load_dataset(configs[0])
    mesh = sharding.make_mesh(1)
    stream = BatchStream(dataset.splits["train"], batch_size=args.batch, seed=0)

    def stepper(fn, state, hp):
        return timed_steps(fn, state, hp, stream, mesh)

    singles = []
    for c in configs:
        method = build_method(c, dataset)
        state = init_state(c, method, sample_batch(dataset), mesh)
        singles.append(stepper(make_step_fn(c, method, mesh, state), state, hyperparams(c)))
    method, state = _init_population(configs, dataset, mesh)
    pop = stepper(make_population_step(configs[0], method, mesh, shared_batches=True), state,
                  stack([hyperparams(c) for c in configs]))
    ts, tp = [[] for _ in configs], []
    for _ in range(args.rounds):
        for i, run in enumerate(singles):
            ts[i] += run(args.population_steps)
        tp += pop(args.population_steps)
    one = [statistics.median(t) for t in ts]
    whole = statistics.median(tp)
    tokens = args.members * args.batch
    print(f"\n### Population: {args.members} TopK dictionaries (differing in "
          f"{', '.join(varying)}) in one compiled step vs. {args.members} sequential runs "
          f"(step time, median of {args.rounds} interleaved rounds x {args.population_steps})\n")
    print("| how | ms per step of all members | member-tokens/s |")
    print("| --- | ---: | ---: |")
    chunk = members_per_chunk(configs[0]) or args.members
    how = "vmapped" if chunk == args.members else f"{chunk} vmapped at a time, mapped"
    print(f"| population (one compiled step, {how}) | {whole * 1e3:.1f} | "
          f"{tokens / whole:,.0f} |")
    print(f"| sequential ({' + '.join(f'{t * 1e3:.1f}' for t in one)} ms) | {sum(one) * 1e3:.1f} "
          f"| {tokens / sum(one):,.0f} |")
    return sum(one) / whole


def memory(args, folder: Path) -> None:
    """Our side on N and 4N synthetic vectors, streamed: peak memory beside the store's size."""
    print(f"\n### Memory: our side, fresh processes, {WARMUP} warm-up + {args.memory_steps} steps "
          f"of batch {args.batch}, store streamed (data.in_memory_mb=0)\n")
    print("| vectors N | store MiB | peak RSS MiB | peak anon MiB | wall s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    anon = {}
    for n in (args.vectors, 4 * args.vectors):
        store = synthetic_store(folder / f"synthetic_{n}x{args.dim_used}", n, args.dim_used,
                                args.latents)
        w = ours(args, store)
        try:
            w.run(args.memory_steps)
            d = w.quit()
        finally:
            w.close()
        anon[n] = d["peak_anon_mib"]
        size = (store / "vectors.npy").stat().st_size / 2 ** 20
        print(f"| {n:,} | {size:,.0f} | {d['peak_rss_mib']:,.0f} | {d['peak_anon_mib']:,.0f} | "
              f"{d['wall']:.1f} |")
    n = args.vectors
    grew = anon[4 * n] - anon[n]
    print(f"\nAnonymous peak at 4N minus at N: {grew:+,.0f} MiB for {3 * n:,} more vectors "
          f"({3 * n * 4 * args.dim_used / 2 ** 20:,.0f} MiB more data; O(N) row maps: "
          f"{3 * n * 16 / 2 ** 20:,.1f} MiB)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", help="an activation store (repr-jax activations) to train on "
                                   "instead of synthetic vectors")
    p.add_argument("--out", help="where the synthetic stores and rows.npy go (kept and reused); "
                                 "default a temporary folder, removed")
    p.add_argument("--vectors", type=int, default=262144, help="synthetic vectors N")
    p.add_argument("--dim", type=int, default=384, help="synthetic width D")
    p.add_argument("--latents", type=int, default=4096)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--aux", type=float, default=1 / 32, help="AuxK coefficient")
    p.add_argument("--dead-window", type=int, default=1000,
                   help="forward passes without firing before a latent is dead (AuxK)")
    p.add_argument("--steps", type=int, default=10, help="steps a side a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--members", type=int, default=4, help="population size K")
    p.add_argument("--population-k", type=lambda s: [int(v) for v in s.split(",")], default=None,
                   help="the members' method.k, comma-separated (default: all --k)")
    p.add_argument("--population-steps", type=int, default=5)
    p.add_argument("--population-chunk", type=int, default=0,
                   help="train.population_chunk of the population (0: the auto choice)")
    p.add_argument("--memory-steps", type=int, default=10)
    p.add_argument("--only", default="throughput,population,memory",
                   help="comma-separated parts to run")
    p.add_argument("--torch-python", default="/tmp/saevenv/bin/python")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker-store", help=argparse.SUPPRESS)
    p.add_argument("--worker-rows", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return ours_worker(args)
    parts = set(args.only.split(","))
    if "throughput" in parts and not Path(args.torch_python).exists():
        raise SystemExit(f"{args.torch_python}: no such interpreter; make the venv: python3 -m "
                         f"venv /tmp/saevenv && /tmp/saevenv/bin/pip install torch==2.13.0 "
                         f"sae-lens==6.54.12")
    from repr_jax.host_memory import keep_host_memory
    kept = keep_host_memory()  # this process trains the population: as the CLI, before JAX

    machine = Machine.now()  # before this bench's own work loads the cores
    print(machine.line())
    temp = None if args.out else tempfile.TemporaryDirectory(prefix="sae_vs_saelens_")
    folder = Path(args.out or temp.name)
    try:
        if args.store:
            from repr_jax.data import activations as store_lib
            store = Path(args.store).resolve()
            args.dim_used = int(store_lib.read_meta(store)["width"])
        else:
            args.dim_used = args.dim
            t = time.perf_counter()
            store = synthetic_store(folder / f"synthetic_{args.vectors}x{args.dim}",
                                    args.vectors, args.dim, args.latents)
            print(f"activations: {store} ({time.perf_counter() - t:.1f} s to write or check)")
        print(f"{os.cpu_count()} CPU cores; host memory {'kept' if kept else 'as glibc defaults'}"
              f" on our side, as glibc defaults on sae-lens's")
        if "throughput" in parts:
            rows = write_rows(store, folder / "rows.npy", args.batch,
                              WARMUP + args.rounds * args.steps)
            throughput(args, machine, store, rows)
        if "population" in parts:
            ratio = population(args, store)
            print("\n" + machine.ratio(f"population / {args.members} sequential runs "
                                       f"(member-tokens/s)", ratio))
        if "memory" in parts:
            memory(args, folder)
    finally:
        if temp is not None:
            temp.cleanup()


if __name__ == "__main__":
    main()
