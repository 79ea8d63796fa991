"""WordNet 3.0's noun hierarchy: synsets, their hypernym pointers, and the words under a synset.

The word sets of Park et al. (2024, "The Geometry of Categorical and Hierarchical Concepts in Large
Language Models", arXiv 2406.01506) come from here: a concept such as ``animal.n.01`` is the set of
lemmas of the synset and of every synset below it (its transitive hyponym closure), and the 26 noun
lexicographer files (``noun.animal``, ``noun.plant``, ...) give a flat categorical split.

Reads ``data.noun`` (and, for sense order, ``index.noun``) from Debian's wordnet-base at
:data:`~repr_jax.data.builders.WORDNET_DIR`, in the format of ``man 5 wndb``::

    synset_offset lex_filenum ss_type w_cnt word lex_id [word lex_id...] p_cnt [ptr...] | gloss
    ptr = pointer_symbol synset_offset pos source/target

``w_cnt`` and ``lex_id`` are hexadecimal, ``p_cnt`` decimal. Hypernyms are the ``@`` (hypernym)
and ``@i`` (instance hypernym) pointers; hyponyms are their inverse (``~``/``~i`` in the file say
the same thing and are not read). :func:`~repr_jax.data.builders.read_wordnet` (the TFDS builder's
reader, glosses and all POS) is left as it is; this reader keeps the pointers it drops.

Costs: :func:`noun_hierarchy` is one pass over ``data.noun`` (~15 MB, 82,115 synsets) and
``index.noun`` (~4.6 MB): time and memory linear in the files (~1-2 s); the closures are linear in
the number of synsets they reach (``entity``'s: all of them).
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from pathlib import Path
from typing import Iterable, Mapping

from repr_jax.data.builders import WORDNET_DIR

# lexnames(5WN): lexicographer file numbers 3..28 are the noun files.
NOUN_LEXFILES = {
    3: "noun.Tops", 4: "noun.act", 5: "noun.animal", 6: "noun.artifact", 7: "noun.attribute",
    8: "noun.body", 9: "noun.cognition", 10: "noun.communication", 11: "noun.event",
    12: "noun.feeling", 13: "noun.food", 14: "noun.group", 15: "noun.location", 16: "noun.motive",
    17: "noun.object", 18: "noun.person", 19: "noun.phenomenon", 20: "noun.plant",
    21: "noun.possession", 22: "noun.process", 23: "noun.quantity", 24: "noun.relation",
    25: "noun.shape", 26: "noun.state", 27: "noun.substance", 28: "noun.time"}


@dataclasses.dataclass(frozen=True)
class Synset:
    """One noun synset: its byte ``offset`` in ``data.noun`` (its id), lexicographer file number,
    lemmas as written (case kept, ``_`` read as a space), and the offsets its ``@`` (hypernym) and
    ``@i`` (instance hypernym) pointers name."""
    offset: int
    lexfile: int
    lemmas: tuple[str, ...]
    hypernyms: tuple[int, ...]
    instance_hypernyms: tuple[int, ...] = ()

    @property
    def category(self) -> str:
        """The lexicographer file's name, e.g. ``noun.animal``."""
        return NOUN_LEXFILES.get(self.lexfile, f"lexfile.{self.lexfile}")

    @property
    def parents(self) -> tuple[int, ...]:
        """Hypernyms and instance hypernyms together: the edges the closures follow."""
        return self.hypernyms + self.instance_hypernyms


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """The noun synsets by offset, the inverse edges (``hyponyms``: offset -> the synsets whose
    ``@``/``@i`` point at it) and ``senses``: lowercase lemma (spaces) -> its synsets in WordNet's
    sense order (``index.noun``; where that file is absent, ``data.noun``'s order)."""
    synsets: Mapping[int, Synset]
    hyponyms: Mapping[int, tuple[int, ...]]
    senses: Mapping[str, tuple[int, ...]]


def _parse_data_line(line: str) -> Synset:
    head = line.partition(" | ")[0].split()
    offset, lexfile, n_words = int(head[0]), int(head[1]), int(head[3], 16)
    lemmas = tuple(re.sub(r"\(.*\)$", "", w).replace("_", " ")
                   for w in head[4:4 + 2 * n_words:2])
    at = 4 + 2 * n_words
    n_ptrs = int(head[at])
    hyper, instance = [], []
    for k in range(n_ptrs):
        symbol, target, pos = head[at + 1 + 4 * k: at + 4 + 4 * k]
        if pos == "n" and symbol == "@":
            hyper.append(int(target))
        elif pos == "n" and symbol == "@i":
            instance.append(int(target))
    return Synset(offset, lexfile, lemmas, tuple(hyper), tuple(instance))


