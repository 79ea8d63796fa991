"""MTEB tasks built offline from data that ships here, and repr_jax's own per-example scores of
them, so that runs can be paired where mteb reports one number per task (no mteb import here).

========================== ========= ==========================================================
task                       type      from
========================== ========= ==========================================================
WordNetDefinitionRetrieval Retrieval WordNet's test split: a definition finds its lemma list
WordNetDefinitionReranking Reranking the same queries, each reordering BM25's 20 best documents
LeeSTS                     STS       gensim's Lee et al. 2005 documents (1,225 rated pairs)
WordSim353                 STS       gensim's wordsim353.tsv
SimLex999                  STS       gensim's simlex999.txt
WordNetSameWordPair...     Pair      two WordNet definitions: senses of one word or not (AP)
WordNetCategoryClassif...  Classif.  a definition's lexicographer file (45, e.g. noun.animal)
WordNetCategoryClustering  Cluster.  the same definitions clustered by k-means (V-measure)
GettextCountryBitextMining Bitext    iso-codes' country names: English to 7 languages (F1)
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
correlation sees. Pair classification's main score here is ``cosine_ap`` (scikit-learn's average
precision of the cosines), not the ``max_ap`` of mteb's own tasks: that is the best of five
scoring functions chosen after seeing the labels; mteb's result file has both. Classification
and clustering are mteb's own procedures, repeated here on the same embeddings with the same
seeds (scikit-learn's logistic regression on 8 examples a label, 10 draws; MiniBatchKMeans on
10 resamples), so the scores are equal; their intervals are described at :class:`Scored`.
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
RERANK_DEPTH = 20  # a reranking task's candidates per query (mteb's English ones have 20-30)


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
    # a reranking task's [Q, K] corpus rows, each query's first-stage candidates (BM25's best
    # first): all a model reorders. None: the whole corpus is searched
    candidates: np.ndarray | None = None

    def size(self) -> str:
        reranked = "" if self.candidates is None else \
            f", BM25's top {self.candidates.shape[1]} of each query reranked"
        return (f"{len(self.queries)} queries, {len(self.corpus)} documents, "
                f"{len(self.judged[0])} judgements{reranked}")


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
class BitextData:
    """Per subset (``"eng-fra"``, one a language): English names and their translations, row i
    of one the translation of row i of the other; ``languages[subset]``: its two sides in
    mteb's codes (ISO 639-3 and script)."""
    subsets: dict[str, tuple[list[str], list[str]]]
    languages: dict[str, list[str]]

    def size(self) -> str:
        pairs = sum(len(e) for e, _ in self.subsets.values())
        return f"{pairs} pairs in {len(self.subsets)} languages"


@dataclasses.dataclass(frozen=True)
class PairData:
    """Pairs ``(first[i], second[i])`` labelled 1 (a positive) or 0."""
    first: list[str]
    second: list[str]
    labels: np.ndarray

    def size(self) -> str:
        return f"{len(self.labels)} pairs, {int(np.sum(self.labels))} positive"


@dataclasses.dataclass(frozen=True)
class ClassificationData:
    """Texts labelled ``0 .. C-1``: a logistic regression is fit on a few ``train`` examples
    of each label (mteb's undersampling) and scored by its accuracy on ``test``."""
    train_texts: list[str]
    train_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray

    def size(self) -> str:
        return (f"{len(self.test_texts)} test texts, {len(np.unique(self.train_labels))} labels, "
                f"{len(self.train_texts)} to draw training examples from")


@dataclasses.dataclass(frozen=True)
class ClusteringData:
    """Texts and their labels, which k-means with as many clusters should recover."""
    texts: list[str]
    labels: np.ndarray

    def size(self) -> str:
        return f"{len(self.texts)} texts, {len(np.unique(self.labels))} labels"


