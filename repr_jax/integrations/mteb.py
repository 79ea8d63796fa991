"""A repr_jax run (or a local sentence-transformers model) as an mteb 2.x model, the offline
tasks of :mod:`repr_jax.integrations.mteb_tasks` as mteb tasks, and ``repr-jax mteb``.

mteb is an optional extra (``pip install -e ".[mteb]"``: it brings torch, which repr_jax itself
never imports); it is imported inside the functions here, after :func:`check_mteb`.

The model implements mteb's ``EncoderProtocol`` through
:func:`repr_jax.train.mine.encoders_of`: mteb's query prompt type goes to the run's query tower
with its query prefix (its instruction), the document type to the document tower with its
prefix, and a symmetric task (STS: no prompt type) to the run's representation with no prefix,
as the run's own similarity evaluation embeds. Batches are the project's ``Embedder``'s
(length-sorted, one compilation per shape) and embeddings are kept under ``OUT/embeddings``,
keyed by the model (path, checkpoint step, lengths) and the token ids, written verified: a
second ``repr-jax mteb`` on the same run encodes nothing again. The same embeddings give
repr_jax's own per-example scores (:func:`repr_jax.integrations.mteb_tasks.per_example`), which
pair the runs in the table and are checked against mteb's main score.

A colbert, splade or cross_encoder run is mteb's other kind of model, a ``SearchProtocol``
(``index`` a corpus, ``search`` it or reorder a reranking task's candidates), through
:class:`repr_jax.train.rankers.Ranker`: MaxSim, the inverted index or the pair scores of the
run's own evaluators. mteb gives such a model retrieval and reranking tasks only.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import math
import sys
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from repr_jax.integrations import mteb_tasks

SUPPORTED = ("2.0", "3.0")  # mteb >= 2.0, < 3.0: the encoder protocol and task classes used here
INSTALL = 'pip install -e ".[mteb]"'
AGREE = 1e-5  # |repr_jax's score - mteb's| above which the table flags the task


def check_mteb() -> str:
    """mteb's version, or a one-line ValueError: not installed, or outside :data:`SUPPORTED`."""
    try:
        version = importlib.metadata.version("mteb")
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"repr-jax mteb needs mteb {SUPPORTED[0]} up to (not including) "
                          f"{SUPPORTED[1]}: {INSTALL}") from None
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    low, high = (tuple(map(int, v.split("."))) for v in SUPPORTED)
    if not low <= parts < high:
        raise ValueError(f"mteb {version} is installed; repr_jax supports mteb >= {SUPPORTED[0]}, "
                          f"< {SUPPORTED[1]} (its encoder protocol changed): "
                          f"pip install 'mteb>={SUPPORTED[0]},<{SUPPORTED[1]}'")
    return version


def check_model(name: str) -> str:
    """``"run"`` or ``"pretrained"`` for a text bi-encoder run or a sentence-transformers folder
    (``minilm``), ``"ranker"`` for a colbert, splade or cross_encoder run (mteb's search
    protocol), from its files alone; anything else a one-line ValueError saying why."""
    from repr_jax.train.arms import check_arm
    from repr_jax.train.rankers import RANKING_METHODS, method_of
    if name == "bm25":
        raise ValueError("--workdir bm25: BM25 has no embeddings to hand mteb (mteb has its own: "
                         "mteb.get_model('mteb/baseline-bm25s')); give a repr_jax run or a "
                         "sentence-transformers folder")
    if (Path(name) / "config.json").is_file() and \
            not (Path(name) / "model.safetensors").is_file():
        try:
            method = method_of(name)
        except (OSError, ValueError):
            method = None  # check_arm says what is wrong with it
        if method in RANKING_METHODS:
            from repr_jax.train.mine import check_text_run
            check_text_run(name)
            return "ranker"
    return check_arm(name, label=f"--workdir {name}")


