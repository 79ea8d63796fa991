"""MTEB tasks built offline from data that ships here, and repr_jax's own per-example scores of
them, so that runs can be paired where mteb reports one number per task (no mteb import here).

========================== ========= ==========================================================
task                       type      from
========================== ========= ==========================================================
WordNetDefinitionRetrieval Retrieval WordNet's test split: a definition finds its lemma list
LeeSTS                     STS       gensim's Lee et al. 2005 documents (1,225 rated pairs)
WordSim353                 STS       gensim's wordsim353.tsv
SimLex999                  STS       gensim's simlex999.txt
``beir:DIR``               Retrieval a BEIR collection's test (else dev) judgements
========================== ========= ==========================================================

A task's :class:`RetrievalData` or :class:`STSData` is what :mod:`repr_jax.integrations.mteb`
hands to mteb; :func:`per_example` is what the project's evaluators compute over the same
embeddings (per-query nDCG@10 with :func:`repr_jax.eval.retrieve`, per-pair cosine), and
:func:`table` pairs runs with the bootstrap of :mod:`repr_jax.eval.stats`: per task, and per task
type by averaging the tasks' resampled differences.

Definitions, where mteb's number and ours could differ: nDCG@10 has linear gains and a
``log2(rank + 1)`` discount in both (pytrec_eval's ``ndcg_cut_10``); a query that is also a
document does not retrieve itself (mteb's ``ignore_identical_ids``, which these tasks set);
Spearman averages tied ranks in both; mteb rescales STS gold scores to [0, 1], which no rank
correlation sees.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

BEIR = "beir:"
RETRIEVAL_K = 10  # nDCG@10: mteb's main score for retrieval


@dataclasses.dataclass(frozen=True)
class RetrievalData:
    """Queries against a corpus with graded judgements ``(query row, doc row, grade)``;
    ``exclude[i]``: the corpus row query ``i`` may not retrieve (its own id), -1 for none."""
    query_ids: list[str]
    queries: list[str]
    doc_ids: list[str]
    corpus: list[str]
    judged: tuple[np.ndarray, np.ndarray, np.ndarray]
    exclude: np.ndarray

    def size(self) -> str:
        return (f"{len(self.queries)} queries, {len(self.corpus)} documents, "
                f"{len(self.judged[0])} judgements")


@dataclasses.dataclass(frozen=True)
class STSData:
    """Rated pairs ``(texts[pairs[i, 0]], texts[pairs[i, 1]])`` with ``gold[i]`` in
    ``[min_score, max_score]``."""
    texts: list[str]
    pairs: np.ndarray
    gold: np.ndarray
    min_score: float
    max_score: float

    def size(self) -> str:
        return f"{len(self.pairs)} pairs of {len(self.texts)} texts"


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: its name in mteb, mteb's task type and main score, and its data's loader."""
    name: str
    type: str
    main_score: str
    description: str
    load: Callable[[], RetrievalData | STSData]


def _wordnet() -> RetrievalData:
    from repr_jax.data.eval_sets import wordnet_retrieval
    s = wordnet_retrieval()
    queries, corpus = s.texts
    q, d = np.nonzero(np.asarray(s.qrels))
    return RetrievalData([f"q{i}" for i in range(len(queries))], list(queries),
                         [f"d{j}" for j in range(len(corpus))], list(corpus),
                         (q, d, np.asarray(s.qrels)[q, d].astype(np.int64)),
                         np.full(len(queries), -1, np.int64))


def _similarity(name: str, low: float, high: float) -> Callable[[], STSData]:
    def load() -> STSData:
        from repr_jax.data.eval_sets import similarity_texts
        texts, pairs, gold = similarity_texts(name)
        return STSData(texts, pairs, gold, low, high)
    return load


def _beir(root: str) -> RetrievalData:
    from repr_jax.data import beir
    c = beir.read_collection(root)
    r = c.qrels[c.test_split]
    used = np.unique(r["query"])  # as repr_jax.data.eval_sets.beir: the judged queries
    docs = {k: i for i, k in enumerate(c.doc_ids)}
    return RetrievalData([c.query_ids[i] for i in used], [c.query_texts[i] for i in used],
                         list(c.doc_ids), list(c.doc_texts),
                         (np.searchsorted(used, r["query"]), r["doc"], r["grade"]),
                         np.asarray([docs.get(c.query_ids[i], -1) for i in used], np.int64))


