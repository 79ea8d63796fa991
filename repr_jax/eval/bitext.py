"""Multilingual bitext mining, offline, from the gettext catalogues Debian ships (``iso-codes``).

Each ``/usr/share/locale/<lang>/LC_MESSAGES/<catalogue>.mo`` maps an English name (msgid) to its
translation (msgstr): ``iso_3166-1`` holds ~420 country names in ~158 languages, ``iso_639-2``
language names, ``iso_4217`` currencies. The i-th English name and the i-th translation are a gold
pair; a representation is scored by how often each side's nearest neighbour is its own partner.

* :func:`gettext_pairs` / :func:`available_languages`: the pairs of one catalogue, read with the
  standard library's view of the documented ``.mo`` layout (no third-party reader).
* :func:`bitext_mining`: MTEB's ``BitextMining`` metrics (accuracy, weighted precision / recall /
  F1), transcribed from mteb 2.26 (``mteb/_evaluators/text/bitext_mining_evaluator.py``
  ``_similarity_search``, lines 85-176: cosine nearest neighbour by ``torch.topk(k=1)``; and
  ``mteb/abstasks/text/bitext_mining.py`` ``_compute_metrics``, lines 195-216:
  ``labels = gold[i][1] = i``, ``precision_score / recall_score / f1_score(labels, predictions,
  zero_division=0, average="weighted")``, ``accuracy_score``).
* :func:`xsim_error`: LASER's xSIM error rate (facebookresearch/LASER ``source/xsim.py``,
  ``_score_knn`` / ``_score_margin`` / ``calculate_error``; Artetxe & Schwenk 2019's margin).
* :func:`bitext_table`: both directions (``en->xx`` and ``xx->en``) for a list of languages, with
  95% bootstrap intervals over source sentences (:func:`repr_jax.eval.stats.bootstrap_ci`).
* :class:`Bitext` (``EVALUATORS["bitext"]``, ``eval.bitext.*``): the same per language and
  direction, plus the mean over them, for a run's representation on the ``bitext`` evaluation
  set (:class:`repr_jax.data.eval_sets.BitextSet`: ``eval.sets=('bitext',)``).

Cost for N pairs of D-dimensional embeddings: time ``O(N^2 D)`` (one pass of similarities for
:func:`bitext_mining`, two for the margin of :func:`xsim_error`), memory ``O(N D + C N)`` with the
similarity computed ``C = chunk`` source rows at a time (never the full ``N x N`` matrix;
``N = 10,000`` with ``C = 1,024`` holds ~40 MB of float32 scores), chunks padded to one shape so a
new N compiles once. The bootstrap adds ``O(R N)`` time for R resamples.
"""

from __future__ import annotations

import functools
import struct
import zlib
from pathlib import Path
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import config, static
from repr_jax.eval.base import Evaluator
from repr_jax.eval.retrieval import normalize_rows
from repr_jax.eval.stats import Estimate, bootstrap_ci, normal_interval, resampled

LOCALE_DIR = "/usr/share/locale"
MARGINS = ("ratio", "distance", "absolute")

# ---------------------------------------------------------------------------------------------
# gettext catalogues
# ---------------------------------------------------------------------------------------------


def _mo_path(lang: str, catalogue: str, locale_dir: str | Path) -> Path:
    return Path(locale_dir) / lang / "LC_MESSAGES" / f"{catalogue}.mo"