def check_pairing(name: str, method: str, tasks: Sequence[mteb_tasks.Task]) -> None:
    """A ranker (``method``: colbert, splade, cross_encoder) on a task it cannot do is a
    one-line ValueError: mteb gives a search model retrieval and reranking tasks only, and a
    cross-encoder only reorders a reranking task's candidates."""
    allowed = ("Reranking",) if method == "cross_encoder" else ("Retrieval", "Reranking")
    wrong = [t.name for t in tasks if t.type not in allowed]
    if wrong:
        what = ("reorders a first stage's candidates (it reads each query with each document)"
                if method == "cross_encoder" else "ranks documents, it embeds no text as one "
                                                  "vector")
        able = [t.name for t in mteb_tasks.TASKS.values() if t.type in allowed]
        raise ValueError(f"--workdir {name}: a {method} run {what}: it cannot do "
                         f"{', '.join(wrong)}; its tasks are {', '.join(able)}"
                         f"{' and beir:DIR' if 'Retrieval' in allowed else ''}")


def prompt_for(prompts: dict[str, str], name: str, kind: str, prompt_type: str | None
               ) -> str | None:
    """The instruction ``prompts`` give texts of ``prompt_type`` (``"query"``, ``"document"``
    or None) in task ``name`` of type ``kind``, most specific first as mteb's own models choose:
    ``"<task>-<prompt type>"``, ``"<task>"``, ``"<type>-<prompt type>"``, ``"<type>"``,
    ``"<prompt type>"``; None (the run's own prefix) where none is given.

    >>> prompt_for({"STS": "a: ", "Retrieval-query": "q: "}, "LeeSTS", "STS", None)
    'a: '
    >>> prompt_for({"STS": "a: ", "Retrieval-query": "q: "}, "X", "Retrieval", "document") is None
    True
    """
    typed = prompt_type is not None
    keys = [f"{name}-{prompt_type}"] * typed + [name] + [f"{kind}-{prompt_type}"] * typed + \
        [kind] + [prompt_type] * typed
    return next((prompts[k] for k in keys if k in prompts), None)


def read_prompts(path: str | Path | None) -> dict[str, str]:
    """``--prompts FILE.json``: an object of instruction strings keyed as :func:`prompt_for`
    reads them; a file that is not one is a one-line ValueError."""
    if not path:
        return {}
    from repr_jax import files
    value = files.read_json(path)
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise ValueError(f"--prompts {path}: expected a JSON object of strings, e.g. "
                         f'{{"Retrieval-query": "Instruct: find the word\\nQuery: ", '
                         f'"STS": "..."}}')
    return value


@functools.cache
def _model_class():
    from mteb.models.abs_encoder import AbsEncoder

    class ReprJaxModel(AbsEncoder):
        """A repr_jax run in mteb (see the module docstring)."""

        def __init__(self, encoders, meta, prompts: dict[str, str]):
            self.encoders, self.mteb_model_meta, self.prompts = encoders, meta, prompts

        def texts(self, prompt_type: str | None, texts: Sequence[str],
                  prefix: str | None = None) -> np.ndarray:
            """``[n, D]`` float32, each distinct text encoded once (an STS or pair task
            repeats its texts: Lee's 2,450 are 50), L2-normalised where the model's output is
            (a Normalize module; a run compared by cosine): what k-means and a classifier see."""
            fn = {"query": self.encoders.query, "document": self.encoders.document}.get(
                prompt_type, self.encoders.plain)
            distinct = list(dict.fromkeys(texts))
            row = {t: i for i, t in enumerate(distinct)}
            out = np.asarray(fn(distinct, prefix), np.float32)
            if self.encoders.normalized:
                out = out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
            return out[np.asarray([row[t] for t in texts], np.int64)]

        def for_task(self, name: str, kind: str):
            """``encode(prompt_type, texts)`` for task ``name`` of type ``kind``: its
            instruction (:func:`prompt_for`) before each text."""
            def encode(prompt_type, texts):
                return self.texts(prompt_type, texts,
                                  prompt_for(self.prompts, name, kind, prompt_type))
            return encode

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None,
                   **kwargs) -> np.ndarray:
            texts = [t for batch in inputs for t in batch["text"]]
            kind = getattr(prompt_type, "value", prompt_type)
            embed = self.for_task(task_metadata.name, task_metadata.type)
            # widened: mteb's similarities then carry no float32 rounding that ours lack
            return embed(kind, texts).astype(np.float64)

        def scored(self, task: mteb_tasks.Task, data) -> mteb_tasks.Scored:
            """repr_jax's per-example scores of ``task`` from the same embeddings."""
            return mteb_tasks.per_example(data, self.for_task(task.name, task.type))

    return ReprJaxModel


