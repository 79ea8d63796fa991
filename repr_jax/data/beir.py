"""BEIR-format retrieval collections (Thakur et al. 2021): ``beir:DIR`` for training and
``eval.sets=("beir:DIR",)`` for evaluation.

``DIR`` holds ``corpus.jsonl`` (``{"_id", "title", "text"}`` a line), ``queries.jsonl``
(``{"_id", "text"}``) and ``qrels/{train,dev,test}.tsv`` (``query-id, corpus-id, score``, tab
separated, a header line). A document is encoded as ``title + " " + text`` (BEIR's convention).
Evaluation takes the queries of ``qrels/test.tsv`` (else ``dev.tsv``), leaves a query's own id out
of its results when it is also a document id (BEIR's ``ignore_identical_ids``), keeps the qrels
**sparse** (:class:`~repr_jax.eval.retrieval.SparseQrels`) and the tokenised corpus on disk (one
``.npy`` under the data dir, memory-mapped), so a million-document corpus costs its embeddings and
a search tile. Missing files, malformed lines, duplicate ids and qrels naming unknown ids are
one-line errors; so is an empty or blank query, or document (title and text both: a title alone
is a document), named ``FILE:LINE: 'text' is empty`` as ``pairs:`` names one. A file read
through a symbolic link has its values left out of errors (the file and line are named).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from repr_jax import files

FILES = ("corpus.jsonl", "queries.jsonl")
QREL_SPLITS = ("train", "dev", "test")


def check_layout(root: str | Path, *, need_train: bool = False) -> Path:
    """The collection's folder; a missing folder or file is a one-line ValueError."""
    if not str(root).strip():
        raise ValueError("beir: needs a folder after the colon, e.g. beir:/path/to/collection")
    root = Path(root).expanduser().absolute()
    layout = ("a BEIR collection holds corpus.jsonl, queries.jsonl and qrels/{train,dev,test}.tsv")
    problem = files.not_readable(root, folder=True)
    if problem:
        raise ValueError(f"beir:{root}: {problem}")
    qrels = [f"qrels/{s}.tsv" for s in QREL_SPLITS]
    for f in (*FILES, *qrels):  # a FIFO, a device or a broken link: named, never skipped
        if (root / f).is_symlink() or (root / f).exists():
            problem = files.not_readable(root / f)
            if problem:
                raise ValueError(f"beir:{root}: {f}: {problem}")
        elif f in FILES:
            raise ValueError(f"beir:{root}: no {f} ({layout})")
    splits = [s for s in QREL_SPLITS if (root / "qrels" / f"{s}.tsv").is_file()]
    if not splits:
        raise ValueError(f"beir:{root}: no qrels/*.tsv ({layout})")
    if need_train and "train" not in splits:
        raise ValueError(f"beir:{root}: no qrels/train.tsv to train on (it has "
                         f"{', '.join(f'qrels/{s}.tsv' for s in splits)}); evaluate on it with "
                         f"eval.sets=('beir:{root}',) and train on other data")
    return root


def _linked(path: Path) -> str:
    """``""``, or when ``path`` (or its folder) is a symbolic link, what stands in a message for
    a value read from it: the file's contents are not echoed (a link may lead to any file)."""
    link = next((p for p in (path, path.parent) if p.is_symlink()), None)
    return "" if link is None else (f"(not shown: {link} is a symbolic link to "
                                    f"{os.readlink(link)})")


def _read_jsonl(path: Path, fields: tuple[str, ...]
                ) -> tuple[list[str], list[dict], list[int]]:
    """``(ids, rows, line numbers)`` of a corpus or queries file."""
    ids, rows, lines, first = [], [], [], {}
    hidden = _linked(path)
    for number, line in files.text_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        row = files.json_object(line, where)
        if "_id" not in row:
            raise ValueError(f"{where}: no '_id' field (it has {hidden or sorted(row)}; a line "
                             f"is {{{', '.join(repr(k) for k in ('_id',) + fields)}}})")
        key = files.check_text(str(row["_id"]), where, "_id")
        if key in first:
            raise ValueError(f"{where}: duplicate _id {hidden or repr(key)} (first at line "
                             f"{first[key]})")
        first[key] = number
        ids.append(key)
        rows.append(row)
        lines.append(number)
    if not ids:
        raise ValueError(f"{path}: no lines")
    return ids, rows, lines