# mteb 2.x's defaults, which its classification and clustering tasks keep and these repeat
MTEB_SEED = 42
SAMPLES_PER_LABEL, CLASSIFIER_DRAWS = 8, 10
CLUSTERINGS, KMEANS_BATCH = 10, 512

# The bitext set's default languages (gettext's codes) in mteb's: ISO 639-3 and script
BITEXT_CODES = {"fr": "fra-Latn", "de": "deu-Latn", "es": "spa-Latn", "ru": "rus-Cyrl",
                "zh_CN": "cmn-Hans", "ar": "ara-Arab", "ja": "jpn-Jpan"}


TaskData = (RetrievalData | STSData | BitextData | PairData | ClassificationData
            | ClusteringData)


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: its name in mteb, mteb's task type and main score, and its data's loader."""
    name: str
    type: str
    main_score: str
    description: str
    load: Callable[[], TaskData]


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


def _wordnet_reranking() -> RetrievalData:
    """The retrieval task with each query's :data:`RERANK_DEPTH` best documents by BM25
    (:class:`repr_jax.eval.bm25.BM25`, ``O(Q N)``) as its candidates."""
    from repr_jax.eval.bm25 import BM25
    data = _wordnet()
    ids, _ = BM25(data.corpus).topk(data.queries, RERANK_DEPTH)
    return dataclasses.replace(data, candidates=ids)


def _gettext_bitext() -> BitextData:
    from repr_jax.eval.bitext import LOCALE_DIR, language_pairs
    pairs, skipped = language_pairs(tuple(BITEXT_CODES), "iso_3166-1", LOCALE_DIR)
    if skipped:  # a fixed task: every language or none, so scores compare across machines
        raise FileNotFoundError(f"{'; '.join(skipped)} under {LOCALE_DIR} (apt-get install "
                                f"iso-codes)")
    return BitextData({f"eng-{BITEXT_CODES[lang][:3]}": ([m for m, _ in p], [t for _, t in p])
                       for lang, p in pairs.items()},
                      {f"eng-{BITEXT_CODES[lang][:3]}": ["eng-Latn", BITEXT_CODES[lang]]
                       for lang in pairs})


def _same_word() -> PairData:
    """Every pair of WordNet test synsets that share a lemma (case-sensitive: two senses of one
    word), each a positive, and as many pairs sharing none, drawn with a fixed seed."""
    from repr_jax.data.eval_sets import wordnet_definitions
    defs, lemmas = wordnet_definitions(10**9)
    words = [set(ls.split(", ")) for ls in lemmas]
    senses: dict[str, list[int]] = {}
    for i, ws in enumerate(words):
        for w in ws:
            senses.setdefault(w, []).append(i)
    positive = sorted({(a, b) for v in senses.values() for a in v for b in v if a < b})
    rng, negative, taken = np.random.default_rng(0), [], set(positive)
    while len(negative) < len(positive):
        a, b = sorted(int(x) for x in rng.integers(len(defs), size=2))
        if a != b and (a, b) not in taken and not words[a] & words[b]:
            negative.append((a, b))
            taken.add((a, b))
    pairs = positive + negative
    return PairData([defs[a] for a, _ in pairs], [defs[b] for _, b in pairs],
                    np.asarray([1] * len(positive) + [0] * len(negative), np.int64))


WORDNET_TEST = 2000  # the retrieval task's queries: the first synsets of the test split


def _categories() -> ClassificationData:
    from repr_jax.data.eval_sets import wordnet_categories
    train, train_labels = wordnet_categories(10**9, "validation")
    test, test_labels = wordnet_categories(WORDNET_TEST)
    return ClassificationData(train, train_labels, test, test_labels)


def _clusters() -> ClusteringData:
    from repr_jax.data.eval_sets import wordnet_categories
    return ClusteringData(*wordnet_categories(WORDNET_TEST))


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
    Task("WordNetDefinitionReranking", "Reranking", "ndcg_at_10",
         "The retrieval task's queries, each with BM25's 20 best documents to reorder (a "
         "cross-encoder's task: mteb's reranking).", _wordnet_reranking),
    Task("LeeSTS", "STS", "cosine_spearman",
         "Lee et al. 2005: 50 news documents, every pair rated by people (mean rating).",
         _similarity("lee", 0.0, 1.0)),
    Task("WordSim353", "STS", "cosine_spearman",
         "WordSim-353: word pairs rated for relatedness (0-10).", _similarity("wordsim353", 0, 10)),
    Task("SimLex999", "STS", "cosine_spearman",
         "SimLex-999: word pairs rated for similarity, not relatedness (0-10).",
         _similarity("simlex999", 0.0, 10.0)),
    Task("WordNetSameWordPairClassification", "PairClassification", "cosine_ap",
         "Two WordNet definitions: senses of one word (they share a lemma) or of unrelated "
         "words; scored by the average precision of their cosine.", _same_word),
    Task("GettextCountryBitextMining", "BitextMining", "f1",
         "Country names (iso-codes' iso_3166-1 catalogue) in English and in 7 languages: each "
         "English name finds its translation.", _gettext_bitext),
    Task("WordNetCategoryClassification", "Classification", "accuracy",
         "A WordNet definition's lexicographer file (45: noun.animal, verb.motion, ...): a "
         "logistic regression on 8 validation-split definitions a label, tested on the retrieval "
         "task's 2,000 test-split definitions.", _categories),
    Task("WordNetCategoryClustering", "Clustering", "v_measure",
         "The retrieval task's 2,000 test-split definitions clustered by k-means into as many "
         "clusters as lexicographer files, scored by V-measure.", _clusters),
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
        out.append(f"{t.name:<34} {t.type:<18} {size}")
    out.append(f"{'beir:DIR':<34} {'Retrieval':<18} a BEIR collection's test (else dev) qrels")
    return out


# --------------------------------------------------------------------------------------------------
# repr_jax's scores of a task
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Scored:
    """Per-example arrays, the JAX statistic that makes the task's main score of them (mean
    nDCG@10 over queries; Spearman over (cosine, gold) pairs; weighted F1 over (gold,
    prediction): what a bootstrap resamples; None for the mean) and that score, computed in
    float64 (as pytrec_eval, scipy and scikit-learn do). A task of several subsets (bitext: one
    a language) has no arrays of its own: its ``parts``, whose mean is its score. ``normal``:
    its interval is the normal one (F1, which resampling biases upward:
    :func:`repr_jax.eval.stats.normal_interval`), else the percentile one.

    Classification's per-example array is each test text's share of the 10 classifiers that
    label it right (its mean: mteb's accuracy); its interval resamples test texts, the training
    draws held fixed. Clustering has no per-example score: ``replicates`` holds its 10 k-means
    V-measures, each on a resample of the texts drawn as mteb draws them (the same rows for
    every run: paired), and its interval and paired test are normal ones from their spread."""
    arrays: tuple[np.ndarray, ...]
    statistic: Callable | None
    value: float
    parts: tuple["Scored", ...] = ()
    normal: bool = False
    replicates: np.ndarray | None = None
    examples: int = 0  # the rows each replicate resamples (a task scored by replicates)

    def __len__(self) -> int:
        if self.replicates is not None:
            return self.examples
        return sum(map(len, self.parts)) if self.parts else len(self.arrays[0])

    @classmethod
    def of_replicates(cls, examples: int, replicates: np.ndarray) -> "Scored":
        """A score that is the mean of ``replicates`` over resamples of ``examples`` rows."""
        values = np.asarray(replicates, np.float64)
        return cls((), None, float(np.mean(values)), normal=True, replicates=values,
                   examples=examples)


Encode = Callable[[str | None, list[str]], np.ndarray]


def per_example(data: TaskData, encode: Encode) -> Scored:
    """repr_jax's per-example scores of a task from ``encode(prompt_type, texts)`` (``"query"``,
    ``"document"``, or None for a symmetric task: what an mteb model is asked for). Retrieval:
    exact cosine top-10 (:func:`repr_jax.eval.retrieve`, ``O(Q N D)``), per judged query
    nDCG@10; STS: per-pair cosine and gold, Spearman (``O(P D)``); pairs: per-pair cosine and
    label, average precision (``O(P D + P log P)``); bitext: each English name's cosine-nearest
    translation, weighted F1 per language (``O(N^2 D)`` each); classification and clustering:
    mteb's procedures (:func:`_classification`, :func:`_clustering`)."""
    if isinstance(data, ClassificationData):
        return _classification(data, encode)
    if isinstance(data, ClusteringData):
        return _clustering(data, encode)
    if isinstance(data, STSData):
        return _sts(data, encode)
    if isinstance(data, PairData):
        return _pairs(data, encode)
    if isinstance(data, BitextData):
        return _bitext_scores(data, encode)
    return _retrieval(data, encode)