MTEB_TOP_K = 1000  # what mteb's retrieval tasks ask a search for (their largest cut-off)


@functools.cache
def _search_class():
    class ReprJaxSearch:
        """A colbert, splade or cross_encoder run in mteb: its ``SearchProtocol`` (``index``,
        ``search``), through :class:`repr_jax.train.rankers.Ranker`; each search's scores kept
        for the per-example scores of the same task, which are repr_jax's from them."""

        def __init__(self, ranker, meta):
            self.ranker, self.mteb_model_meta = ranker, meta
            self.corpus: tuple[list[str], list[str]] | None = None
            self.memo: dict[str, np.ndarray | tuple] = {}

        def _kept(self, parts, compute):
            h = hashlib.blake2b(digest_size=16)
            for p in parts:
                h.update(p.tobytes() if isinstance(p, np.ndarray) else
                         "\0".join(p).encode() if isinstance(p, list) else str(p).encode())
                h.update(b"\1")
            key = h.hexdigest()
            if key not in self.memo:
                self.memo[key] = compute()
            return self.memo[key]

        def top(self, queries: list[str], corpus: list[str], k: int):
            if self.ranker.search is None:
                raise ValueError("a cross_encoder run reorders a reranking task's candidates; "
                                 "it cannot search a whole corpus")
            return self._kept(("top", queries, corpus, k),
                              lambda: self.ranker.search(queries, corpus, k))

        def pairs(self, queries: list[str], corpus: list[str], q_of, d_of) -> np.ndarray:
            q_of, d_of = np.asarray(q_of, np.int64), np.asarray(d_of, np.int64)
            return self._kept(("pairs", queries, corpus, q_of, d_of),
                              lambda: self.ranker.pairs(queries, corpus, q_of, d_of))

        def index(self, corpus, *, task_metadata, hf_split, hf_subset, encode_kwargs,
                  num_proc=None, **kwargs) -> None:
            titles = corpus["title"] if "title" in corpus.column_names else None
            texts = [(f"{titles[i]} {t}".strip() if titles and titles[i] else t)
                     for i, t in enumerate(corpus["text"])]  # as mteb joins a title
            self.corpus = (list(corpus["id"]), texts)

        def search(self, queries, *, task_metadata, hf_split, hf_subset, top_k, encode_kwargs,
                   top_ranked=None, num_proc=None, **kwargs) -> dict[str, dict[str, float]]:
            if self.corpus is None:
                raise ValueError("search before index: mteb indexes the corpus first")
            doc_ids, docs = self.corpus
            q_ids, texts = list(queries["id"]), list(queries["text"])
            out: dict[str, dict[str, float]] = {}
            if top_ranked is None:
                scores, ids = self.top(texts, docs, top_k)
                for qid, srow, irow in zip(q_ids, np.asarray(scores).tolist(),
                                           np.asarray(ids).tolist()):
                    out[qid] = {doc_ids[j]: s for s, j in zip(srow, irow)}
                return out
            at = {d: j for j, d in enumerate(doc_ids)}
            q_of, d_of = [], []
            for i, qid in enumerate(q_ids):
                for d in top_ranked.get(qid, ()):
                    q_of.append(i)
                    d_of.append(at[d])
            scores = self.pairs(texts, docs, q_of, d_of)
            for i, j, s in zip(q_of, d_of, scores.tolist()):
                out.setdefault(q_ids[i], {})[doc_ids[j]] = s
            return out

        def scored(self, task: mteb_tasks.Task, data) -> mteb_tasks.Scored:
            """repr_jax's per-query nDCG@10 from the same scores mteb was handed."""
            queries, corpus = list(data.queries), list(data.corpus)
            if data.candidates is None:
                scores, ids = self.top(queries, corpus, MTEB_TOP_K)
                return mteb_tasks.ranked(data, scores, ids)
            cand = np.asarray(data.candidates, np.int64)
            q_of = np.repeat(np.arange(cand.shape[0]), cand.shape[1])
            scores = self.pairs(queries, corpus, q_of, cand.reshape(-1))
            return mteb_tasks.ranked(data, scores.reshape(cand.shape), cand)

    return ReprJaxSearch


