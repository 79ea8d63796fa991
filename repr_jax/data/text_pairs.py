"""A user's text pairs as a TFDS dataset: ``data.name=pairs:FILE.jsonl`` or ``data.name=beir:DIR``.

``pairs:FILE.jsonl`` holds one training example a line::

    {"query": "what is a bank", "positive": "a financial institution ...", "negatives": ["..."]}

``negatives`` is optional; sentence-transformers' column names are read too (``anchor`` for
``query``; ``negative`` (a string or a list) or ``negative_1``, ``negative_2``, ... for
``negatives``). A teacher's scores (``repr-jax score``, ``repr-jax mine``) ride along as
``positive_score`` and ``negative_scores`` (one per negative), or as sentence-transformers'
n-tuple ``scores`` (``[positive, negative_1, ...]``); with ``scores=True`` (a distillation
objective) every line must carry them, and each example gains ``scores [1 + K]`` (float32, the
positive's first, repeated like the negatives). ``beir:DIR`` trains on the (query, relevant document) pairs of a BEIR collection's
``qrels/train.tsv`` (see :mod:`repr_jax.data.beir`).

Text is tokenised **at preparation** (once, with a progress bar) and stored as int32 token ids in
array_record files under the data dir — one prepared copy per file version (path, size and
modification time), tokenizer, length and negatives count — so a split larger than
``data.in_memory_mb`` is streamed like any other: a batch reads its rows only. Each example is
``x`` (the query's ids ``[T]``), ``x_pos`` (the positive's) and, when ``negatives`` > 0,
``negatives [K, T]``: a line's first K negatives, repeated in order when it has fewer. The test
split is a fixed 5% of the queries (by a hash of the query text, so a query's lines stay together);
``beir:DIR`` tests on ``qrels/test.tsv`` (else ``dev.tsv``), each query with its best-graded
document. ``label`` is 0 everywhere: pairs have no classes. Preparing says once how many texts of
each side it cut at their length (``prepared pairs:FILE: 1,234 queries (2 cut at 32 tokens,
0.2%), 1,234 documents (214 cut at 32 tokens, 17.3%)``; a line's negatives count once each) and
records it in the prepared copy's ``metadata.json`` (:func:`cut_counts`). An empty or blank
query or document is refused (``FILE:LINE: 'query' is empty``), as in ``beir:``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
import tensorflow_datasets as tfds

from repr_jax import files
from repr_jax.config import config
from repr_jax.data.prepare import Format, prepared
from repr_jax.data.tokenizer import Cuts, Sides, TextData

PAIRS, BEIR = "pairs:", "beir:"
TEST_FRACTION = 0.05
CHUNK = 4096  # lines tokenised together
_NEGATIVE_N = re.compile(r"negative_(\d+)$")


class TextPairsConfig(tfds.core.BuilderConfig):
    def __init__(self, *, source: str = "", tokenizer: str = "", sides: Sides = Sides(),
                 negatives: int = 0, scores: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.source, self.tokenizer = source, tokenizer
        self.sides, self.negatives, self.scores = sides, negatives, scores


@config
class TextPairsData(TextData):
    """``data.name=pairs:FILE.jsonl`` or ``beir:DIR``: a user's text pairs, tokenised at
    preparation with ``tokenizer``, queries and documents at their lengths and prefixes."""


def prepare(name: str, data_dir: str, *, tokenizer: str = "", negatives: int = 0,
            scores: bool = False, max_len: int = 0, query_max_len: int = 0, doc_max_len: int = 0,
            query_prefix: str = "", doc_prefix: str = ""):
    """The prepared TFDS builder of ``pairs:FILE`` / ``beir:DIR`` (:class:`TextPairs`), its
    queries and documents at the text section's lengths and prefixes (:class:`Sides`);
    ``scores``: with each line's teacher scores."""
    sides = dict(max_len=max_len, query_max_len=query_max_len, doc_max_len=doc_max_len,
                 query_prefix=query_prefix, doc_prefix=doc_prefix)
    if name.startswith(BEIR) and negatives:
        raise ValueError(f"data.name={name} has no hard negatives: mine them (repr-jax mine "
                         f"--data {name} --out FILE.jsonl ...) and train on pairs:FILE")
    if scores and not (name.startswith(PAIRS) and negatives):
        raise ValueError(f"a teacher's scores come with the negatives of a pairs: file (repr-jax "
                         f"score --data pairs:FILE ...; method.negatives_per_query > 0), not "
                         f"data.name={name} with {negatives} negatives")
    config = config_for(name, tokenizer=tokenizer, sides=Sides.of(**sides), negatives=negatives,
                        scores=scores)
    builder = prepared(f"text_pairs.{config.name}",
                       lambda: TextPairs(data_dir=data_dir, config=config), data_dir)
    if "cuts" in builder.__dict__:  # prepared here, not reused: say what was cut
        import sys
        print(f"prepared {config.source}: {Cuts.line(builder.info.metadata['cut'])}",
              file=sys.stderr, flush=True)
    return builder


