"""Where a bi-encoder fine-tune's peak resident memory goes: RSS sampled every 20 ms through
each phase of ``train_and_evaluate`` (assemble, evaluation sets, compile, steps, evaluation),
beside the weights' and optimizer state's bytes.

    python bench/finetune_memory.py                       # MiniLM, 4,000 documents, 64 x 32 tokens
    python bench/finetune_memory.py --max-len 128 --steps 10
    python bench/finetune_memory.py --model smollm2 --batch-size 16 --lora-rank 8
    python bench/finetune_memory.py --docs 2636 --batch-size 32 --max-len 128 --query-len 32 \
        --steps 108                                       # issue 53's fine-tune: one epoch

``--max-len`` is the documents' length and, without ``--query-len``, the queries'.
``bench/finetune_memory_st.py`` does the same work with sentence-transformers.

The collection is ``hardneg_wordnet_beir``'s written from WordNet (needs wordnet-base and the
MiniLM wheel), restricted to ``--docs`` synsets. Memory is not timing: other work on the cores
slows this down but does not change what it reports.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "experiments"))


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Sampler:
    """RSS every ``period`` seconds; ``phase(name)`` starts a phase; ``peaks()``: each phase's
    peak in the order they began."""

    def __init__(self, period: float = 0.02):
        self.period, self.current, self.peak = period, "start", {"start": rss_mib()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self.period):
            self.peak[self.current] = max(self.peak.get(self.current, 0.0), rss_mib())

    def phase(self, name: str):
        self.peak[self.current] = max(self.peak.get(self.current, 0.0), rss_mib())
        self.current = name
        self.peak.setdefault(name, rss_mib())

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.peak[self.current] = max(self.peak[self.current], rss_mib())

    def print_peaks(self) -> None:
        """Each phase's peak RSS, a line each."""
        print(f"{'phase':48s} {'peak RSS (MiB)':>15s}")
        for name, peak in self.peak.items():
            print(f"{name:48s} {peak:15,.0f}")


def wrap(module, name: str, sampler: Sampler, phase: str, after: str | None = None):
    """Marks ``phase`` while ``module.name`` runs (``after``: the phase that follows it)."""
    fn = getattr(module, name)

    def wrapped(*args, **kwargs):
        sampler.phase(phase)
        try:
            return fn(*args, **kwargs)
        finally:
            if after:
                sampler.phase(after)
    setattr(module, name, wrapped)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=4000)
    p.add_argument("--max-len", type=int, default=32)
    p.add_argument("--query-len", type=int, default=0,
                   help="tokens per query (0: --max-len, which then is the documents' length)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--model", choices=("minilm", "smollm2"), default="minilm")
    p.add_argument("--lora-rank", type=int, default=0)
    p.add_argument("--tied-towers", action="store_true",
                   help="one encoder for both sides, as sentence-transformers trains "
                        "(smollm2: always)")
    p.add_argument("--workdir", default="")
    args = p.parse_args()

    import jax
    import numpy as np

    from hardneg_wordnet_beir import write_collection
    from repr_jax import config as C
    from repr_jax.train import loop, train_and_evaluate
    sampler = Sampler()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="finetune_memory_"))
    root = work / "collection"
    if not (root / "qrels" / "test.tsv").exists():
        write_collection(root, max_docs=args.docs, test_queries=min(1000, args.docs // 10),
                         train_pairs=args.steps * args.batch_size)
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", tokenizer=args.model, max_len=args.max_len,
                          query_max_len=args.query_len, data_dir=str(work / "tfds")),
        encoder=(C.EncoderConfig(name="text_transformer", width=384, depth=6, num_heads=12,
                                 mlp_dim=1536, pooling="mean", init_from="minilm")
                 if args.model == "minilm" else
                 C.EncoderConfig(name="decoder_lm", pooling="mean", init_from="smollm2")),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.05,
                              proj_dim=0, tied_towers=args.tied_towers or args.model == "smollm2"),
        optim=C.OptimConfig(lr=2e-5, weight_decay=0.01, warmup_fraction=0.1,
                            lora_rank=args.lora_rank),
        train=C.TrainConfig(batch_size=args.batch_size, steps=args.steps, ckpt_every=0,
                            num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False, bootstrap=0,
                          sets=(f"beir:{root}",)))
    wrap(loop, "build_run", sampler, "assemble (data, init, pretrained weights)")
    wrap(loop, "load_eval_sets", sampler, "evaluation sets (tokenise the corpus)")
    wrap(loop, "compile_step", sampler, "compile the step", after="train steps")
    wrap(loop, "run_evaluation", sampler, "evaluation (retrieval over the corpus)")
    t = time.perf_counter()
    result = train_and_evaluate(cfg, work / f"run_{args.model}_{args.query_len}_{args.max_len}_"
                                          f"{args.lora_rank}{'_tied' * args.tied_towers}",
                                progress=False, verbose=False)
    sampler.stop()
    state = result["state"]
    leaves = jax.tree.leaves((state.params, state.opt_state))
    state_mib = sum(np.asarray(x).nbytes for x in leaves) / 2**20
    lengths = f"{args.query_len} x {args.max_len}" if args.query_len else f"{args.max_len}"
    print(f"{args.model}, {args.docs} documents, {args.batch_size} pairs x {lengths} tokens, "
          f"{args.steps} steps, {time.perf_counter() - t:.0f} s; params + optimizer state "
          f"{state_mib:.0f} MiB")
    sampler.print_peaks()


if __name__ == "__main__":
    main()