def noun_hierarchy(wordnet_dir: str = WORDNET_DIR) -> Hierarchy:
    """Parses ``data.noun`` (and ``index.noun`` when present) into a :class:`Hierarchy`.

    Time and memory linear in the files' size (one pass each; ~1-2 s for WordNet 3.0).
    """
    root = Path(wordnet_dir)
    data = root / "data.noun"
    if not data.is_file():
        raise FileNotFoundError(
            f"WordNet 3.0 noun database not found ({data}): install Debian's wordnet-base "
            f"(apt-get install wordnet-base) or point wordnet_dir at its files")
    synsets: dict[int, Synset] = {}
    for line in data.read_text(encoding="latin-1").splitlines():
        if line and not line.startswith("  "):  # lines starting with two spaces: the license
            s = _parse_data_line(line)
            synsets[s.offset] = s
    hyponyms: dict[int, list[int]] = {}
    for s in synsets.values():
        for p in s.parents:
            hyponyms.setdefault(p, []).append(s.offset)
    senses: dict[str, list[int]] = {}
    index = root / "index.noun"
    if index.is_file():
        # lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt synset_offset...
        for line in index.read_text(encoding="latin-1").splitlines():
            if line and not line.startswith("  "):
                fields = line.split()
                n = int(fields[2])
                senses[fields[0].replace("_", " ")] = [int(o) for o in fields[-n:]]
    else:
        for s in synsets.values():
            for lemma in s.lemmas:
                offsets = senses.setdefault(lemma.lower(), [])
                if s.offset not in offsets:
                    offsets.append(s.offset)
    return Hierarchy(synsets, {k: tuple(v) for k, v in hyponyms.items()},
                     {k: tuple(v) for k, v in senses.items()})


def synset(hierarchy: Hierarchy, name: str | int) -> Synset:
    """The synset named by its offset, by ``lemma.n.NN`` (NLTK's style: the lemma's NN-th sense,
    e.g. ``dog.n.01``; ``_`` or a space for multiword lemmas) or by a bare lemma (its first
    sense). Time O(1)."""
    if isinstance(name, int):
        if name not in hierarchy.synsets:
            raise ValueError(f"no noun synset at offset {name}")
        return hierarchy.synsets[name]
    match = re.fullmatch(r"(.+)\.n\.(\d+)", name)
    lemma, sense = (match.group(1), int(match.group(2))) if match else (name, 1)
    offsets = hierarchy.senses.get(lemma.lower().replace("_", " "))
    if not offsets:
        raise ValueError(f"{lemma!r} has no noun sense in WordNet")
    if not 1 <= sense <= len(offsets):
        raise ValueError(f"{lemma!r} has noun senses 1..{len(offsets)}; asked for {sense}")
    return hierarchy.synsets[offsets[sense - 1]]


def _closure(start: int, edges) -> list[int]:
    seen, order, queue = {start}, [], deque([start])
    while queue:
        for nxt in edges(queue.popleft()):
            if nxt not in seen:
                seen.add(nxt)
                order.append(nxt)
                queue.append(nxt)
    return order


def hypernym_closure(hierarchy: Hierarchy, name: str | int) -> list[int]:
    """Every ancestor's offset (all hypernym paths, ``@`` and ``@i``), nearest first (breadth
    first), the synset itself excluded. Time O(ancestors)."""
    start = synset(hierarchy, name).offset
    return _closure(start, lambda o: hierarchy.synsets[o].parents)


def descendants(hierarchy: Hierarchy, name: str | int) -> frozenset[int]:
    """The transitive hyponym closure (instances included), the synset itself excluded.
    Time O(descendants)."""
    start = synset(hierarchy, name).offset
    return frozenset(_closure(start, lambda o: hierarchy.hyponyms.get(o, ())))


def _words(lemmas: Iterable[str], single_word: bool) -> set[str]:
    return {w.lower() for w in lemmas if not (single_word and " " in w)}


def category_words(hierarchy: Hierarchy, name: str | int, *,
                   single_word: bool = True) -> frozenset[str]:
    """The lowercase lemmas of the synset and of all its descendants: the word set of the concept
    (Park et al. 2024's ``Y(w)`` for a WordNet synset). ``single_word`` keeps lemmas without a
    space (WordNet's ``_``). Time O(descendants x lemmas per synset)."""
    s = synset(hierarchy, name)
    words = _words(s.lemmas, single_word)
    for o in descendants(hierarchy, s.offset):
        words |= _words(hierarchy.synsets[o].lemmas, single_word)
    return frozenset(words)


def lexfile_categories(hierarchy: Hierarchy, *, single_word: bool = True) -> dict[str, list[str]]:
    """``{noun lexfile name: sorted words}`` over the noun lexicographer files: lowercase lemmas
    (without a space when ``single_word``), deduplicated, and every word found in more than one
    file dropped, so each word has one label. Files left without words are omitted.
    Time O(total lemmas)."""
    where: dict[str, set[str]] = {}
    for s in hierarchy.synsets.values():
        for w in _words(s.lemmas, single_word):
            where.setdefault(w, set()).add(s.category)
    out: dict[str, list[str]] = {}
    for w, cats in where.items():
        if len(cats) == 1:
            out.setdefault(next(iter(cats)), []).append(w)
    return {c: sorted(out[c]) for c in sorted(out)}