def model(name: str, *, cache_dir: str | Path | None = None, batch_size: int = 128,
          progress: bool = True, prompts: dict[str, str] | None = None):
    """The mteb model of run directory or sentence-transformers folder ``name``; ``prompts``:
    instructions per task, type or prompt type (:func:`prompt_for`) instead of the run's."""
    check_mteb()
    from mteb.models.model_meta import ModelMeta

    from repr_jax.train.mine import encoders_of
    kind = check_model(name)
    label = Path(name).name
    if kind == "ranker":
        from repr_jax.train.rankers import ranker_of
        encoders = ranker_of(name, batch_size=batch_size, cache_dir=cache_dir,
                             progress=label if progress else False)
        if prompts:
            print(f"repr-jax mteb: --prompts not used for {name}: a {encoders.method} run reads "
                  f"with its own prefixes", file=sys.stderr)
    else:
        where = dict(init_from=name) if kind == "pretrained" else dict(workdir=name)
        encoders = encoders_of(**where, batch_size=batch_size, cache_dir=cache_dir,
                               progress=f"{label}: encoding" if progress else False)
    revision = hashlib.blake2b(encoders.identity.encode(), digest_size=6).hexdigest()
    meta = ModelMeta(
        loader=None, name=f"repr_jax/{label}", revision=revision, release_date=None,
        languages=None, n_parameters=encoders.parameters or None, memory_usage_mb=None,
        max_tokens=encoders.max_tokens or None, embed_dim=None, license=None,
        open_weights=True, public_training_code=None,
        public_training_data=None, framework=["JAX"],
        similarity_fn_name=None if kind == "ranker" else "cosine",
        use_instructions=bool(encoders.instructed or (prompts and kind != "ranker")),
        training_datasets=None, reference=None)
    if kind == "ranker":
        return _search_class()(encoders, meta)
    return _model_class()(encoders, meta, dict(prompts or {}))