def cut_counts(builder) -> dict | None:
    """What the preparation of a prepared ``pairs:`` / ``beir:`` dataset cut: ``{side: {texts,
    cut, length}}`` (:class:`~repr_jax.data.tokenizer.Cuts`), or None for one prepared before
    it was recorded."""
    return builder.info.metadata.get("cut")


PAIRS_FORMAT = Format(TextPairsData, prepare, path="FILE.jsonl", text=True)
BEIR_FORMAT = Format(TextPairsData, prepare, path="DIR", text=True)


def path_of(name: str, *, flag: str = "data.name") -> Path:
    """The file or folder of ``pairs:FILE`` / ``beir:DIR``; missing, or not a regular file (a
    FIFO, a device, a broken link): a one-line ValueError naming ``flag``, the option that gave
    ``name`` (``data.name``, or ``--data`` of ``repr-jax mine`` and ``score``)."""
    kind = PAIRS if name.startswith(PAIRS) else BEIR
    given = f"data.name={name}" if flag == "data.name" else f"{flag} {name}"
    rest = name[len(kind):].strip()
    if not rest:
        what = "a .jsonl file" if kind == PAIRS else "a BEIR folder"
        raise ValueError(f"{given} needs {what} after the colon, e.g. {kind}"
                         f"{'/path/to/pairs.jsonl' if kind == PAIRS else '/path/to/collection'}")
    path = Path(rest).expanduser().absolute()
    problem = files.not_readable(path, folder=kind == BEIR)
    if problem:
        raise ValueError(f"{given}: {problem}")
    return path


def config_for(name: str, *, tokenizer: str = "", sides: Sides = Sides(),
               negatives: int = 0, scores: bool = False) -> TextPairsConfig:
    """The builder config of ``pairs:FILE`` / ``beir:DIR``: its name tells file versions,
    tokenizers, lengths and negative counts apart (an edited file is prepared again)."""
    path = path_of(name)
    if name.startswith(BEIR):
        from repr_jax.data import beir
        beir.check_layout(path, need_train=True)
        watched = [path / f for f in beir.FILES] + sorted((path / "qrels").glob("*.tsv"))
    else:
        watched = [path]
    digest = hashlib.sha1(f"{files.version_stamp(watched)}|{tokenizer}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]+", "_", path.stem.lower()).strip("_") or "pairs"
    kind = "pairs" if name.startswith(PAIRS) else "beir"
    return TextPairsConfig(name=f"{kind}_{slug}_{digest}_{sides.tag()}_k{negatives}"
                                + ("_scored" if scores else ""),
                           source=f"{kind}:{path}", tokenizer=tokenizer, sides=sides,
                           negatives=negatives, scores=scores,
                           description=f"text pairs from {path}")


def _text(value, field: str, where: str) -> str:
    return files.nonempty_text(value, where, field)