def _unit64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)


def _sts(data: STSData, encode: Encode) -> Scored:
    import jax.numpy as jnp
    import scipy.stats

    from repr_jax.eval.sts import pair_similarity, spearman
    emb = np.asarray(encode(None, list(data.texts)))
    a, b = jnp.asarray(emb[data.pairs[:, 0]]), jnp.asarray(emb[data.pairs[:, 1]])
    sim = pair_similarity(a, b, "cosine")
    unit = _unit64(emb)
    sim64 = np.sum(unit[data.pairs[:, 0]] * unit[data.pairs[:, 1]], axis=1)  # near ties
    gold = np.asarray(data.gold, np.float32)
    return Scored((np.asarray(sim), gold), spearman,
                  float(scipy.stats.spearmanr(sim64, gold.astype(np.float64)).statistic))


def average_precision(scores_N, labels_N):
    """Average precision of ranking by ``scores_N`` (higher first) against 0/1 ``labels_N``:
    the mean over positives of the precision where their score's tie group ends (scikit-learn's
    ``average_precision_score``: one threshold per distinct score). JAX: the bootstrap
    statistic. Time ``O(N log N)``."""
    import jax.numpy as jnp
    order = jnp.argsort(-scores_N)
    neg = -scores_N[order]  # ascending
    rel = labels_N[order].astype(jnp.float32)
    hits = jnp.cumsum(rel)
    end = jnp.searchsorted(neg, neg, side="right") - 1  # each position's tie group's last
    precision = hits[end] / (end + 1).astype(jnp.float32)
    return jnp.sum(precision * rel) / jnp.maximum(jnp.sum(rel), 1.0)