def mteb_task(task: mteb_tasks.Task, data):
    """``task`` as an mteb task object holding ``data`` (its test split, subset ``default``)."""
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.classification import AbsTaskClassification
    from mteb.abstasks.clustering import AbsTaskClustering
    from mteb.abstasks.pair_classification import AbsTaskPairClassification
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata
    from mteb.abstasks.text.bitext_mining import AbsTaskBitextMining
    bitext = isinstance(data, mteb_tasks.BitextData)
    meta = TaskMetadata(
        name=task.name, type=task.type, main_score=task.main_score, description=task.description,
        reference=None, dataset={"path": f"repr_jax/{task.name}", "revision": "local"},
        category="t2t", eval_splits=["test"],
        eval_langs=data.languages if bitext else ["eng-Latn"], date=None, dialect=[],
        domains=[], task_subtypes=[], license=None, annotations_creators=None,
        modalities=["text"], sample_creation=None, bibtex_citation="")
    if bitext:
        subsets = DatasetDict({name: DatasetDict({"test": Dataset.from_dict(
            {"sentence1": english, "sentence2": translated})})
            for name, (english, translated) in data.subsets.items()})

        def load_bitext(self, num_proc=None, **kwargs):
            self.dataset, self.data_loaded = subsets, True
        return type(task.name, (AbsTaskBitextMining,), dict(metadata=meta,
                                                            load_data=load_bitext))()
    if isinstance(data, mteb_tasks.ClassificationData):
        labelled = DatasetDict({split: Dataset.from_dict(
            {"text": list(texts), "label": [int(x) for x in labels]}) for split, texts, labels in
            (("train", data.train_texts, data.train_labels),
             ("test", data.test_texts, data.test_labels))})

        def load_labelled(self, num_proc=None, **kwargs):
            self.dataset, self.data_loaded = labelled, True
        return type(task.name, (AbsTaskClassification,), dict(
            metadata=meta, samples_per_label=mteb_tasks.SAMPLES_PER_LABEL,
            n_experiments=mteb_tasks.CLASSIFIER_DRAWS, load_data=load_labelled))()
    if isinstance(data, mteb_tasks.ClusteringData):
        clusters = DatasetDict({"test": Dataset.from_dict(
            {"sentences": list(data.texts), "labels": [int(x) for x in data.labels]})})

        def load_clusters(self, num_proc=None, **kwargs):
            self.dataset, self.data_loaded = clusters, True
        # every text embedded (not mteb's default 4%), each clustering a resample of all of them
        return type(task.name, (AbsTaskClustering,), dict(
            metadata=meta, max_fraction_of_documents_to_embed=None,
            max_documents_per_cluster=len(data.texts), n_clusters=mteb_tasks.CLUSTERINGS,
            k_mean_batch_size=mteb_tasks.KMEANS_BATCH, load_data=load_clusters))()
    if isinstance(data, mteb_tasks.PairData):
        pairs = DatasetDict({"test": Dataset.from_dict(
            {"sentence1": data.first, "sentence2": data.second,
             "labels": [int(x) for x in data.labels]})})

        def load_pairs(self, num_proc=None, **kwargs):
            self.dataset, self.data_loaded = pairs, True
        return type(task.name, (AbsTaskPairClassification,), dict(metadata=meta,
                                                                  load_data=load_pairs))()
    if isinstance(data, mteb_tasks.STSData):
        split = Dataset.from_dict({"sentence1": [data.texts[i] for i in data.pairs[:, 0]],
                                   "sentence2": [data.texts[j] for j in data.pairs[:, 1]],
                                   "score": [float(g) for g in data.gold]})

        def load_sts(self, num_proc=None, **kwargs):
            self.dataset, self.data_loaded = DatasetDict({"test": split}), True
        cls = type(task.name, (AbsTaskSTS,), dict(
            metadata=meta, min_score=data.min_score, max_score=data.max_score,
            load_data=load_sts))
        return cls()
    q, d, g = data.judged
    relevant: dict[str, dict[str, int]] = {}
    for qi, di, gi in zip(q.tolist(), d.tolist(), g.tolist()):
        relevant.setdefault(data.query_ids[qi], {})[data.doc_ids[di]] = int(gi)

    top_ranked = None if data.candidates is None else {
        data.query_ids[i]: [data.doc_ids[j] for j in row]
        for i, row in enumerate(np.asarray(data.candidates).tolist())}

    def load_retrieval(self, num_proc=None, **kwargs):
        self.dataset = {"default": {"test": RetrievalSplitData(
            queries=Dataset.from_dict({"id": data.query_ids, "text": data.queries}),
            corpus=Dataset.from_dict({"id": data.doc_ids, "text": data.corpus,
                                      "title": [""] * len(data.corpus)}),
            relevant_docs=relevant, top_ranked=top_ranked)}}
        self.data_loaded = True
    cls = type(task.name, (AbsTaskRetrieval,), dict(
        metadata=meta, ignore_identical_ids=True, load_data=load_retrieval))
    return cls()


def prepare(names: Sequence[str], task_names: Sequence[str] | str, out: str | Path):
    """``(tasks, {task: data}, out)`` once every name, model, the output folder and each task's
    data check out (no mteb needed); else a one-line ValueError naming what is wrong."""
    from repr_jax import files
    tasks = mteb_tasks.tasks(task_names)
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if list(names).count(n) > 1})
        raise ValueError(f"--workdir names {', '.join(twice)} more than once; give each model "
                         f"once (the first is the baseline)")
    for name in names:
        if check_model(name) == "ranker":
            from repr_jax.train.rankers import method_of
            check_pairing(name, method_of(name), tasks)
    out = files.check_output(out, flag="--out", inputs=names, folder=True)
    data = {}
    for t in tasks:
        try:
            data[t.name] = t.load()
        except (OSError, ValueError) as e:
            raise ValueError(f"task {t.name}: its data is missing or unreadable: "
                             f"{files.first_line(e)}") from None
    return tasks, data, out