def parse_line(line: str, where: str) -> tuple[str, str, list[str]]:
    """``(query, positive, negatives)`` of one ``pairs:`` line; ``where`` (``FILE:LINE``) starts
    every error."""
    row = files.json_object(line, where)
    query_key = "query" if "query" in row else "anchor"
    for key in (query_key, "positive"):
        if key not in row:
            named = "'query' (or 'anchor')" if key == "anchor" else repr(key)
            raise ValueError(f"{where}: no {named} field (it has {sorted(row)}; a line is "
                             f'{{"query": ..., "positive": ..., "negatives": [...]}})')
    negs = row.get("negatives", row.get("negative", []))
    numbered = sorted((int(m.group(1)), k) for k in row if (m := _NEGATIVE_N.match(k)))
    if numbered:
        negs = [row[k] for _, k in numbered]
    if isinstance(negs, str):
        negs = [negs]
    if not isinstance(negs, list):
        raise ValueError(f"{where}: 'negatives' must be a list of strings")
    return (_text(row[query_key], query_key, where), _text(row["positive"], "positive", where),
            [_text(n, "negatives", where) for n in negs])


def _number(value, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value in (float("inf"), float("-inf")):
        raise ValueError(f"{where}: {field} must be finite numbers, got {value!r}")
    return float(value)


def parse_scores(row: dict, num_negatives: int, where: str) -> list[float]:
    """``[positive, negative_1, ...]``: a line's teacher scores (``positive_score`` and
    ``negative_scores``, or sentence-transformers' ``scores``), one per negative."""
    if "scores" in row and "positive_score" not in row:
        values, field = row["scores"], "'scores'"
        if not isinstance(values, list):
            raise ValueError(f"{where}: 'scores' must be a list [positive, negative_1, ...]")
    else:
        missing = [k for k in ("positive_score", "negative_scores") if k not in row]
        if missing:
            raise ValueError(f"{where}: no {' or '.join(map(repr, missing))} (a distillation "
                             f"objective reads a teacher's scores on every line: repr-jax score "
                             f"--workdir CROSS_ENCODER_RUN --data pairs:FILE --out SCORED.jsonl)")
        negs = row["negative_scores"]
        if not isinstance(negs, list):
            raise ValueError(f"{where}: 'negative_scores' must be a list of numbers")
        values, field = [row["positive_score"], *negs], "'positive_score'/'negative_scores'"
    values = [_number(v, where, field) for v in values]
    if len(values) != 1 + num_negatives:
        raise ValueError(f"{where}: {len(values) - 1} negative score(s) for {num_negatives} "
                         f"negative(s)")
    return values


def read_pairs(path: str | Path) -> Iterator[tuple[int, str, str, list[str]]]:
    """``(line number, query, positive, negatives)`` for each non-blank line of a ``pairs:``
    file; a bad line is a one-line ValueError naming the file and line."""
    path = Path(path)
    for number, line in files.text_lines(path):
        if line.strip():
            yield (number, *parse_line(line, f"{path}:{number}"))


def most_negatives(path: str | Path) -> int:
    """The most negatives any line of a ``pairs:`` file holds (one pass, no tokenising): what
    ``negatives_per_query`` is checked against before the file is prepared. Time ``O(lines)``."""
    return max((len(negs) for _, _, _, negs in read_pairs(path)), default=0)


def is_test(query: str) -> bool:
    """The fixed test share of a ``pairs:`` file, by a hash of the query text."""
    return zlib.crc32(query.encode("utf-8")) % 1000 < TEST_FRACTION * 1000


class TextPairs(tfds.core.GeneratorBasedBuilder):
    """Tokenised text pairs from a ``pairs:`` file or a BEIR collection (module docstring).
    Preparing: time ``O(lines x (1 + K) x T)`` (the file is read once per split), memory a chunk
    of 4,096 lines; reading is by row, as for any array_record split."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First release."}
    BUILDER_CONFIGS = [TextPairsConfig(name="unset")]

    def __init__(self, **kwargs):
        kwargs.setdefault("file_format", "array_record")
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        c = self.builder_config
        q, d = c.sides.query_len, c.sides.doc_len
        feats = {"x": tfds.features.Tensor(shape=(q,), dtype=np.int32),
                 "x_pos": tfds.features.Tensor(shape=(d,), dtype=np.int32),
                 "label": tfds.features.ClassLabel(names=["pair"])}
        if c.negatives:
            feats["negatives"] = tfds.features.Tensor(shape=(c.negatives, d), dtype=np.int32)
        if c.scores:
            feats["scores"] = tfds.features.Tensor(shape=(1 + c.negatives,), dtype=np.float32)
        return tfds.core.DatasetInfo(
            builder=self, description=c.description, features=tfds.features.FeaturesDict(feats),
            supervised_keys=("x", "label"), disable_shuffling=True,  # file order, no spill
            metadata=tfds.core.MetadataDict(source=c.source, tokenizer=c.tokenizer))

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing is downloaded
        source = self.builder_config.source
        if source.startswith(BEIR):
            from repr_jax.data import beir
            collection = beir.read_collection(source[len(BEIR):])
            return {"train": self._generate_examples(collection.pairs("train"), "train"),
                    "test": self._generate_examples(
                        collection.pairs(collection.test_split, best=True), "test")}
        path = source[len(PAIRS):]
        k = self.builder_config.negatives
        if k and 0 < (most := most_negatives(path)) < k:  # before tokenising K texts a line
            raise ValueError(f"method.negatives_per_query={k}, but no line of {path} has more "
                             f"than {most} negatives (a line with fewer repeats its own): use "
                             f"at most {most}")

        def rows(test: bool):
            for number, line in files.text_lines(path):
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                q, p, negs = parse_line(line, where)
                if is_test(q) == test:
                    scores = (parse_scores(files.json_object(line, where), len(negs), where)
                              if self.builder_config.scores else None)
                    yield where, q, p, negs, scores

        return {"train": self._generate_examples(rows(False), "train"),
                "test": self._generate_examples(rows(True), "test")}

    def _generate_examples(self, rows, split: str):
        from tqdm.auto import tqdm

        from repr_jax.data.tokenizer import make_tokenizer
        c = self.builder_config
        tok = make_tokenizer(c.tokenizer)
        cuts = self.__dict__.setdefault("cuts", Cuts())  # both splits' texts, cut or not

        def encode(texts, side: str = "doc", counted=None):
            return c.sides.encode(tok, texts, side, cuts=cuts, counted=counted)

        bar = tqdm(desc=f"{c.source.split(':')[0]}: tokenising {split}", unit="pair",
                   leave=False, dynamic_ncols=True)
        rows, count = iter(rows), 0
        while chunk := list(itertools.islice(rows, CHUNK)):
            yield from self._encode_chunk(chunk, encode)
            bar.update(len(chunk))
            count += len(chunk)
        bar.close()
        if not count:
            raise ValueError(f"{c.source}: no pairs for the {split} split"
                             + (" (5% of the queries, by a hash of their text: add lines)"
                                if split == "test" and c.source.startswith(PAIRS) else ""))
        self.info.metadata["cut"] = cuts.record(c.sides)  # written with the dataset's info

    def _encode_chunk(self, chunk, encode):
        """Examples of ``(where, query, positive, negatives[, scores])`` rows."""
        k = self.builder_config.negatives
        queries = encode([row[1] for row in chunk], "query")
        positives = encode([row[2] for row in chunk])
        if k:
            for where, _, _, negs, *_ in chunk:
                if not negs:
                    raise ValueError(f"{where}: no negatives, and method.negatives_per_query={k} "
                                     f"needs them on every line (a line with fewer than {k} "
                                     f"repeats its own)")
            negatives = encode([row[3][j % len(row[3])] for row in chunk for j in range(k)],
                               counted=[j < len(row[3]) for row in chunk for j in range(k)]
                               ).reshape(len(chunk), k, -1)  # a repeat is counted once
        for i, (where, _, _, negs, *scored) in enumerate(chunk):
            example = {"x": queries[i], "x_pos": positives[i], "label": 0}
            if k:
                example["negatives"] = negatives[i]
            if self.builder_config.scores:  # the positive's, then each negative's as repeated
                s = scored[0]
                example["scores"] = np.asarray([s[0]] + [s[1 + j % len(negs)] for j in range(k)],
                                               np.float32)
            yield where, example