def _pairs(data: PairData, encode: Encode) -> Scored:
    from sklearn.metrics import average_precision_score
    a, b = _unit64(encode(None, list(data.first))), _unit64(encode(None, list(data.second)))
    cos = np.sum(a * b, axis=1)
    labels = np.asarray(data.labels, np.int32)
    return Scored((cos.astype(np.float32), labels), average_precision,
                  float(average_precision_score(labels, cos)))


def _retrieval(data: RetrievalData, encode: Encode) -> Scored:
    from repr_jax.eval.retrieval import SparseQrels, retrieve, topk_metrics, without
    q = encode("query", list(data.queries))
    c = encode("document", list(data.corpus))
    if data.candidates is not None:  # reranking: the cosine of each query with its candidates
        cand = np.asarray(data.candidates, np.int64)
        return ranked(data, np.einsum("qd,qkd->qk", _unit64(q), _unit64(c)[cand]), cand)
    qrels = SparseQrels(*data.judged, (len(data.queries), len(data.corpus)))
    _, idx = retrieve(q, c, k=min(RETRIEVAL_K + 1, len(data.corpus)))
    if idx.shape[1] > RETRIEVAL_K or (data.exclude >= 0).any():  # k + 1 found: drop one
        idx = without(idx, data.exclude)
    per_q = topk_metrics(idx, qrels, (RETRIEVAL_K,), per_query=True)[f"ndcg@{RETRIEVAL_K}"]
    per_q = np.asarray(per_q)
    return Scored((per_q,), None, float(np.mean(per_q, dtype=np.float64)))


