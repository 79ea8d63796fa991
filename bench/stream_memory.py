"""Training from a dataset much larger than the process's memory: the streaming path at real scale.

Prepares (once) the generated shapes dataset at 64×64 as PNG in array_record — by default 210,000
images, about 2 GB of files and 8 GB as the float32 arrays the in-memory path would hold — then
trains a small CNN on it with every split read by index (``data.in_memory_mb=0``) and reports the
process's peak RSS beside the split's sizes, the training throughput and the share of time the step
waited for input (no evaluators run, so the peak is training's).

    python bench/stream_memory.py [--data-dir DIR] [--examples N] [--steps S]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peak_rss_mb() -> float:
    """This process image's peak RSS (VmHWM; ru_maxrss would carry over a forking parent's)."""
    status = Path("/proc/self/status")
    if status.exists():
        return int(status.read_text().split("VmHWM:")[1].split()[0]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "repr_jax_bench_data"))
    p.add_argument("--examples", type=int, default=210_000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args()

    from repr_jax import data
    from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                                 TrainConfig)
    from repr_jax.train import train_and_evaluate

    # Prepared in a child process: TFDS holds up to 1 GB of a split while writing it, which would
    # count in this process's peak RSS.
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from repr_jax import data; data.load("
                    "'shapes', num_examples=int(sys.argv[1]), image_size=64, data_dir=sys.argv[2])",
                    str(args.examples), args.data_dir], check=True)
    prepare_s = time.perf_counter() - t0
    ds = data.load("shapes", num_examples=args.examples, image_size=64, data_dir=args.data_dir,
                   in_memory_mb=0)
    train = ds.splits["train"]
    files = list(Path(args.data_dir).glob(f"shapes/n{args.examples}_64px_seed0/*/*array_record*"))
    on_disk = sum(f.stat().st_size for f in files)
    print(f"prepared/opened in {prepare_s:.0f} s: {len(files)} array_record files, "
          f"{on_disk / 2**30:.2f} GiB on disk; train split {len(train)} images, "
          f"{train.nbytes / 2**30:.2f} GiB as float32 arrays")

    cfg = Config(
        data=DataConfig(name="shapes", num_examples=args.examples, image_size=64,
                        data_dir=args.data_dir, in_memory_mb=0),
        encoder=EncoderConfig(name="cnn", widths=(16, 32), kernel_size=3),
        method=MethodConfig(name="supervised"),
        train=TrainConfig(batch_size=args.batch_size, steps=args.steps, ckpt_every=0,
                          log_every=50, num_devices=1),
        # No evaluators: the peak is training's (a probe's transients are not the data's).
        eval=EvalConfig(evaluators=(), reference_rows=False))
    with tempfile.TemporaryDirectory() as workdir:
        before = peak_rss_mb()
        t0 = time.perf_counter()
        out = train_and_evaluate(cfg, workdir, progress=True, verbose=False)
        wall = time.perf_counter() - t0
        rows = [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").open()]
    held_out = next(r["value"] for r in out["eval_rows"] if r["metric"] == "loss")
    steady = rows[1:] or rows
    result = dict(
        on_disk_gib=on_disk / 2**30, split_float32_gib=train.nbytes / 2**30,
        peak_rss_mib=peak_rss_mb(), peak_rss_before_training_mib=before,
        images_read=args.steps * args.batch_size,
        images_per_sec=sum(r["examples_per_sec"] for r in steady) / len(steady),
        input_wait_frac=sum(r["input_wait_frac"] for r in steady) / len(steady),
        train_s=wall, final_train_loss=rows[-1]["loss"], held_out_loss=held_out)
    print(json.dumps(result, indent=1))
    print(f"peak RSS {result['peak_rss_mib']:.0f} MiB = "
          f"{result['peak_rss_mib'] / (on_disk / 2**20):.2f}x the files, "
          f"{result['peak_rss_mib'] / (train.nbytes / 2**20):.3f}x the split as arrays")


if __name__ == "__main__":
    main()
