"""Input pipeline throughput per host core: read + decode (PNG from array_record, by index) in
background threads, then the SimCLR augmentation on device — beside torchvision's ``DataLoader``
with the same transforms on the same images, in one run (when torch and torchvision import).

    python bench/input_pipeline.py [--image-size 64] [--examples 12000] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def rate(fn, n_images: int, repeats: int = 3) -> float:
    """Images per second of ``fn()`` (which handles ``n_images``), best of ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n_images / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "repr_jax_bench_data"))
    p.add_argument("--examples", type=int, default=12_000)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=16)
    args = p.parse_args()

    import jax

    from repr_jax import data
    from repr_jax.data import augment as A
    from repr_jax.data.source import Prefetcher

    ds = data.load("shapes", num_examples=args.examples, image_size=args.image_size,
                   data_dir=args.data_dir, in_memory_mb=0)
    train, b, n = ds.splits["train"], args.batch_size, args.batches
    stream = data.BatchStream(train, batch_size=b, seed=0)
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores; shapes {args.image_size}x{args.image_size} PNG, batches of {b}, "
          f"{n} batches per measurement")

    results = {}
    for workers in (0, 1, 2):
        def read(workers=workers):
            pf = Prefetcher(stream.batch, stop=n, workers=workers)
            for step in range(n):
                pf(step)
            pf.close()
        results[f"read+decode, {workers} threads"] = rate(read, b * n)

    recipe = A.PRESETS["simclr"][0]
    aug = jax.jit(lambda key, x: A.views(key, x, recipe))
    x = jax.device_put(stream.batch(0)["x"])
    aug(jax.random.PRNGKey(0), x).block_until_ready()

    def augment():
        for i in range(n):
            aug(jax.random.PRNGKey(i), x).block_until_ready()
    results["simclr augmentation (jit, on the CPU device)"] = rate(augment, b * n)

    try:
        import torch
        from torchvision.transforms import v2 as T
    except ImportError as e:
        print(f"torchvision: not measured ({e}); pip install torch torchvision to compare")
    else:
        size = args.image_size
        tf = T.Compose([T.ToImage(), T.ToDtype(torch.float32, scale=True),
                        T.RandomResizedCrop(size, antialias=False), T.RandomHorizontalFlip(),
                        T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
                        T.RandomGrayscale(0.2),
                        T.RandomApply([T.GaussianBlur(recipe.kernel_size(size), (0.1, 2.0))],
                                      p=0.5)])
        # The same PNG bytes, decoded by PIL in the DataLoader's workers.
        raw = train.builder.as_data_source("train", decoders={
            train.input_key: __import__("tensorflow_datasets").decode.SkipDecoding()})

        class Images(torch.utils.data.Dataset):
            def __len__(self):
                return len(raw)

            def __getitem__(self, i):
                import io

                from PIL import Image
                return tf(Image.open(io.BytesIO(raw[i]["x"])).convert("RGB"))

        for workers in (0, cores):
            loader = torch.utils.data.DataLoader(Images(), batch_size=b, num_workers=workers,
                                                 shuffle=True)

            def torch_pipeline(loader=loader):
                for i, _ in zip(range(n), loader):
                    pass
            results[f"torchvision DataLoader, {workers} workers"] = rate(torch_pipeline, b * n, 1)

    width = max(map(len, results))
    for name, value in results.items():
        print(f"{name:<{width}}  {value:10,.0f} images/s  {value / cores:10,.0f} per core")
    ours = min(results["read+decode, 2 threads"],
               results["simclr augmentation (jit, on the CPU device)"])
    theirs = [v for k, v in results.items() if k.startswith("torchvision") and "0 workers" not in k]
    if theirs:
        print(f"ratio repr_jax / torchvision (end to end, the slower stage bounds ours): "
              f"{ours / theirs[0]:.2f}")
    print(f"a step that takes less than {b / ours * 1e3:.0f} ms per batch of {b} would wait "
          f"for input on this host")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