def ranked(data: RetrievalData, scores_QxK: np.ndarray, ids_QxK: np.ndarray) -> Scored:
    """Per-query nDCG@10 of each query's scored corpus rows ``ids_QxK`` (a search's top k, or
    a reranking task's candidates), ordered as pytrec_eval orders what mteb hands it: by score,
    ties by document id as text, the later first (trec_eval's order); a query's own id left
    out. Time ``O(Q K log K)``."""
    from repr_jax.eval.retrieval import SparseQrels, topk_metrics, without
    ids = np.asarray(ids_QxK, np.int64)
    names = np.asarray(data.doc_ids)
    text_rank = np.argsort(np.argsort(names, kind="stable"), kind="stable")
    order = np.lexsort((-text_rank[ids], -np.asarray(scores_QxK, np.float64)), axis=-1)
    ids = np.take_along_axis(ids, order, axis=1)
    if (data.exclude >= 0).any():
        ids = without(np.concatenate([ids, ids[:, -1:]], axis=1), data.exclude)
    qrels = SparseQrels(*data.judged, (len(data.queries), len(data.corpus)))
    per_q = np.asarray(topk_metrics(ids[:, :RETRIEVAL_K], qrels, (RETRIEVAL_K,),
                                    per_query=True)[f"ndcg@{RETRIEVAL_K}"])
    return Scored((per_q,), None, float(np.mean(per_q, dtype=np.float64)))


def _bitext_scores(data: BitextData, encode: Encode) -> Scored:
    from repr_jax.eval.bitext import f1_statistic, weighted_f1
    parts = []
    for english, translated in data.subsets.values():
        sims = _unit64(encode(None, list(english))) @ _unit64(encode(None, list(translated))).T
        pred = np.argmax(sims, axis=1).astype(np.int32)  # ties: the lower index
        gold = np.arange(len(pred), dtype=np.int32)
        parts.append(Scored((gold, pred), f1_statistic, weighted_f1(pred), normal=True))
    return Scored((), None, float(np.mean([p.value for p in parts])), tuple(parts), normal=True)


def undersampled(labels: np.ndarray, draws: int = CLASSIFIER_DRAWS,
                 per_label: int = SAMPLES_PER_LABEL, seed: int = MTEB_SEED) -> list[list[int]]:
    """mteb's training draws: for each of ``draws``, the row list reshuffled (numpy's
    ``RandomState(seed)`` on the previous draw's order, as mteb does) and its first
    ``per_label`` rows of each label taken, in that order. Time ``O(draws N)``."""
    order, chosen = list(range(len(labels))), []
    for _ in range(draws):
        np.random.RandomState(seed).shuffle(order)
        count: dict[int, int] = {}
        rows = []
        for i in order:
            label = int(labels[i])
            if count.get(label, 0) < per_label:
                rows.append(i)
                count[label] = count.get(label, 0) + 1
        chosen.append(rows)
    return chosen


