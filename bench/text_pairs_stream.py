"""A user's pairs file at real size: ``data.name=pairs:FILE.jsonl`` with 2 M lines, streamed.

Writes (once) a generated pairs file — 2,000,000 lines of query, positive and one negative, a few
hundred MB — prepares it (tokenised into array_record, in a child process, timed), then measures
the peak RSS (VmHWM) of fresh processes that train a small bi-encoder with hard negatives on it:
streamed for 2 steps, streamed for many steps, and with the split held in memory (2 steps); and
checks that streamed batches equal the held ones bitwise at several steps.

    python bench/text_pairs_stream.py [--dir DIR] [--lines N] [--steps S]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

WORDS = [f"{a}{b}" for a in "bcdfghklmnprstvz" for b in ("a", "e", "i", "o", "u", "ai", "ou")]

TRAIN = textwrap.dedent("""
    import json, sys
    from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                                 TrainConfig)
    from repr_jax.train import train_and_evaluate

    path, data_dir, workdir, steps, in_memory_mb = sys.argv[1:]
    cfg = Config(
        data=DataConfig(name="pairs:" + path, max_len=48, data_dir=data_dir,
                        in_memory_mb=float(in_memory_mb)),
        encoder=EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                              mlp_dim=64, depth=1),
        method=MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                            proj_dim=16, negatives_per_query=1),
        train=TrainConfig(batch_size=256, steps=int(steps), ckpt_every=0, log_every=50,
                          num_devices=1),
        eval=EvalConfig(evaluators=(), reference_rows=False))
    train_and_evaluate(cfg, workdir, progress=False, verbose=False)
    status = open("/proc/self/status").read()
    print(json.dumps(dict(peak_mb=int(status.split("VmHWM:")[1].split()[0]) / 1024)))
""")

SAME = textwrap.dedent("""
    import sys
    from repr_jax import data
    path, data_dir = sys.argv[1:]
    kw = dict(data_dir=data_dir, max_len=48, negatives=1)
    held = data.load("pairs:" + path, in_memory_mb=1e6, **kw).splits["train"]
    streamed = data.load("pairs:" + path, in_memory_mb=0, **kw).splits["train"]
    for step in (0, 1000, 7800, 20000):  # 20,000 x 256 passes an epoch
        a = data.BatchStream(held, batch_size=256, seed=0).batch(step)
        b = data.BatchStream(streamed, batch_size=256, seed=0).batch(step)
        assert all(a[k].tobytes() == b[k].tobytes() for k in a), step
    print(len(held["x"]), "rows; batches at steps 0, 1000, 7800, 20000 bitwise equal")
""")


def write_pairs(path: Path, lines: int, seed: int = 0) -> None:
    """``lines`` generated pairs, written through a temporary file (renamed when complete)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    words = np.asarray(WORDS)
    tmp = path.with_suffix(".partial")
    with open(tmp, "w") as f:
        for start in range(0, lines, 10_000):
            n = min(10_000, lines - start)
            q = words[rng.integers(0, len(words), (n, 6))]
            p = words[rng.integers(0, len(words), (n, 16))]
            neg = words[rng.integers(0, len(words), (n, 16))]
            f.writelines(json.dumps({"query": " ".join(q[i]), "positive": " ".join(p[i]),
                                     "negatives": [" ".join(neg[i])]}) + "\n" for i in range(n))
    tmp.rename(path)


def run(script: str, *args: str) -> str:
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    return r.stdout.strip().splitlines()[-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "repr_jax_bench_pairs"))
    p.add_argument("--lines", type=int, default=2_000_000)
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"pairs_{args.lines}.jsonl"
    if not path.exists():
        t0 = time.perf_counter()
        write_pairs(path, args.lines)
        print(f"wrote {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    size_mb = path.stat().st_size / 2**20
    data_dir = str(root / "tfds")
    t0 = time.perf_counter()
    run("import sys; from repr_jax import data; data.load('pairs:' + sys.argv[1], "
        "data_dir=sys.argv[2], max_len=48, negatives=1, in_memory_mb=0); print('ok')",
        str(path), data_dir)
    prepare_s = time.perf_counter() - t0
    prepared = sum(f.stat().st_size for f in Path(data_dir).rglob("*array_record*"))
    print(f"file {size_mb:.0f} MiB, {args.lines:,} lines; prepared (or opened) in {prepare_s:.0f} "
          f"s: {prepared / 2**20:.0f} MiB of array_record", flush=True)
    print(run(SAME, str(path), data_dir), flush=True)
    peaks = {}
    for name, steps, in_memory in (("stream_2_steps", 2, 0), (f"stream_{args.steps}_steps",
                                                              args.steps, 0),
                                   ("held_2_steps", 2, 1e6)):
        with tempfile.TemporaryDirectory() as workdir:
            t0 = time.perf_counter()
            peaks[name] = json.loads(run(TRAIN, str(path), data_dir, workdir, str(steps),
                                         str(in_memory)))["peak_mb"]
            print(f"{name}: peak RSS {peaks[name]:.0f} MiB ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    print(json.dumps(dict(file_mib=size_mb, prepared_mib=prepared / 2**20,
                          prepare_s=prepare_s, **peaks), indent=1))


if __name__ == "__main__":
    main()