def _read_mo(path: Path) -> list[tuple[str, str]]:
    """Every ``(msgid, msgstr)`` of a GNU ``.mo`` file in file order (sorted by msgid), decoded
    with the charset its header names (UTF-8 when none). The layout is the documented one (GNU
    gettext manual, "The Format of GNU MO Files"; the same fields ``gettext.GNUTranslations._parse``
    reads): magic, revision, count N, offsets of the original and translation tables, each a list
    of N ``(length, offset)`` pairs. Read directly so no private attribute (``_catalog``) is used
    and plural / context entries stay visible."""
    buf = path.read_bytes()
    magic = struct.unpack("<I", buf[:4])[0]
    if magic == 0x950412DE:
        order = "<"
    elif magic == 0xDE120495:
        order = ">"
    else:
        raise ValueError(f"{path} is not a GNU .mo file (magic {magic:#x})")
    _, n, orig_off, trans_off = struct.unpack(order + "4I", buf[4:20])
    raw = []
    for i in range(n):
        mlen, moff = struct.unpack(order + "2I", buf[orig_off + 8 * i: orig_off + 8 * i + 8])
        tlen, toff = struct.unpack(order + "2I", buf[trans_off + 8 * i: trans_off + 8 * i + 8])
        raw.append((buf[moff:moff + mlen], buf[toff:toff + tlen]))
    charset = "utf-8"
    for msgid, msgstr in raw:
        if msgid == b"":  # the header entry names the charset
            for line in msgstr.decode("ascii", "replace").splitlines():
                if line.lower().startswith("content-type:") and "charset=" in line:
                    charset = line.split("charset=")[1].strip() or charset
    return [(m.decode(charset), t.decode(charset)) for m, t in raw]


def gettext_pairs(lang: str, catalogue: str = "iso_3166-1", locale_dir: str | Path = LOCALE_DIR,
                  *, keep_identical: bool = True) -> list[tuple[str, str]]:
    """``(English msgid, translation)`` for every translated entry of ``<catalogue>.mo`` in
    ``locale_dir/<lang>/LC_MESSAGES``, in msgid order.

    Left out: the header (msgid ``""``); empty translations (``msgfmt`` drops them already; fuzzy
    ones are never compiled in); **plural** entries (msgid holding ``"\\0"``: a singular, a plural
    and several msgstr forms have no single aligned translation); **context** entries (msgid
    ``"ctx\\x04text"``: the same English text may occur under several contexts with different
    translations, so it is not one-to-one). ``iso-codes`` catalogues have neither kind.

    Entries whose translation equals the English (``("France", "France")`` in ``fr``: 67 of 420)
    are **kept** by default, as MTEB keeps every pair of its bitext sets (Tatoeba, BUCC, Flores
    contain identical names and numbers): the numbers stay comparable with MTEB's convention. They
    are trivial for any surface-form matcher and inflate scores, most for Latin-script languages;
    ``keep_identical=False`` drops them for a harder, cross-script-fair set.

    Raises:
      FileNotFoundError: one line naming the missing path and the package that ships it.

    Cost: time and memory ``O(size of the file)``.
    """
    path = _mo_path(lang, catalogue, locale_dir)
    if not path.is_file():
        package = "iso-codes" if catalogue.startswith("iso_") else catalogue
        raise FileNotFoundError(f"no gettext catalogue {path} (install it with: apt-get install "
                                f"{package})")
    pairs = [(m, t) for m, t in _read_mo(path)
             if m and t and "\0" not in m and "\x04" not in m]
    if not keep_identical:
        pairs = [(m, t) for m, t in pairs if m != t]
    return pairs


def available_languages(catalogue: str = "iso_3166-1",
                        locale_dir: str | Path = LOCALE_DIR) -> list[str]:
    """Sorted locale names under ``locale_dir`` that have ``<catalogue>.mo`` (empty when none)."""
    root = Path(locale_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if _mo_path(p.name, catalogue, root).is_file())


# ---------------------------------------------------------------------------------------------
# Chunked similarity search
# ---------------------------------------------------------------------------------------------


def _check_pair(src, tgt, name: str) -> tuple[jax.Array, jax.Array]:
    src, tgt = jnp.asarray(src, jnp.float32), jnp.asarray(tgt, jnp.float32)
    if src.ndim != 2 or src.shape != tgt.shape or src.shape[0] == 0:
        raise ValueError(f"{name} expects src_emb and tgt_emb of one shape [N, D], N > 0; got "
                         f"{src.shape} and {tgt.shape}")
    return normalize_rows(src), normalize_rows(tgt)


@functools.partial(jax.jit, static_argnames=("k",))
def _topk_chunk(q_CxD, c_NxD, k: int):
    return jax.lax.top_k(q_CxD @ c_NxD.T, k)  # ties: the lower index first, as argmax


