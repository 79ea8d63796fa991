"""sae-lens's side of ``bench/sae_vs_saelens.py``, run by it in the torch venv (not on its own):

    /tmp/saevenv/bin/python bench/sae_vs_saelens_torch.py --vectors DIR/vectors.npy \\
        --rows DIR/rows.npy --latents 4096 --k 32 ...   # then reads commands on stdin

The venv, if missing (torch 2.13.0 exactly: a local wheel; another version downloads GBs)::

    python3 -m venv /tmp/saevenv && /tmp/saevenv/bin/pip install torch==2.13.0 sae-lens==6.54.12

Trains sae-lens 6.54.12's ``TopKTrainingSAE`` with its own trainer's step (``SAETrainer.step``, as
``SAETrainer.fit`` calls it, less the progress bar, wandb and checkpoints, all off or no-ops here):
the activation scaler (identity: ``normalize_activations="none"``), ``training_forward_pass``
(encode with decoder-norm rescaling, TopK, decode, MSE, AuxK on the latents dead past
``dead_feature_window``: sae-lens computes it only when some are), the firing statistics
(``n_forward_passes_since_fired``, ``act_freq_scores``), ``loss.backward()``,
``clip_grad_norm_(1.0)``, ``Adam.step``, ``zero_grad``, the (constant) LR scheduler and coefficient
schedulers. Batch ``i`` is rows ``rows[i]`` of ``vectors.npy`` (memory-mapped), read as
:class:`repr_jax.data.activations` reads a store (the rows in file order, then put back in batch
order).

Only numpy and the standard library are imported at module level: :func:`serve` (the line protocol
both sides answer) is imported by the repr_jax side too, which has no torch.

Protocol: after setup and ``--warmup`` steps the worker prints ``@@ {"ready": seconds}``; then, per
stdin line, ``run N`` trains the next N steps and prints ``@@ {"read": s, "step": s}`` (the batch
reads and the steps, timed apart; every step completes before the next read), and ``quit`` prints
``@@ {"peak_rss_mib", "peak_anon_mib", "wall", ...info}`` and exits. ``peak_anon_mib``: the largest
anonymous resident memory (``RssAnon``) sampled after setup and after every step; ``peak_rss_mib``
(``ru_maxrss``) also counts the pages of the memory-mapped vectors the reads touched.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

START = time.perf_counter()


def rss_anon_mib() -> float:
    """This process's anonymous resident memory now (``RssAnon``), MiB; NaN without /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def reply(obj: dict) -> None:
    print("@@ " + json.dumps(obj), flush=True)


def serve(read, step, *, warmup: int, info=lambda: {}) -> None:
    """The worker loop: ``warmup`` steps, then ``run N`` / ``quit`` commands from stdin.
    ``read(i)``: batch ``i`` on the host; ``step(batch)``: one training step, finished on return;
    ``info()``: what ``quit`` reports beside the memory."""
    i = 0
    for i in range(warmup):
        step(read(i))
    i = warmup
    anon = rss_anon_mib()
    reply({"ready": time.perf_counter() - START})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "run":
            reading = stepping = 0.0
            for _ in range(int(cmd[1])):
                t0 = time.perf_counter()
                batch = read(i)
                t1 = time.perf_counter()
                step(batch)
                t2 = time.perf_counter()
                reading, stepping, i = reading + t1 - t0, stepping + t2 - t1, i + 1
                anon = max(anon, rss_anon_mib())
            reply({"read": reading, "step": stepping})
        elif cmd[0] == "quit":
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
            reply({"peak_rss_mib": peak, "peak_anon_mib": anon,
                   "wall": time.perf_counter() - START, **info()})
            return
        else:
            raise SystemExit(f"unknown command {line!r}")


def row_reader(vectors_path: str, rows_path: str):
    """``read(i)``: float32 ``[B, D]``, rows ``rows[i]`` of the memory-mapped vectors (bfloat16
    stores widened exactly), read in file order as repr_jax's store reader does."""
    vectors = np.load(vectors_path, mmap_mode="r")
    rows = np.load(rows_path, mmap_mode="r")
    widen = vectors.dtype.kind == "V" and vectors.dtype.itemsize == 2  # bfloat16 saved as V2

    def read(i: int) -> np.ndarray:
        r = np.asarray(rows[i % len(rows)], np.int64)
        order = np.argsort(r, kind="stable")
        block = np.empty((len(r), vectors.shape[1]), np.float32)
        got = vectors[r[order]]
        if widen:
            got = (got.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        block[order] = got
        return block

    return read


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", required=True)
    p.add_argument("--rows", required=True)
    p.add_argument("--latents", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--aux", type=float, required=True, help="AuxK coefficient")
    p.add_argument("--dead-window", type=int, required=True)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args(argv)

    import sae_lens
    import torch
    from sae_lens.config import LoggingConfig, SAETrainerConfig
    from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
    from sae_lens.training.sae_trainer import SAETrainer
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    read = row_reader(args.vectors, args.rows)
    d_in = read(0).shape[1]
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(
        d_in=d_in, d_sae=args.latents, k=args.k, aux_loss_coefficient=args.aux,
        dtype="float32", device="cpu"))
    trainer = SAETrainer(
        cfg=SAETrainerConfig(total_training_samples=args.batch * 10 ** 6,
                             train_batch_size_samples=args.batch, lr=args.lr,
                             lr_end=args.lr,  # constant: the end is the start
                             dead_feature_window=args.dead_window,
                             logger=LoggingConfig(log_to_wandb=False), device="cpu"),
        sae=sae, data_provider=iter(()))
    last = {}

    def step(batch: np.ndarray) -> None:  # SAETrainer.fit's loop body, without tqdm/wandb
        trainer.maybe_reset_sparsity()
        out = trainer.step(torch.from_numpy(batch))
        trainer.n_training_steps += 1
        last["out"] = out

    def info() -> dict:
        out = last["out"]
        return {"loss": float(out.loss.detach()), "dead": int(trainer.dead_neurons.sum()),
                "l0": float((out.feature_acts != 0).sum(-1).float().mean()),
                "versions": f"sae-lens {sae_lens.__version__}, torch {torch.__version__}, "
                            f"{torch.get_num_threads()} threads"}

    serve(read, step, warmup=args.warmup, info=info)


if __name__ == "__main__":
    main()