def run(names: Sequence[str], task_names: Sequence[str] | str, out: str | Path, *,
        bootstrap: int = 1000, batch_size: int = 128, progress: bool = True,
        prompts: dict[str, str] | None = None) -> list[dict]:
    """Every model of ``names`` on every task through mteb (its result files under
    ``out/results``), then the paired table (:func:`repr_jax.integrations.mteb_tasks.table`)
    with mteb's main score beside repr_jax's, written to ``out/table.csv`` and ``.json``.
    Everything is checked before any model is loaded: mteb's version, the task names, each
    model's files and each task's data."""
    check_mteb()
    import mteb
    from mteb.cache import ResultCache

    from repr_jax import files
    tasks, data, out = prepare(names, task_names, out)
    scores, mteb_scores = {}, {}
    for name in names:
        m = model(name, cache_dir=out / "embeddings", batch_size=batch_size, progress=progress,
                  prompts=prompts)
        with warnings.catch_warnings():  # mteb's bitext evaluator copies tensors: harmless
            warnings.filterwarnings("ignore", message="To copy construct from a tensor")
            # its macro recall over a label the test split lacks (classification): reported 0
            warnings.filterwarnings("ignore", message="Recall is ill-defined")
            # mteb writes its files in place: into a scratch folder, then each moved atomically
            with files.scratch_folder(out, prefix=".mteb_results_",
                                      what="unfinished mteb result files") as tmp:
                result = mteb.evaluate(m, [mteb_task(t, data[t.name]) for t in tasks],
                                       cache=ResultCache(tmp), overwrite_strategy="always",
                                       show_progress_bar=progress)
                for f in sorted(p for p in Path(tmp).rglob("*") if p.is_file()):
                    files.write_bytes(out / f.relative_to(tmp), f.read_bytes())
        mteb_scores[name] = {r.task_name: float(r.get_score()) for r in result.task_results}
        scores[name] = {t.name: m.scored(t, data[t.name]) for t in tasks}
    rows = mteb_tasks.table(scores, {t.name: t.type for t in tasks}, bootstrap=bootstrap)
    for r in rows:
        r["mteb"] = mteb_scores[r["run"]].get(r["task"], math.nan)
    _write(out, rows)
    return rows


def _write(out: Path, rows: list[dict]) -> None:
    import csv
    import io

    from repr_jax import files
    fields = list(mteb_tasks.FIELDS) + ["mteb"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    files.write_text(out / "table.csv", buf.getvalue())
    files.write_json(out / "table.json", rows)


def disagreements(rows: Sequence[dict], tol: float = AGREE) -> list[str]:
    """One line per task whose repr_jax score and mteb's differ by more than ``tol``."""
    return [f"{r['task']} ({Path(r['run']).name}): repr_jax {r['value']:.6f}, mteb "
            f"{r['mteb']:.6f}" for r in rows
            if not math.isnan(r.get("mteb", math.nan)) and abs(r["value"] - r["mteb"]) > tol]


def main(args) -> int:
    """``repr-jax mteb``: ``--list``, or the runs on the tasks (see :func:`run`)."""
    if args.list:
        print("\n".join(mteb_tasks.listing()))
        return 0
    if not args.workdir:
        raise ValueError("give --workdir RUN [RUN ...] (or --list for the tasks)")
    if not args.out:
        raise ValueError("give --out DIR: where mteb's result files and the table go")
    rows = run(args.workdir, args.tasks or "", args.out, bootstrap=args.bootstrap,
               batch_size=args.batch_size, progress=not args.no_progress,
               prompts=read_prompts(args.prompts))
    print(f"baseline: {args.workdir[0]} (each task's queries or pairs resampled together)")
    print(mteb_tasks.format_table(rows, args.bootstrap))
    for line in disagreements(rows):
        print(f"warning: repr_jax's score and mteb's differ: {line}", file=sys.stderr)
    print(f"-> {args.out}/table.csv, {args.out}/results (mteb's files)", file=sys.stderr)
    return 0