def _chunked_topk(q_NxD: jax.Array, c_NxD: jax.Array, k: int, chunk: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Cosine top-``k`` of each (normalised) query row among the corpus rows: scores and indices
    ``[N, k]``, computed ``chunk`` rows at a time (the last chunk zero-padded to the same shape).
    Time ``O(N^2 D)``, memory ``O(chunk N + N D)``."""
    n = q_NxD.shape[0]
    c = min(chunk, n)
    vals, idx = [], []
    for start in range(0, n, c):
        q = q_NxD[start:start + c]
        rows = q.shape[0]
        if rows < c:
            q = jnp.pad(q, ((0, c - rows), (0, 0)))
        v, i = _topk_chunk(q, c_NxD, k)
        vals.append(np.asarray(v[:rows]))
        idx.append(np.asarray(i[:rows]))
    return np.concatenate(vals), np.concatenate(idx)


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def _weighted_prf(xp, gold_N, pred_N, num_labels: int):
    """scikit-learn's ``precision/recall/f1_score(gold, pred, average="weighted",
    zero_division=0)``: per label c, ``tp_c``, true count ``s_c`` (support) and predicted count
    ``p_c``; precision ``tp/p`` (0 when p = 0), recall ``tp/s``, F1 ``2 tp / (s + p)``; averaged
    with weights ``s_c / N``, so labels only ever predicted weigh nothing (sklearn's
    ``unique_labels(y_true, y_pred)`` adds them with weight 0). Weighted recall is accuracy.
    ``xp`` is numpy (the point value, float64) or jax.numpy (inside the bootstrap)."""
    if xp is np:
        def count(x, w=None):
            return np.bincount(x, weights=w, minlength=num_labels).astype(np.float64)
    else:
        def count(x, w=None):
            return jnp.bincount(x, weights=w, length=num_labels).astype(jnp.float32)
    hit = (gold_N == pred_N).astype(np.float64 if xp is np else jnp.float32)
    tp, support, predicted = count(gold_N, hit), count(gold_N), count(pred_N)
    n = gold_N.shape[0]
    precision = xp.where(predicted > 0, tp / xp.maximum(predicted, 1), 0.0)
    f1 = xp.where(support + predicted > 0, 2 * tp / xp.maximum(support + predicted, 1), 0.0)
    return (xp.sum(support * precision) / n, xp.sum(tp) / n, xp.sum(support * f1) / n)


def f1_statistic(gold_N, pred_N):
    """Bootstrap statistic: weighted F1 over the resampled (gold, prediction) pairs; labels are
    target indices in ``[0, N)``."""
    return _weighted_prf(jnp, gold_N, pred_N, gold_N.shape[0])[2]


def weighted_f1(pred_N) -> float:
    """mteb's main bitext score (float64) of predictions ``pred_N`` whose gold is ``arange(N)``:
    scikit-learn's weighted F1 (:func:`_weighted_prf`). Time ``O(N)``.

    >>> round(weighted_f1(np.asarray([0, 1, 1])), 3)
    0.556
    """
    pred_N = np.asarray(pred_N)
    return float(_weighted_prf(np, np.arange(len(pred_N)), pred_N, len(pred_N))[2])


def bitext_mining(src_emb, tgt_emb, *, bootstrap: int = 0, level: float = 0.95,
                  chunk: int = 1024) -> dict[str, float]:
    """MTEB's ``BitextMining`` metrics for aligned ``src_emb [N, D]`` and ``tgt_emb [N, D]``
    (source i's translation is target i).

    For each source i the prediction is the target of highest cosine similarity (ties: the lowest
    index, ``argmax``'s convention; mteb's ``torch.topk(k=1, sorted=False)`` leaves tie order to the
    backend), the label is i. Returns ``accuracy`` and the ``average="weighted",
    zero_division=0`` ``precision``, ``recall`` (= accuracy) and ``f1`` of scikit-learn, as mteb
    2.26's ``mteb/abstasks/text/bitext_mining.py::_compute_metrics`` (lines 195-216) computes
    them. With ``bootstrap=R`` resamples, ``accuracy`` and ``f1`` are :class:`Estimate` with a
    interval over source sentences (resampled jointly with their predictions): percentile for
    accuracy, normal (:func:`~repr_jax.eval.stats.normal_interval`, kept within [0, 1]) for F1,
    which resampling biases upward.

    Cost: time ``O(N^2 D + R N)``, memory ``O(chunk N + N D)``.

    Targets 1 and 2 below are equal, so sources 1 and 2 both pick target 1 (the lower index):

    >>> e = np.eye(3, dtype=np.float32)
    >>> {k: round(float(v), 3) for k, v in bitext_mining(e, e[[0, 2, 1]] + e).items()}
    {'accuracy': 0.667, 'precision': 0.5, 'recall': 0.667, 'f1': 0.556}
    """
    src, tgt = _check_pair(src_emb, tgt_emb, "bitext_mining")
    return _mining_metrics(_nearest(src, tgt, chunk), bootstrap, level)


def _nearest(src_NxD: jax.Array, tgt_NxD: jax.Array, chunk: int) -> np.ndarray:
    """Each (normalised) source's cosine-nearest target ``[N]`` int32 (ties: the lower index).
    Time ``O(N^2 D)``, memory ``O(chunk N + N D)``."""
    return _chunked_topk(src_NxD, tgt_NxD, 1, chunk)[1][:, 0].astype(np.int32)


def _mining_metrics(pred_N: np.ndarray, bootstrap: int, level: float) -> dict[str, float]:
    """:func:`bitext_mining`'s numbers from its predictions (the gold of source i is i). Time
    ``O(N + R N)``."""
    gold_N = np.arange(len(pred_N), dtype=np.int32)
    precision, recall, f1 = (float(v) for v in _weighted_prf(np, gold_N, pred_N, len(pred_N)))
    accuracy = float(np.mean(pred_N == gold_N))
    if bootstrap:
        acc = bootstrap_ci((pred_N == gold_N).astype(np.float32), num_resamples=bootstrap,
                           level=level)
        accuracy = Estimate(accuracy, acc.low, acc.high)
        # Weighted F1 is not a mean over sources: a resample drops ~37% of the labels, and wrong
        # predictions that point at dropped labels stop costing precision, so resampled F1 sits
        # above the point. The normal interval (point -+ z sd) is the project's remedy for such
        # resampling bias.
        f1 = Estimate(f1, *_f1_interval(_f1_samples(pred_N, bootstrap, 0), f1, level))
    return {"accuracy": accuracy, "precision": precision, "recall": recall, "f1": f1}


def _f1_interval(samples, point: float, level: float) -> tuple[float, float]:
    """F1's normal interval (:func:`~repr_jax.eval.stats.normal_interval`) kept within [0, 1],
    where F1 lies. Time ``O(R)``."""
    lo, hi = normal_interval(samples, point, level)
    return max(lo, 0.0), min(hi, 1.0)


def _f1_samples(pred_N: np.ndarray, bootstrap: int, seed: int) -> jax.Array:
    """Weighted F1 on ``bootstrap`` resamples of the sources (``seed``: which draws; equal seeds
    and N give equal draws). Time ``O(R N)``."""
    gold_N = np.arange(len(pred_N), dtype=np.int32)
    return resampled(f1_statistic, (jnp.asarray(gold_N), jnp.asarray(pred_N, jnp.int32)),
                     bootstrap, seed, 100)


def xsim_predictions(src_emb, tgt_emb, *, margin: str = "ratio", k: int = 4,
                     chunk: int = 1024) -> np.ndarray:
    """LASER xSIM's chosen target ``[N]`` for each source (facebookresearch/LASER
    ``source/xsim.py::_score_knn``). ``absolute``: the cosine nearest neighbour. ``ratio`` /
    ``distance``: among the ``k`` cosine-nearest targets j of source i (only those: LASER scores
    the k candidates, not all N), the one maximising ``cos(x_i, y_j) / m_ij`` (ratio) or
    ``cos(x_i, y_j) - m_ij`` (distance), where ``m_ij = (avg_k cos(x_i, NN_k(x_i, Y)) +
    avg_k cos(y_j, NN_k(y_j, X))) / 2`` (Artetxe & Schwenk 2019, eq. 2-3); ties, the nearer
    candidate. ``k`` is capped at N. Cost: time ``O(N^2 D)`` (two passes), memory
    ``O(chunk N + N D)``."""
    if margin not in MARGINS:
        raise ValueError(f"unknown margin {margin!r}; choose from {MARGINS}")
    src, tgt = _check_pair(src_emb, tgt_emb, "xsim_error")
    if margin == "absolute":
        return _chunked_topk(src, tgt, 1, chunk)[1][:, 0]
    k = min(k, src.shape[0])
    cos_xy, idx_xy = _chunked_topk(src, tgt, k, chunk)      # [N, k]
    avg_yx = _chunked_topk(tgt, src, k, chunk)[0].astype(np.float64).mean(1)  # [N]
    avg_xy = cos_xy.astype(np.float64).mean(1)
    m_Nxk = (avg_xy[:, None] + avg_yx[idx_xy]) / 2
    a = cos_xy.astype(np.float64)
    scores_Nxk = a / m_Nxk if margin == "ratio" else a - m_Nxk
    return idx_xy[np.arange(len(idx_xy)), np.argmax(scores_Nxk, 1)]


def xsim_error(src_emb, tgt_emb, margin: str = "ratio", k: int = 4, *, bootstrap: int = 0,
               level: float = 0.95, chunk: int = 1024) -> float:
    """LASER's xSIM error rate: the fraction of sources whose :func:`xsim_predictions` target is
    not their own translation (``calculate_error``'s index error, ``err / nbex``). With
    ``bootstrap=R``, an :class:`Estimate` with a percentile interval over source sentences.

    Cost: time ``O(N^2 D + R N)``, memory ``O(chunk N + N D)``.

    >>> e = np.eye(3, dtype=np.float32)
    >>> xsim_error(e, e)
    0.0
    """
    pred_N = xsim_predictions(src_emb, tgt_emb, margin=margin, k=k, chunk=chunk)
    wrong_N = (pred_N != np.arange(len(pred_N))).astype(np.float32)
    if bootstrap:
        return bootstrap_ci(wrong_N, num_resamples=bootstrap, level=level)
    return float(wrong_N.mean())


# ---------------------------------------------------------------------------------------------
# A surface-form baseline and the table
# ---------------------------------------------------------------------------------------------


def char_ngram_embed(texts: Sequence[str], dim: int = 256, n: int = 3) -> np.ndarray:
    """A weight-free baseline embedder: counts of the lower-cased character ``n``-grams of
    ``" " + text + " "`` hashed (CRC-32) into ``dim`` buckets, ``[len(texts), dim]`` float32. It
    matches shared spelling only, so it sets the chance-above floor a representation must beat
    (high for Latin-script pairs, near chance across scripts). Time ``O(total characters)``."""
    out = np.zeros((len(texts), dim), np.float32)
    for i, t in enumerate(texts):
        s = f" {t.lower()} "
        for j in range(max(1, len(s) - n + 1)):
            out[i, zlib.crc32(s[j:j + n].encode("utf-8")) % dim] += 1.0
    return out


def language_pairs(langs: Sequence[str], catalogue: str = "iso_3166-1",
                   locale_dir: str | Path = LOCALE_DIR, *, keep_identical: bool = True
                   ) -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    """``({lang: gettext_pairs}, skipped)`` for each distinct language of ``langs`` that has
    ``<catalogue>.mo`` with at least two pairs; ``skipped``: ``"lang: why"`` for the others."""
    pairs, skipped = {}, []
    for lang in dict.fromkeys(langs):
        try:
            p = gettext_pairs(lang, catalogue, locale_dir, keep_identical=keep_identical)
        except FileNotFoundError:
            skipped.append(f"{lang}: no {catalogue}.mo")
            continue
        if len(p) < 2:
            skipped.append(f"{lang}: {len(p)} pairs in {catalogue}.mo")
            continue
        pairs[lang] = p
    return pairs, skipped


def bitext_table(embed_fn: Callable[[list[str]], np.ndarray], langs: Sequence[str],
                 catalogue: str = "iso_3166-1", *, locale_dir: str | Path = LOCALE_DIR,
                 keep_identical: bool = True, margin: str = "ratio", k: int = 4,
                 bootstrap: int = 1000, level: float = 0.95, chunk: int = 1024
                 ) -> tuple[list[dict], list[str]]:
    """Bitext mining rows for each language of ``langs`` with ``<catalogue>.mo``, in both
    directions (``en->xx``: English names as sources, translations as targets; ``xx->en``).

    ``embed_fn(list[str]) -> [n, D]`` embeds the English names (once, over the union of every
    language's msgids) and each language's translations.

    Returns:
      ``(rows, skipped)``: rows ``{lang, direction, n, accuracy, acc_lo, acc_hi, precision, recall,
      f1, f1_lo, f1_hi, xsim_error, xsim_lo, xsim_hi, margin, k}`` (intervals: ``level``
      bootstrap over source sentences as in :func:`bitext_mining`, ``nan`` when
      ``bootstrap=0``), and the
      languages left out, each as ``"lang: reason"`` (no catalogue file, or no pairs).

    Cost per language (n pairs): ``O(n^2 D + R n)`` time, memory ``O(chunk n + n D)``, plus the
    embedder's.
    """
    pairs, skipped = language_pairs(langs, catalogue, locale_dir, keep_identical=keep_identical)
    english = sorted({m for p in pairs.values() for m, _ in p})
    en_emb = np.asarray(embed_fn(english), np.float32) if english else None
    row_of = {m: i for i, m in enumerate(english)}
    rows = []
    for lang, p in pairs.items():
        en = en_emb[[row_of[m] for m, _ in p]]
        xx = np.asarray(embed_fn([t for _, t in p]), np.float32)
        if xx.shape != en.shape:
            raise ValueError(f"embed_fn returned {xx.shape} for {len(p)} {lang} texts; expected "
                             f"{en.shape}")
        for direction, (src, tgt) in (("en->" + lang, (en, xx)), (lang + "->en", (xx, en))):
            m = bitext_mining(src, tgt, bootstrap=bootstrap, level=level, chunk=chunk)
            x = xsim_error(src, tgt, margin, k, bootstrap=bootstrap, level=level, chunk=chunk)
            rows.append(dict(
                lang=lang, direction=direction, n=len(p),
                accuracy=float(m["accuracy"]), acc_lo=_low(m["accuracy"]),
                acc_hi=_high(m["accuracy"]), precision=m["precision"], recall=m["recall"],
                f1=float(m["f1"]), f1_lo=_low(m["f1"]), f1_hi=_high(m["f1"]),
                xsim_error=float(x), xsim_lo=_low(x), xsim_hi=_high(x), margin=margin, k=k))
    return rows, skipped


def _low(v) -> float:
    return getattr(v, "low", float("nan"))


def _high(v) -> float:
    return getattr(v, "high", float("nan"))


# ---------------------------------------------------------------------------------------------
# The evaluator
# ---------------------------------------------------------------------------------------------


@config
class BitextOptions:
    """``eval.bitext.*``: the options of :class:`Bitext` (its keyword arguments)."""
    catalogue: str = static("", doc="gettext catalogue mined ('' = the set's, iso_3166-1: ~420 "
                                    "country names; coreutils: ~1,800 program messages, where "
                                    "installed; iso_639-2: language names)")
    languages: tuple[str, ...] = static((), doc="locales mined against English (() = the set's: "
                                                "fr de es ru zh_CN ar ja)")
    margin: str = static("ratio", MARGINS, "xSIM's margin (LASER): ratio | distance | absolute "
                                           "(plain cosine)")
    k: int = static(4, ">0", "xSIM: the nearest neighbours each margin averages")


def _count(x_N):
    return jnp.sum(x_N)  # 0/1 values: an exact count in float32 (up to 2^24)


def _percentile(samples, level: float) -> tuple[float, float]:
    lo, hi = np.quantile(np.asarray(samples, np.float64), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


class Bitext(Evaluator):
    """Bitext mining on every bitext set (``eval.sets=('bitext',)``): for each language and
    direction (``en-xx``: English sources, translations as targets; ``xx-en``), MTEB's weighted F1
    of the cosine nearest neighbour (:func:`bitext_mining`, the main score) and LASER's xSIM error
    (:func:`xsim_error`), then both averaged over the language-direction pairs (``mean/``).

    Intervals (``bootstrap=R``) resample source sentences: F1's normal interval and xSIM's
    percentile one, as :func:`bitext_mining` and :func:`xsim_error` give them. Both directions of
    a language draw the same resamples (they hold the same pairs; the draws of the first language
    are those of ``bitext_mining``), languages independent ones; the mean's resamples are the
    mean of each pair's, a stratified bootstrap.

    Cost for L languages of n pairs, D dims: time ``O(L (n^2 D + R n))`` beside the feature pass
    of the ``M <= L n`` English and ``L n`` translated texts, memory ``O(chunk n + M D)``.
    """

    name = "bitext"
    options = BitextOptions

    def __init__(self, embedder, *, catalogue: str = "", languages: Sequence[str] = (),
                 margin: str = "ratio", k: int = 4, bootstrap: int = 1000, level: float = 0.95,
                 chunk: int = 1024):
        super().__init__(embedder)
        if margin not in MARGINS:
            raise ValueError(f"unknown margin {margin!r}; choose from {MARGINS}")
        self.catalogue, self.languages = catalogue, tuple(languages)
        self.margin, self.k, self.bootstrap, self.level, self.chunk = (margin, k, bootstrap,
                                                                       level, chunk)

    def run(self, variables):
        for s in self.embedder.sets("bitext"):
            s = s.reload(self.catalogue, self.languages)
            if not s.languages:
                continue
            en = np.asarray(self.embedder.embed(variables, s.english), np.float32)
            f1s, errors = [], []
            for seed, lang in enumerate(s.languages):
                xx = np.asarray(self.embedder.embed(variables, s.translations[lang]), np.float32)
                ours = en[s.rows[lang]]
                for direction, (src, tgt) in ((f"en-{lang}", (ours, xx)),
                                              (f"{lang}-en", (xx, ours))):
                    f1, error = self._scores(src, tgt, seed)
                    f1s.append(f1)
                    errors.append(error)
                    yield f"{s.name}/{direction}/f1", self._f1(*f1)
                    yield f"{s.name}/{direction}/xsim_error", self._error(*error)
            yield f"{s.name}/mean/f1", self._f1(*_mean_of(f1s))
            yield f"{s.name}/mean/xsim_error", self._error(*_mean_of(errors))

    def _scores(self, src_NxD: np.ndarray, tgt_NxD: np.ndarray, seed: int):
        """``((f1, its resamples), (xSIM error, its resamples))`` of one direction; resamples
        None without a bootstrap."""
        src, tgt = _check_pair(src_NxD, tgt_NxD, "bitext")
        pred_N = _nearest(src, tgt, self.chunk)
        f1 = weighted_f1(pred_N)
        wrong_N = (xsim_predictions(src_NxD, tgt_NxD, margin=self.margin, k=self.k,
                                    chunk=self.chunk) != np.arange(len(pred_N))).astype(np.float32)
        error = float(np.mean(wrong_N, dtype=np.float64))
        if not self.bootstrap:
            return (f1, None), (error, None)
        # resampled counts over N on the host, in float64: a jitted mean multiplies by 1/N in
        # float32, and an all-wrong resample would fall 1 ulp below its point of exactly 1
        wrong = np.asarray(resampled(_count, (jnp.asarray(wrong_N),), self.bootstrap, seed, 100),
                           np.float64) / len(wrong_N)
        return (f1, _f1_samples(pred_N, self.bootstrap, seed)), (error, wrong)

    def _f1(self, point: float, samples) -> float:
        if samples is None:
            return point
        return Estimate(point, *_f1_interval(samples, point, self.level))

    def _error(self, point: float, samples) -> float:
        if samples is None:
            return point
        return Estimate(point, *_percentile(samples, self.level))


def _mean_of(scores: list[tuple[float, object]]) -> tuple[float, object]:
    """The mean of ``(point, resamples)`` pairs: the points' mean and the resamples' elementwise
    mean (None when any is None). Time ``O(P R)`` for P pairs."""
    point = float(np.mean([p for p, _ in scores]))
    if any(r is None for _, r in scores):
        return point, None
    return point, np.mean(np.stack([np.asarray(r, np.float64) for _, r in scores]), axis=0)
