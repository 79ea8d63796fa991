"""``repr-jax compare RUN_A RUN_B ...``: paired bootstrap differences between trained runs (or a
run, BM25 and a pretrained model) on the same queries of a retrieval set, as the studies compute
them.

Two runs' ± intervals can overlap while the paired difference is clear: both models answer the
same queries, so the per-query differences are what is resampled (Koehn 2004). Each run embeds
the set with its own tokenizer, lengths and prefixes; ``bm25`` stands for the lexical baseline
and ``minilm`` (or a local sentence-transformers folder: what ``encoder.init_from`` and ``repr-jax
mine --init-from`` read) for the untrained starting model, which embeds the set's texts with its
own tokenizer at its own length (fine-tuned against zero-shot needs no dummy run). The first name
is the baseline every other is compared with.

An arm, like a reranker's first stage (``eval.rerank.first_stage``), must retrieve by one vector
per text: a text bi-encoder run (:data:`BI_ENCODERS`), a splade run (its term weights searched
exactly through an inverted index, :func:`run_topk`), a pretrained sentence-transformers model, or
BM25 (:func:`check_arm`, before any work). A cross-encoder's or ColBERT's pooled vector, or an
image run, is refused with the reason.

A hybrid is an arm too: ``rrf:A+B`` or ``convex:A+B`` (two or three arms joined by ``+``, e.g.
``rrf:bm25+RUN_DIR``) fuses the arms' top ``FUSION_DEPTH`` candidates of each query
(:mod:`repr_jax.eval.fusion`: RRF with k = 60; convex with equal weights over min-max
normalised scores) and is paired with the baseline like any other arm. Rankings over different
queries are refused in one line.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any, Sequence

from repr_jax.train.arms import check_arm, is_sparse

FUSIONS = ("rrf", "convex")
FUSION_DEPTH = 100  # candidates each part of a fusion arm gives per query (at least the deepest k)
FIELDS = ("set", "metric", "run", "baseline", "value", "baseline_value", "difference",
          "diff_low", "diff_high", "p_value", "queries")


def _texts_sets(sets: Sequence[str]) -> list:
    """The named retrieval sets, read for their texts (BM25's and a pretrained model's input)."""
    from repr_jax.data import eval_sets
    return [eval_sets.beir(s[len("beir:"):]) if s.startswith("beir:")
            else eval_sets.load_eval_set(s) for s in sets]


def pretrained_encoders(name: str):
    """The query and document encoders of pretrained model ``name`` (``minilm`` or a
    sentence-transformers folder), as ``repr-jax mine --init-from`` builds them
    (:func:`repr_jax.train.mine.encoders_of`): its tokenizer, its length, no run."""
    from repr_jax.train.mine import encoders_of
    return encoders_of(init_from=name, progress=f"{Path(name).name}: encoding")


def pretrained_topk(encoders, s, k: int):
    """``[Q, k]`` corpus indices of set ``s``'s queries by cosine similarity of ``encoders``'
    embeddings of its texts (a pretrained sentence-transformers model's way)."""
    import jax.numpy as jnp
    import numpy as np

    from repr_jax.eval.retrieval import retrieve
    q, c = encoders.query(s.texts[0]), encoders.document(s.texts[1])
    return np.asarray(retrieve(jnp.asarray(q), jnp.asarray(c), k=k, similarity="cosine")[1])


def fusion_parts(name: str) -> tuple[str, tuple[str, ...]] | None:
    """``(method, arms)`` of a fusion arm ``rrf:A+B[+C]`` / ``convex:A+B[+C]`` (None for any
    other name); two or three arms, else a one-line ValueError."""
    method, colon, rest = name.partition(":")
    if not colon or method not in FUSIONS:
        return None
    parts = tuple(rest.split("+"))
    if not 2 <= len(parts) <= 3 or not all(parts):
        raise ValueError(f"compare {name}: a fusion arm is {method}:A+B or {method}:A+B+C (two or "
                         f"three arms joined by +)")
    return method, parts


def arm_kind(name: str, *, label: str) -> str:
    """:func:`check_arm`'s kind, or ``"fusion"`` for a fusion arm whose every part is an arm."""
    fusion = fusion_parts(name)
    if fusion is None:
        return check_arm(name, label=label)
    for part in fusion[1]:
        check_arm(part, label=f"{label}: {part}")
    return "fusion"


def _rankings(name: str, sets: Sequence[str], depth: int) -> dict[str, tuple]:
    """``{set name: (Ranking, qrels)}``: arm ``name``'s top ``depth`` candidates with their
    scores on the named sets (a query that is also a document left out), each list carrying
    its set's query texts so that fusion can check it pairs the same queries."""
    import jax.numpy as jnp
    import numpy as np

    from repr_jax.eval.fusion import Ranking, leave_out
    from repr_jax.eval.retrieval import retrieval_tasks, retrieve

    def ranking(ids, scores, s, exclude):
        queries = tuple(s.texts[0]) if getattr(s, "texts", None) is not None else None
        return leave_out(Ranking(Path(name).name or name, np.asarray(ids),
                                         np.asarray(scores), queries), exclude)
    kind, out = check_arm(name, label=name), {}
    if kind in ("bm25", "pretrained"):
        from repr_jax.eval.bm25 import BM25
        encoders = pretrained_encoders(name) if kind == "pretrained" else None
        for s in _texts_sets(sets):
            if getattr(s, "texts", None) is None:
                continue
            k = min(depth + int(s.exclude is not None), len(s.texts[1]))
            if kind == "bm25":
                ids, scores = BM25(s.texts[1]).topk(s.texts[0], k)
            else:
                q, c = encoders.query(s.texts[0]), encoders.document(s.texts[1])
                scores, ids = retrieve(jnp.asarray(q), jnp.asarray(c), k=k,
                                       similarity="cosine")
            out[s.name] = ranking(ids, scores, s, s.exclude), s.qrels
        return out
    embedder, variables, cfg = run_embedder(name, sets)
    by_prefix = {f"{s.name}/": s for s in embedder.sets("retrieval")}
    for prefix, q, c, qrels, exclude in retrieval_tasks(embedder, variables,
                                                        sparse=is_sparse(cfg)):
        if prefix not in by_prefix:
            continue  # the run's own test pairs: not a named set
        k = min(depth + int(exclude is not None), c.shape[0])
        scores, ids = run_topk(cfg, q, c, k)
        out[prefix.rstrip("/")] = ranking(ids, scores, by_prefix[prefix], exclude), qrels
    return out


def run_topk(cfg, q, c, k: int):
    """``(scores, ids)`` ``[Q, k]``: the exact top ``k`` of run ``cfg``'s query features ``q`` in
    its corpus features ``c``: through an inverted index for a splade run's term weights
    (:func:`repr_jax.eval.sparse_retrieval.search`, ``O(postings touched)``), else by its
    ``eval.retrieval.similarity`` (``O(Q N D)``)."""
    if is_sparse(cfg):
        from repr_jax.eval.sparse_retrieval import build_index, search
        out = search(build_index(c), q, k)
        return out.scores, out.ids
    from repr_jax.eval.retrieval import retrieve
    return retrieve(q, c, k=k, similarity=cfg.eval.retrieval.similarity)


def _fused_per_query(name: str, sets: Sequence[str], ks: Sequence[int]) -> dict[str, dict]:
    """``{set name: {metric: [Q] values}}`` of fusion arm ``name`` (:func:`fusion_parts`)."""
    from repr_jax.eval.fusion import convex, ranking_metrics, rrf
    method, parts = fusion_parts(name)
    depth = max(FUSION_DEPTH, max(ks))
    per_part = [_rankings(p, sets, depth) for p in parts]
    out = {}
    for set_name, (_, qrels) in per_part[0].items():
        if any(set_name not in r for r in per_part):
            continue
        rankings = [r[set_name][0] for r in per_part]
        fused = (rrf(rankings, top=depth) if method == "rrf" else
                 convex(rankings, normalize="minmax", top=depth))
        out[set_name] = ranking_metrics(fused.ids, qrels, ks)
    return out


def _per_query(name: str, sets: Sequence[str], ks: Sequence[int]) -> dict[str, dict]:
    """``{set name: {metric: [Q] values}}`` of one run (or BM25, or a pretrained model, or a
    fusion of them) on the named sets."""
    from repr_jax.eval.retrieval import (per_query_metrics, retrieval_tasks, topk_metrics,
                                         without)
    if fusion_parts(name) is not None:
        return _fused_per_query(name, sets, ks)
    kind = check_arm(name, label=name)
    if kind == "bm25":
        from repr_jax.eval.bm25 import bm25_per_query
        return {p.rstrip("/"): m for p, m in bm25_per_query(_texts_sets(sets), ks=ks)}
    if kind == "pretrained":
        encoders, out = pretrained_encoders(name), {}
        for s in _texts_sets(sets):
            if getattr(s, "texts", None) is None:
                continue
            extra = int(s.exclude is not None)
            idx = pretrained_topk(encoders, s, max(ks) + extra)
            out[s.name] = topk_metrics(without(idx, s.exclude) if extra else idx, s.qrels, ks,
                                       per_query=True)
        return out
    embedder, variables, cfg = run_embedder(name, sets)
    if not is_sparse(cfg):
        return {p.rstrip("/"): m for p, m in
                per_query_metrics(embedder, variables, ks=ks,
                                  similarity=cfg.eval.retrieval.similarity)}
    out = {}
    for prefix, q, c, qrels, exclude in retrieval_tasks(embedder, variables, sparse=True):
        extra = int(exclude is not None)
        idx = run_topk(cfg, q, c, min(max(ks) + extra, c.shape[0]))[1]
        out[prefix.rstrip("/")] = topk_metrics(without(idx, exclude) if extra else idx, qrels,
                                               ks, per_query=True)
    return out


def run_embedder(run_dir: str, sets: Sequence[str]):
    """``(embedder, variables, config)`` of trained text run ``run_dir`` over the evaluation
    sets ``sets`` (``eval.sets`` entries), tokenised with the run's own tokenizer, lengths and
    prefixes."""
    from repr_jax import config as config_lib
    from repr_jax.data.tokenizer import pad_id_of
    from repr_jax.eval import Embedder
    from repr_jax.train.mine import check_text_run
    from repr_jax.train.run import load_eval_sets, load_trained, text_stand_in
    check_text_run(run_dir)
    cfg, _, method, state = load_trained(run_dir, text_only=True)
    cfg = config_lib.override(cfg, [f"eval.sets={tuple(sets)!r}"])
    stand_in = text_stand_in(cfg)
    embedder = Embedder(method.embed, {}, batch_size=cfg.eval.batch_size,
                        query_fn=method.embed_query, pos_fn=method.embed_pos,
                        eval_sets=load_eval_sets(cfg, stand_in),
                        pad_id=pad_id_of(stand_in.vocab))
    return embedder, state.variables, cfg


def run_candidates(run_dir: str):
    """``candidates(s, k) -> [Q, k]``: the top ``k`` of bi-encoder run ``run_dir`` (its own
    tokenizer, lengths and towers; exact search) on the set named like ``s``, or of a pretrained
    model (``minilm``, a sentence-transformers folder: over the set's texts): a reranker's
    first stage (``eval.rerank.first_stage=RUN_DIR``). Cost as :func:`compare` for one run."""
    from repr_jax.eval.retrieval import retrieval_tasks
    label = f"eval.rerank.first_stage={run_dir}"
    if check_arm(run_dir, label=label) == "pretrained":
        built = {}  # the model, read once for every set

        def pretrained(s, k: int):
            if getattr(s, "texts", None) is None:
                raise ValueError(f"{label} needs {s.name}'s texts (a beir: set or "
                                 f"wordnet_retrieval)")
            if "encoders" not in built:
                built["encoders"] = pretrained_encoders(run_dir)
            return pretrained_topk(built["encoders"], s, k)
        return pretrained

    def candidates(s, k: int):
        embedder, variables, cfg = run_embedder(run_dir, [s.source or s.name])
        for prefix, q, c, _, _ in retrieval_tasks(embedder, variables, sparse=is_sparse(cfg)):
            if prefix.rstrip("/") != s.name:
                continue
            if q.shape[0] != len(s.queries) or c.shape[0] != len(s.corpus):
                raise ValueError(f"eval.rerank.first_stage={run_dir}: its {s.name} has "
                                 f"{q.shape[0]} queries and {c.shape[0]} documents, this run's "
                                 f"{len(s.queries)} and {len(s.corpus)}")
            return run_topk(cfg, q, c, k)[1]
        raise ValueError(f"eval.rerank.first_stage={run_dir}: no retrieval set {s.name}")

    return candidates


def compare(names: Sequence[str], *, sets: Sequence[str] = (),
            metrics: Sequence[str] = ("ndcg@10", "recall@100", "mrr@10"),
            bootstrap: int = 1000, out: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows of ``FIELDS``: each run after the first against the first, per set and metric.
    ``sets`` default to the first run's retrieval ``eval.sets``. ``out``: a ``.csv`` (and the
    same rows as ``.json`` beside it), written atomically. Cost: each run embeds each set once
    (``O((Q + N) T)`` encoder passes) and searches it exactly (``O(Q N D)``); the tests
    ``O(R M B Q)`` for R runs, M metrics, B resamples."""
    from repr_jax import files
    from repr_jax.eval.retrieval import metric_cutoffs
    from repr_jax.eval.stats import paired_row
    if len(names) < 2:
        raise ValueError("compare needs at least two runs (the first is the baseline)")
    ks = metric_cutoffs(metrics, option="--metrics")
    for n in names:  # every arm checked from its files before any work
        arm_kind(n, label=f"compare {n}")
    if out is not None:
        out = files.check_output(out, flag="--out", inputs=())
        if out.suffix != ".csv":
            raise ValueError(f"--out {out}: name a .csv file (the JSON goes beside it)")
        files.check_output(out.with_suffix(".json"), flag="--out's JSON")
    if not sets:
        arms = [p for n in names for p in (fusion_parts(n) or (None, (n,)))[1]]
        first = next((n for n in arms if check_arm(n, label=n) == "run"), None)
        if first is None:
            raise ValueError("give --set: bm25 and pretrained models name no evaluation set "
                             "(only a run's eval.sets do)")
        from repr_jax import config as config_lib
        cfg = config_lib.load_json(Path(first) / "config.json")
        sets = [s for s in cfg.eval.sets if s.startswith("beir:") or s == "wordnet_retrieval"]
        if not sets:
            raise ValueError(f"{first}: its eval.sets have no retrieval set; give --set beir:DIR")
    per = {n: _per_query(n, sets, ks) for n in names}
    base, rows = names[0], []
    for set_name in per[base]:
        for n in names[1:]:
            if set_name not in per[n]:
                continue
            a, b = per[n][set_name], per[base][set_name]
            if len(a[metrics[0]]) != len(b[metrics[0]]):
                raise ValueError(f"{set_name}: {n} answers {len(a[metrics[0]])} queries, {base} "
                                 f"{len(b[metrics[0]])}: not the same queries")
            rows += [dict(set=set_name, metric=m, run=n, baseline=base,
                          **paired_row(a[m], b[m], num_resamples=bootstrap)) for m in metrics]
    if out is not None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
        files.write_text(out, buffer.getvalue())
        files.write_json(out.with_suffix(".json"), rows)
    return rows


def _label(name: str) -> str:
    """An arm's short name in the table: a run folder's last part (in a fusion arm, each's)."""
    fusion = fusion_parts(name)
    if fusion is None:
        return Path(name).name
    return f"{fusion[0]}:" + "+".join(Path(p).name for p in fusion[1])


def format_rows(rows: Sequence[dict[str, Any]], bootstrap: int) -> str:
    """The comparison as a table: each difference with its paired interval and p-value."""
    lines = [f"{'set':24s} {'metric':11s} {'run':28s} {'value':>7s} {'baseline':>8s} "
             f"{'difference [95% paired]':>27s} {'p':>7s}"]
    floor = 1 / max(bootstrap, 1)
    for r in rows:
        p = f"<{floor:.0e}" if r["p_value"] < floor else f"{r['p_value']:.3f}"
        lines.append(f"{r['set'][:24]:24s} {r['metric']:11s} {_label(r['run'])[:28]:28s} "
                     f"{r['value']:7.4f} {r['baseline_value']:8.4f} "
                     f"{r['difference']:+8.4f} [{r['diff_low']:+.4f}, {r['diff_high']:+.4f}] "
                     f"{p:>7s}")
    return "\n".join(lines)


def main(args) -> int:
    rows = compare(args.runs, sets=args.set or (), metrics=args.metrics,
                   bootstrap=args.bootstrap, out=args.out)
    print(f"baseline: {args.runs[0]} (queries answered by every run: paired resamples)")
    print(format_rows(rows, args.bootstrap))
    if args.out:
        print(f"-> {args.out}", file=sys.stderr)
    return 0