TASKS = {t.name: t for t in (
    Task("WordNetDefinitionRetrieval", "Retrieval", "ndcg_at_10",
         "A WordNet definition finds its synset's lemma list (the first 2,000 synsets of the "
         "test split; a lemma list shared by synsets is relevant to each).", _wordnet),
    Task("LeeSTS", "STS", "cosine_spearman",
         "Lee et al. 2005: 50 news documents, every pair rated by people (mean rating).",
         _similarity("lee", 0.0, 1.0)),
    Task("WordSim353", "STS", "cosine_spearman",
         "WordSim-353: word pairs rated for relatedness (0-10).", _similarity("wordsim353", 0, 10)),
    Task("SimLex999", "STS", "cosine_spearman",
         "SimLex-999: word pairs rated for similarity, not relatedness (0-10).",
         _similarity("simlex999", 0.0, 10.0)),
)}


def task(name: str) -> Task:
    """The task called ``name`` (or ``beir:DIR``: that collection as a retrieval task, named
    by its folder); an unknown name is a one-line ValueError naming the close ones."""
    if name.startswith(BEIR):
        root = Path(name[len(BEIR):])
        return Task(f"BEIR_{root.resolve().name}", "Retrieval", "ndcg_at_10",
                    f"The BEIR collection in {root}.", lambda: _beir(str(root)))
    if name in TASKS:
        return TASKS[name]
    close = difflib.get_close_matches(name, TASKS, n=3, cutoff=0.5) or [
        t for t in TASKS if name.lower() in t.lower()]
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ValueError(f"unknown mteb task {name!r}: {hint}the tasks are {', '.join(TASKS)} "
                     f"and beir:DIR (repr-jax mteb --list)")


