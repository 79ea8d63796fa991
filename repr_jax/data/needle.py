"""A needle set for long-context embedders: one WordNet gloss hidden at a chosen depth of a long
document made of other glosses (LongEmbed's needle retrieval, Zhu et al. 2024, built offline).

For ``num_queries`` noun, verb, adjective and adverb synsets that have a usage example and a gloss
within half the length (drawn with ``seed``), query ``i`` is that example ("he barked orders at the recruits") and document ``i`` is
about ``length`` tokens of the run's tokenizer: glosses of other synsets (``lemmas: definition.``,
never one of the query synsets, each used once per length) with synset ``i``'s gloss inserted so
that ``depth_i`` of the document's tokens come before it; depths are evenly spaced over [0, 1]
(``i / (num_queries - 1)``), so a result can be read per depth as well as per length. Each query
has one relevant document among the ``num_queries``, the corpus of that length: a model that
reads the whole document and keeps the needle in its pooled vector finds it; one that truncates
(a BERT at 512 positions) or averages it away does not.

Read from Debian's wordnet-base (:func:`repr_jax.data.builders.read_wordnet`); tokenised once per
gloss, so building a length costs ``O(Q L)`` token counts (Q queries, L tokens). Glosses are
counted one by one as they read after a space (the last one cut at a word to fill the budget), so
a document holds about ``length - 8`` tokens; the needle is placed by those counts inside the
budget and never cut.
"""

from __future__ import annotations

import numpy as np

from repr_jax.data.eval_sets import RetrievalSet
from repr_jax.data.tokenizer import Sides, make_tokenizer

MARGIN = 8  # tokens kept free for BOS/EOS or [CLS]/[SEP] and the join's rounding


def _gloss(synset: dict) -> str:
    return f"{', '.join(synset['lemmas'])}: {synset['definition']}."


def _cut_to(text: str, budget: int, tokenizer) -> tuple[str, int]:
    """The longest word prefix of ``text`` within ``budget`` tokens read after a space, and its
    count (``("", 0)`` when none fits): a binary search, ``O(log words)`` tokenisations."""
    words = text.split(" ")

    def count(k: int) -> int:
        return len(tokenizer.tokenize(" " + " ".join(words[:k])))

    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if count(mid) <= budget else (lo, mid - 1)
    return (" ".join(words[:lo]), count(lo)) if lo else ("", 0)


def needle_documents(length: int, tokenizer, *, num_queries: int = 50, seed: int = 0,
                     wordnet_dir: str | None = None) -> tuple[list[str], list[str], np.ndarray]:
    """``(queries, documents, depths)``: the texts of the needle set at ``length`` tokens of
    ``tokenizer`` (an object with ``tokenize(text) -> ids``) and each needle's depth in [0, 1]."""
    from repr_jax.data.builders import WORDNET_DIR, read_wordnet
    if length < 4 * MARGIN or num_queries < 2:
        raise ValueError(f"needle: length={length} must be >= {4 * MARGIN} tokens and "
                         f"num_queries={num_queries} >= 2")
    synsets = read_wordnet(wordnet_dir or WORDNET_DIR)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(synsets))
    budget = length - MARGIN
    needles = []  # synsets with an example whose gloss takes at most half the budget
    for i in order:
        if len(needles) == num_queries:
            break
        if synsets[i]["examples"] and synsets[i]["definition"] and \
                len(tokenizer.tokenize(" " + _gloss(synsets[i]))) <= budget // 2:
            needles.append(i)
    if len(needles) < num_queries:
        raise ValueError(f"needle: only {len(needles)} glosses fit in half of {length} tokens; "
                         f"ask for fewer queries or a longer length")
    taken = set(needles)
    hay = [i for i in order if i not in taken and synsets[i]["definition"]]
    queries, documents, depths = [], [], np.linspace(0.0, 1.0, num_queries)
    cursor = 0
    for q, depth in zip(needles, depths):
        needle = _gloss(synsets[q])
        room = budget - len(tokenizer.tokenize(" " + needle))
        parts, counts, used = [], [], 0  # used: tokens so far, a space each at most
        while used < room:
            if cursor >= len(hay):
                raise ValueError(f"needle: WordNet's glosses run out before {num_queries} "
                                 f"documents of {length} tokens; ask for fewer")
            text = _gloss(synsets[hay[cursor]])
            cursor += 1
            n = len(tokenizer.tokenize(" " + text))  # as it reads after a space
            if used + n > room:  # the last gloss cut at a word to fill the budget
                text, n = _cut_to(text, room - used, tokenizer)
                if not n:
                    break
            parts.append(text)
            counts.append(n)
            used += n
        before = np.cumsum([0] + counts)
        at = int(np.argmin(np.abs(before - depth * before[-1])))
        documents.append(" ".join(parts[:at] + [needle] + parts[at:]))
        queries.append(synsets[q]["examples"][0])
    return queries, documents, depths


def needle_length(entry: str) -> int:
    """The length of an ``eval.sets`` entry ``needle:LENGTH``; a one-line ValueError
    otherwise."""
    text = entry.partition(":")[2]
    if not text.isdigit() or int(text) < 4 * MARGIN:
        raise ValueError(f"eval.sets entry {entry!r}: write needle:LENGTH with a length in tokens "
                         f">= {4 * MARGIN}, e.g. needle:2048")
    return int(text)


def needle(length: int = 2048, tokenizer: str = "", num_queries: int = 50, seed: int = 0,
           sides: Sides | None = None, wordnet_dir: str | None = None, max_tokens: int = 0,
           **_) -> RetrievalSet:
    """The needle set at ``length`` tokens (``eval.sets`` entry ``needle:LENGTH``) for the run's
    tokenizer: queries at ``sides``' query length and prefix, documents at ``length`` tokens with
    the documents' prefix, or cut at ``max_tokens`` (0 = ``length``: what a model with fewer
    positions reads, e.g. 512 for a BERT). ``qrels`` is the identity, the needles' depths evenly
    spaced in order (:func:`needle_documents`)."""
    tok = make_tokenizer(tokenizer)
    queries, documents, _ = needle_documents(length, tok, num_queries=num_queries, seed=seed,
                                             wordnet_dir=wordnet_dir)
    sides = sides or Sides.of(64)
    sides = Sides(sides.query_len, min(length, max_tokens or length), sides.query_prefix,
                  sides.doc_prefix)
    return RetrievalSet(f"needle_{length}", sides.encode(tok, queries, "query"),
                        sides.encode(tok, documents, "doc"),
                        np.eye(num_queries, dtype=np.int8), corpus_is_pos=True,
                        texts=(queries, documents), source=f"needle:{length}")