def _classification(data: ClassificationData, encode: Encode) -> Scored:
    """mteb's classification: for each draw of :func:`undersampled`, scikit-learn's
    ``LogisticRegression(max_iter=100)`` fit on the drawn texts' embeddings (float64, as mteb
    hands them) and its accuracy on the test texts. Time ``O(draws (L k D I + T L D))`` for L
    labels, k per label, I solver iterations and T test texts, after encoding ``O(T + draws L
    k)`` texts."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    draws = undersampled(data.train_labels)
    union = sorted(set().union(*draws))
    at = {row: i for i, row in enumerate(union)}
    train = np.asarray(encode(None, [data.train_texts[i] for i in union]), np.float64)
    test = np.asarray(encode(None, list(data.test_texts)), np.float64)
    correct = np.zeros(len(test))
    for rows in draws:
        fit = LogisticRegression(max_iter=100, random_state=MTEB_SEED)
        with warnings.catch_warnings():  # mteb's 100 iterations, whether or not lbfgs converged
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit.fit(train[[at[i] for i in rows]], np.asarray(data.train_labels)[rows])
        correct += fit.predict(test) == np.asarray(data.test_labels)
    share = (correct / len(draws)).astype(np.float32)
    return Scored((share,), None, float(np.mean(correct / len(draws))))


def _clustering(data: ClusteringData, encode: Encode) -> Scored:
    """mteb's clustering: ``CLUSTERINGS`` times, as many rows as there are texts drawn with
    replacement (Python's ``random.Random(seed).choices``, one generator across the draws),
    clustered by scikit-learn's ``MiniBatchKMeans`` (k-means++, one init, batch 512, k the
    number of labels) and scored by V-measure against the labels. Time ``O(CLUSTERINGS N k D
    I)`` for I k-means steps."""
    import random

    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics.cluster import v_measure_score
    emb = np.asarray(encode(None, list(data.texts)), np.float64)
    labels = np.asarray(data.labels)
    rng, n, values = random.Random(MTEB_SEED), len(labels), []
    kmeans = MiniBatchKMeans(n_clusters=np.unique(labels).size, batch_size=KMEANS_BATCH,
                             init="k-means++", n_init=1, random_state=MTEB_SEED)
    for _ in range(CLUSTERINGS):
        rows = rng.choices(range(n), k=n)
        values.append(float(v_measure_score(labels[rows], kmeans.fit_predict(emb[rows]))))
    return Scored.of_replicates(n, np.asarray(values))


FIELDS = ("task", "type", "run", "value", "low", "high", "difference", "diff_low", "diff_high",
          "p_value", "examples")


def _samples(s: Scored, bootstrap: int, seed: int) -> np.ndarray:
    """``[R]`` resampled scores of ``s`` (a task of parts: the mean of theirs, each part drawn
    with its own seed). Time ``O(R E)``."""
    import jax.numpy as jnp

    from repr_jax.eval import stats
    if s.replicates is not None:
        return s.replicates
    if s.parts:
        return np.mean([_samples(p, bootstrap, seed * 1009 + k) for k, p in enumerate(s.parts)],
                       axis=0)
    arrays = tuple(jnp.asarray(a) for a in s.arrays)
    return np.asarray(stats.resampled(s.statistic or jnp.mean, arrays, bootstrap, seed, 100))


def _paired(s: Scored, b: Scored, bootstrap: int, seed: int) -> np.ndarray:
    """``[R]`` resampled differences ``s - b`` on the same examples (parts: their mean)."""
    from repr_jax.eval import stats
    if len(s.parts) != len(b.parts) or len(s) != len(b):
        raise ValueError(f"scored {len(s)} and {len(b)} examples (in {len(s.parts)} and "
                         f"{len(b.parts)} parts); a paired comparison needs the same ones")
    if s.replicates is not None:
        return s.replicates - b.replicates
    if s.parts:
        return np.mean([_paired(p, q, bootstrap, seed * 1009 + k)
                        for k, (p, q) in enumerate(zip(s.parts, b.parts))], axis=0)
    return np.asarray(stats.paired_samples(s.arrays, b.arrays, s.statistic,
                                           num_resamples=bootstrap, seed=seed)[1])


def _summary(observed: float, diffs: np.ndarray, replicated: bool, level: float) -> dict:
    """The paired test of resampled differences; of a few replicates' (clustering): normal."""
    from repr_jax.eval import stats
    if replicated:
        return stats.normal_summary(observed, diffs, level)
    return stats.paired_summary(observed, diffs, level)