def tasks(names: Sequence[str] | str) -> list[Task]:
    """``--tasks A,B``: the tasks, each checked (:func:`task`) before anything runs; empty:
    every built-in task."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    return [task(n) for n in names] if names else list(TASKS.values())


def listing() -> list[str]:
    """``repr-jax mteb --list``: one line a task, its name first, then its type and size."""
    out = []
    for t in TASKS.values():
        try:
            size = t.load().size()
        except (OSError, ValueError) as e:  # its data missing here: say so, list the rest
            size = f"data missing: {str(e).splitlines()[0]}"
        out.append(f"{t.name:<28} {t.type:<10} {size}")
    out.append(f"{'beir:DIR':<28} {'Retrieval':<10} a BEIR collection's test (else dev) qrels")
    return out


# --------------------------------------------------------------------------------------------------
# repr_jax's scores of a task
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Scored:
    """Per-example arrays, the JAX statistic that makes the task's main score of them (mean
    nDCG@10 over queries; Spearman over (cosine, gold) pairs: what a bootstrap resamples; None
    for the mean) and that score, computed in float64 (as pytrec_eval and scipy do)."""
    arrays: tuple[np.ndarray, ...]
    statistic: Callable | None
    value: float

    def __len__(self) -> int:
        return len(self.arrays[0])


def per_example(data: RetrievalData | STSData, encode: Callable[[str | None, list[str]],
                                                                  np.ndarray]) -> Scored:
    """repr_jax's per-example scores of a task from ``encode(prompt_type, texts)`` (``"query"``,
    ``"document"``, or None for a symmetric task: what an mteb model is asked for). Retrieval:
    exact cosine top-10 (:func:`repr_jax.eval.retrieve`, ``O(Q N D)``), per judged query
    nDCG@10; STS: per-pair cosine and gold, Spearman (``O(P D)``)."""
    import jax.numpy as jnp
    import scipy.stats

    from repr_jax.eval.retrieval import SparseQrels, retrieve, topk_metrics, without
    from repr_jax.eval.sts import pair_similarity, spearman
    if isinstance(data, STSData):
        emb = np.asarray(encode(None, list(data.texts)))
        a, b = jnp.asarray(emb[data.pairs[:, 0]]), jnp.asarray(emb[data.pairs[:, 1]])
        sim = pair_similarity(a, b, "cosine")
        unit = emb.astype(np.float64) / np.linalg.norm(emb.astype(np.float64), axis=1,
                                                        keepdims=True)
        sim64 = np.sum(unit[data.pairs[:, 0]] * unit[data.pairs[:, 1]], axis=1)  # near ties
        gold = np.asarray(data.gold, np.float32)
        return Scored((np.asarray(sim), gold), spearman,
                      float(scipy.stats.spearmanr(sim64, gold.astype(np.float64)).statistic))
    q = encode("query", list(data.queries))
    c = encode("document", list(data.corpus))
    qrels = SparseQrels(*data.judged, (len(data.queries), len(data.corpus)))
    _, idx = retrieve(q, c, k=min(RETRIEVAL_K + 1, len(data.corpus)))
    if idx.shape[1] > RETRIEVAL_K or (data.exclude >= 0).any():  # k + 1 found: drop one
        idx = without(idx, data.exclude)
    per_q = topk_metrics(idx, qrels, (RETRIEVAL_K,), per_query=True)[f"ndcg@{RETRIEVAL_K}"]
    per_q = np.asarray(per_q)
    return Scored((per_q,), None, float(np.mean(per_q, dtype=np.float64)))


FIELDS = ("task", "type", "run", "value", "low", "high", "difference", "diff_low", "diff_high",
          "p_value", "examples")


def _statistic(scored: Scored) -> Callable:
    import jax.numpy as jnp
    return scored.statistic or jnp.mean


def table(scores: dict[str, dict[str, Scored]], types: dict[str, str], *,
          bootstrap: int = 1000, level: float = 0.95) -> list[dict]:
    """Rows of the comparison: for each task (``types``: task -> type, in order) and run
    (``scores[run][task]``, the first run the baseline), the main score with its percentile
    interval, and each other run's paired difference from the baseline's with its interval and
    p-value (:func:`repr_jax.eval.stats.paired_bootstrap`: the same queries or pairs resampled
    for both). Then one row per type and run, ``task = "<type> (mean of n)"``: the mean of its
    tasks' scores, whose interval averages the tasks' resampled values (each task resampled on
    its own: a different seed). Time ``O(R E)`` for R resamples over E examples in all."""
    from repr_jax.eval import stats
    runs = list(scores)
    base = runs[0]
    rows, per_type = [], {}
    for i, (name, kind) in enumerate(types.items()):
        for run in runs:
            s = scores[run][name]
            stat = _statistic(s)
            samples = stats.resampled(stat, tuple(map(np.asarray, s.arrays)), bootstrap, i, 100)
            lo, hi = stats.percentile_interval(samples, level)
            row = dict(task=name, type=kind, run=run, value=s.value, low=lo, high=hi,
                       difference=math.nan, diff_low=math.nan, diff_high=math.nan,
                       p_value=math.nan, examples=len(s))
            diff = None
            if run != base:
                b = scores[base][name]
                if len(b) != len(s):
                    raise ValueError(f"{name}: {run} scored {len(s)} examples and {base} "
                                     f"{len(b)}; a paired comparison needs the same ones")
                observed, diff = stats.paired_samples(s.arrays, b.arrays, s.statistic,
                                                      num_resamples=bootstrap, seed=i)
                t = stats.paired_summary(observed, diff, level)
                row.update(difference=t["difference"], diff_low=t["low"], diff_high=t["high"],
                           p_value=t["p_value"])
            rows.append(row)
            per_type.setdefault((kind, run), []).append((row, samples, diff))
    for (kind, run), parts in per_type.items():
        n = len(parts)
        value = float(np.mean([r["value"] for r, _, _ in parts]))
        lo, hi = stats.percentile_interval(np.mean([np.asarray(s) for _, s, _ in parts], 0), level)
        row = dict(task=f"{kind} (mean of {n})", type=kind, run=run, value=value, low=lo,
                   high=hi, difference=math.nan, diff_low=math.nan, diff_high=math.nan,
                   p_value=math.nan, examples=sum(r["examples"] for r, _, _ in parts))
        if run != base:
            observed = float(np.mean([r["difference"] for r, _, _ in parts]))
            t = stats.paired_summary(observed, np.mean([np.asarray(d) for _, _, d in parts], 0),
                                     level)
            row.update(difference=t["difference"], diff_low=t["low"], diff_high=t["high"],
                       p_value=t["p_value"])
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict], bootstrap: int) -> str:
    """The table :func:`table` makes, as text: type averages first, then each task."""
    lines = [f"{'task':30s} {'run':24s} {'score [95%]':>25s} {'vs baseline [95% paired]':>28s} "
             f"{'p':>7s} {'n':>6s}"]
    floor = 1 / max(bootstrap, 1)
    means = [r for r in rows if r["task"].endswith(")")]
    for r in means + [r for r in rows if r not in means]:
        diff = p = ""
        if not math.isnan(r["difference"]):
            diff = f"{r['difference']:+.4f} [{r['diff_low']:+.4f}, {r['diff_high']:+.4f}]"
            p = f"<{floor:.0e}" if r["p_value"] < floor else f"{r['p_value']:.3f}"
        lines.append(f"{r['task'][:30]:30s} {Path(r['run']).name[:24]:24s} "
                     f"{r['value']:7.4f} [{r['low']:.4f}, {r['high']:.4f}] {diff:>28s} "
                     f"{p:>7s} {r['examples']:6d}")
    return "\n".join(lines)