def _read_qrels(path: Path, queries: dict[str, int], docs: dict[str, int]
                ) -> dict[str, np.ndarray]:
    """A qrels file's judgements as parallel arrays. Read through a symbolic link, its values
    are not echoed in errors (the file and line are named)."""
    q, d, g = [], [], []
    seen: dict[tuple[int, int], int] = {}
    first = True
    hidden = _linked(path)

    def shown(text: str) -> str:
        return hidden or repr(text)

    for number, line in files.text_lines(path):
        fields = line.rstrip("\n\r").split("\t")
        if not line.strip():
            continue
        where = f"{path}:{number}"
        if len(fields) != 3:
            raise ValueError(f"{where}: expected 3 tab-separated fields (query-id, corpus-id, "
                             f"score), got {len(fields)}")
        header, first = first and not _is_number(fields[2]), False
        if header:
            continue  # the first line is a header when its score is not a number
        grade = _grade(fields[2], where, shown)
        if fields[0] not in queries:
            raise ValueError(f"{where}: query-id {shown(fields[0])} is not in queries.jsonl")
        if fields[1] not in docs:
            raise ValueError(f"{where}: corpus-id {shown(fields[1])} is not in corpus.jsonl")
        pair = (queries[fields[0]], docs[fields[1]])
        if pair in seen:
            what = hidden or f"({fields[0]}, {fields[1]})"
            raise ValueError(f"{where}: duplicate judgement of {what} (first at line "
                             f"{seen[pair]})")
        seen[pair] = number
        q.append(pair[0])
        d.append(pair[1])
        g.append(grade)
    if not q:
        raise ValueError(f"{path}: no judgements")
    return {"query": np.asarray(q, np.int64), "doc": np.asarray(d, np.int64),
            "grade": np.asarray(g, np.int32)}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _grade(text: str, where: str, shown=repr) -> int:
    """A relevance grade: an integer, written ``2`` or ``2.0`` (TREC allows negative grades for
    junk; they count as not relevant). ``shown``: how the text is echoed."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: score {shown(text)} is not a number") from None
    if not value.is_integer():
        raise ValueError(f"{where}: score {shown(text)} is not a whole number (grades are "
                         f"integers such as 0, 1, 2; TREC's junk grades are -1, -2)")
    return int(value)


@dataclasses.dataclass
class Collection:
    """A BEIR collection read into memory: ids and texts, and each qrels split as parallel
    arrays of query index, document index and grade."""
    root: Path
    doc_ids: list[str]
    doc_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, np.ndarray]]

    @property
    def test_split(self) -> str:
        for s in ("test", "dev"):
            if s in self.qrels:
                return s
        raise ValueError(f"beir:{self.root}: no qrels/test.tsv or qrels/dev.tsv to evaluate on")

    def pairs(self, split: str, *, best: bool = False) -> Iterator[tuple[str, str, str, list]]:
        """``(where, query, relevant document, [])`` for every judgement with grade >= 1 of
        ``split`` (``best``: one per query, its highest grade, the first listed among equals)."""
        r = self.qrels[split]
        keep = np.flatnonzero(r["grade"] >= 1)
        if best:
            order = np.lexsort((keep, -r["grade"][keep], r["query"][keep]))
            keep = keep[order]
            _, first = np.unique(r["query"][keep], return_index=True)
            keep = np.sort(keep[first])
        for i in keep:
            yield (f"{self.root}/qrels/{split}.tsv: judgement {i + 1}",
                   self.query_texts[r["query"][i]], self.doc_texts[r["doc"][i]], [])


def read_collection(root: str | Path) -> Collection:
    """Reads and checks a BEIR collection (see the module docstring). Time and memory
    ``O(N + Q + J)`` in documents, queries and judgements (the texts are held)."""
    root = check_layout(root)
    doc_ids, docs, doc_lines = _read_jsonl(root / "corpus.jsonl", ("title", "text"))
    query_ids, queries, query_lines = _read_jsonl(root / "queries.jsonl", ("text",))

    def texts(path: Path, rows: list[dict], lines: list[int], title: bool) -> list[str]:
        """Each query's text, or document's ``title + " " + text`` (a title alone is a
        document); an empty or blank one is refused as ``pairs:`` refuses it (``FILE:LINE:
        'text' is empty``)."""
        out = []
        for row, number in zip(rows, lines):
            where = f"{path}:{number}"
            head = (row.get("title") or "") if title else ""
            body = row.get("text", "")
            for field, value in (("text", body), ("title", head)):
                if not isinstance(value, str):
                    raise ValueError(f"{where}: {field!r} must be a string, got "
                                     f"{type(value).__name__}")
                files.check_text(value, where, field)
            out.append(f"{head} {body}" if head else body)
            if not out[-1].strip():
                if "text" not in row:
                    raise ValueError(f"{where}: no 'text' field (it has "
                                     f"{_linked(path) or sorted(row)})")
                files.nonempty_text(body, where, "text")
        return out

    doc_texts = texts(root / "corpus.jsonl", docs, doc_lines, True)
    query_texts = texts(root / "queries.jsonl", queries, query_lines, False)
    qindex = {k: i for i, k in enumerate(query_ids)}
    dindex = {k: i for i, k in enumerate(doc_ids)}
    qrels = {s: _read_qrels(root / "qrels" / f"{s}.tsv", qindex, dindex)
             for s in QREL_SPLITS if (root / "qrels" / f"{s}.tsv").is_file()}
    return Collection(root, doc_ids, doc_texts, query_ids, query_texts, qrels)


# --------------------------------------------------------------------------------------------------
# Evaluation set
# --------------------------------------------------------------------------------------------------

def tokenized(texts: list[str], path: Path, tokenizer: str, sides, side: str, *,
              cuts=None) -> np.ndarray:
    """``[N, T]`` token ids of ``texts`` read as ``side`` (``query`` or ``doc``, at that side's
    length and prefix: a :class:`~repr_jax.data.tokenizer.Sides`), kept at ``path``
    (memory-mapped); made once, in
    chunks with a progress bar, written atomically with its digest; a file that no longer matches
    its digest (damaged, replaced) is named and made again. Time ``O(N T)`` once, then ``O(N T)``
    reading the file to check it; memory ``O(N T)`` while made, then a memory map. ``cuts``
    (a :class:`~repr_jax.data.tokenizer.Cuts`) counts the texts cut when they are tokenised."""
    if path.exists():
        why = files.verified(path, read=False)[1]
        try:
            ids = None if why else np.load(path, mmap_mode="r")
        except (OSError, ValueError) as e:
            why = f"unreadable ({type(e).__name__})"
        if ids is not None and ids.shape == (len(texts), sides.length(side)):
            return ids
        if why:
            import warnings
            warnings.warn(f"{path}: cached token ids not used ({why}); tokenising again",
                          stacklevel=2)
    from tqdm.auto import tqdm

    from repr_jax.data.tokenizer import make_tokenizer
    tok = make_tokenizer(tokenizer)
    out = np.zeros((len(texts), sides.length(side)), np.int32)
    step, what = 4096, "queries" if side == "query" else "corpus"
    for start in tqdm(range(0, len(texts), step), desc=f"beir: tokenising {what}", unit="chunk",
                      leave=False, dynamic_ncols=True, disable=len(texts) <= step):
        out[start:start + step] = sides.encode(tok, texts[start:start + step], side,
                                               cuts=cuts)
    buffer = io.BytesIO()
    np.save(buffer, out)
    files.write_verified(path, buffer.getvalue())
    return np.load(path, mmap_mode="r")


# --------------------------------------------------------------------------------------------------
# Writing collections
# --------------------------------------------------------------------------------------------------

def write_collection(root: str | Path, corpus: dict[str, tuple[str, str]],
                     queries: dict[str, str],
                     qrels: dict[str, list[tuple[str, str, int]]]) -> Path:
    """Writes a BEIR collection: ``corpus {id: (title, text)}``, ``queries {id: text}``,
    ``qrels {split: [(query id, doc id, grade)]}``; each file atomically."""
    root = Path(root)
    files.write_text(root / "corpus.jsonl", "".join(
        json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in corpus.items()))
    files.write_text(root / "queries.jsonl", "".join(
        json.dumps({"_id": k, "text": x}) + "\n" for k, x in queries.items()))
    for split, rows in qrels.items():
        files.write_text(root / "qrels" / f"{split}.tsv", "query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{d}\t{g}\n" for q, d, g in rows))
    return root


def synthetic_collection(root: str | Path, *, num_docs: int = 1000, num_queries: int = 100,
                         num_train: int = 0, topics: int = 20, vocab: int = 2000,
                         seed: int = 0) -> Path:
    """A generated BEIR collection with known relevance: documents of 8-24 words, each word from
    the document's topic (a sixth of the time) or a Zipfian background; query ``i`` is 5 words of
    its source document plus 2 background words. Grades: 2 for the source document, 1 for two
    other documents of its topic. ``num_train`` more queries make ``qrels/train.tsv``."""
    rng = np.random.default_rng(seed)
    words = np.asarray([f"w{i}" for i in range(vocab)])
    per_topic = vocab // topics
    topical = rng.permutation(vocab)[:per_topic * topics].reshape(topics, per_topic)
    zipf = 1.0 / np.arange(1, vocab + 1)
    zipf /= zipf.sum()
    doc_topic = rng.integers(0, topics, num_docs)
    lengths = rng.integers(8, 25, num_docs)
    docs = []
    for t, n in zip(doc_topic, lengths):
        from_topic = rng.random(n) < 1 / 6
        docs.append(np.where(from_topic, rng.choice(topical[t], n), rng.choice(vocab, n, p=zipf)))
    by_topic = [np.flatnonzero(doc_topic == t) for t in range(topics)]
    corpus = {f"d{i}": (f"topic {doc_topic[i]}" if i % 2 else "", " ".join(words[d]))
              for i, d in enumerate(docs)}
    queries, qrels = {}, {"test": [], "train": []}
    for j in range(num_queries + num_train):
        src = int(rng.integers(num_docs))
        text = np.concatenate([rng.choice(docs[src], 5), rng.choice(vocab, 2, p=zipf)])
        qid = f"q{j}"
        queries[qid] = " ".join(words[text])
        split = "test" if j < num_queries else "train"
        qrels[split].append((qid, f"d{src}", 2))
        others = by_topic[doc_topic[src]]
        for o in rng.choice(others[others != src], min(2, len(others) - 1), replace=False):
            qrels[split].append((qid, f"d{o}", 1))
    if not num_train:
        del qrels["train"]
    return write_collection(root, corpus, queries, qrels)