def _bounds(samples: np.ndarray, point: float, normal: bool, level: float) -> tuple[float, float]:
    from repr_jax.eval import stats
    if normal:
        return stats.normal_interval(samples, point, level)
    return stats.percentile_interval(samples, level)


def table(scores: dict[str, dict[str, Scored]], types: dict[str, str], *,
          bootstrap: int = 1000, level: float = 0.95) -> list[dict]:
    """Rows of the comparison: for each task (``types``: task -> type, in order) and run
    (``scores[run][task]``, the first run the baseline), the main score with its interval, and
    each other run's difference from the baseline's with its paired interval and p-value (the
    same queries, pairs or sentences resampled for both, as
    :func:`repr_jax.eval.stats.paired_bootstrap`). Then one row per type and run, ``task =
    "<type> (mean of n)"``: the mean of its tasks' scores, whose intervals average the tasks'
    resampled values (each task drawn on its own: another seed). Time ``O(R E)`` for R
    resamples over E examples in all."""
    runs = list(scores)
    base = runs[0]
    rows, per_type = [], {}
    for i, (name, kind) in enumerate(types.items()):
        for run in runs:
            s = scores[run][name]
            samples = _samples(s, bootstrap, i)
            lo, hi = _bounds(samples, s.value, s.normal, level)
            row = dict(task=name, type=kind, run=run, value=s.value, low=lo, high=hi,
                       difference=math.nan, diff_low=math.nan, diff_high=math.nan,
                       p_value=math.nan, examples=len(s))
            diff = None
            if run != base:
                diff = _paired(s, scores[base][name], bootstrap, i)
                t = _summary(s.value - scores[base][name].value, diff,
                             s.replicates is not None, level)
                row.update(difference=t["difference"], diff_low=t["low"], diff_high=t["high"],
                           p_value=t["p_value"])
            rows.append(row)
            per_type.setdefault((kind, run), []).append(
                (row, samples, diff, s.normal, s.replicates is not None))
    for (kind, run), parts in per_type.items():
        value = float(np.mean([r["value"] for r, *_ in parts]))
        normal, replicated = (any(p[k] for p in parts) for k in (3, 4))
        lo, hi = _bounds(np.mean([p[1] for p in parts], 0), value, normal, level)
        row = dict(task=f"{kind} (mean of {len(parts)})", type=kind, run=run, value=value,
                   low=lo, high=hi, difference=math.nan, diff_low=math.nan, diff_high=math.nan,
                   p_value=math.nan, examples=sum(r["examples"] for r, *_ in parts))
        if run != base:
            observed = float(np.mean([r["difference"] for r, *_ in parts]))
            t = _summary(observed, np.mean([p[2] for p in parts], 0), replicated, level)
            row.update(difference=t["difference"], diff_low=t["low"], diff_high=t["high"],
                       p_value=t["p_value"])
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict], bootstrap: int) -> str:
    """The table :func:`table` makes, as text: type averages first, then each task."""
    lines = [f"{'task':34s} {'run':24s} {'score [95%]':>25s} {'vs baseline [95% paired]':>28s} "
             f"{'p':>7s} {'n':>6s}"]
    floor = 1 / max(bootstrap, 1)
    means = [r for r in rows if r["task"].endswith(")")]
    for r in means + [r for r in rows if r not in means]:
        diff = p = ""
        if not math.isnan(r["difference"]):
            diff = f"{r['difference']:+.4f} [{r['diff_low']:+.4f}, {r['diff_high']:+.4f}]"
            p = f"<{floor:.0e}" if r["p_value"] < floor else f"{r['p_value']:.3f}"
        lines.append(f"{r['task'][:34]:34s} {Path(r['run']).name[:24]:24s} "
                     f"{r['value']:7.4f} [{r['low']:.4f}, {r['high']:.4f}] {diff:>28s} "
                     f"{p:>7s} {r['examples']:6d}")
    return "\n".join(lines)
