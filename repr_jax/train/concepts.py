"""``repr-jax concepts``: concept directions of a model over WordNet noun categories, written as
files that ``repr-jax steer --direction`` reads, with the held-out accuracy of each and, for a
decoder LLM, the geometry of the categories' vector representations in its unembedding space.

**The concepts** (``--categories``). ``lexfile`` (the default): WordNet 3.0's noun lexicographer
files (``noun.animal``, ``noun.plant``, ``noun.artifact``, ``noun.food``, ... 26 of them, named
here without ``noun.``), each the set of single-word lemmas found in that file and no other
(:func:`~repr_jax.data.wordnet_hierarchy.lexfile_categories`). Or named synsets
(``animal.n.01,mammal.n.01,plant.n.02``; a bare lemma is its first sense), each the single-word
lemmas of the synset and everything below it
(:func:`~repr_jax.data.wordnet_hierarchy.category_words`: Park et al. 2024's ``Y(w)``). Of each
category at most ``--max-words`` words are kept, a fixed sample (``numpy.random.default_rng(seed)``,
categories in the order given, each sample sorted).

Named synsets may nest (``animal.n.01`` above ``mammal.n.01``: found with
:func:`~repr_jax.data.wordnet_hierarchy.hypernym_closure`). The per-layer analysis needs one label
a word, so there a sampled word is labelled with the most specific category whose word set holds
it, and is used only if it was sampled for that category (``labelled`` below: ``animal``'s are
its sampled words that are not mammals); a word held by two categories neither of which contains
the other is left out (``left_out``). The unembedding analysis reads each category's whole sample,
a parent's including its children's words, as Park et al. do.

**A word's representation at a layer.** Each word is read as the text ``--template`` with ``{}``
replaced by the word (default ``"{}"``; e.g. ``"a picture of a {}"``), tokenised by the model's
tokenizer as the model reads documents (its document instruction, ``[CLS]``/``[SEP]`` included).
The word's tokens are the text's tokens after those of the template's prefix alone (its trailing
spaces stripped) and up to those of the prefix followed by the word (where the word merges with
the template's text, the merged token counts as the word's). For a decoder LLM the representation
is the hidden state at the word's **last** token (causal: it has read the whole word); for a
bidirectional text_transformer, the **mean** over the word's tokens (not ``[CLS]``, ``[SEP]`` or
padding). The hidden state after block ``L`` is the encoder's own ``features["layers"][L]``, as
:mod:`repr_jax.train.activations` writes it (a decoder: before the final norm). A decoder LLM
reading a word at the start of the text (the default template) reads it at position 0, its
attention sink, whose states have norms far above the others': a template with words before it
(``"a picture of a {}"``) avoids that.

**Per layer** (``--layers``: ``all`` blocks, or ``L[,L...]`` counted from 0): the labelled words
are split 80/20 into train and test by word, stratified by category (``default_rng(seed)``; every
category keeps at least one word on each side), and for each category, one-vs-rest
(:mod:`repr_jax.eval.concepts`):

* the difference of class means fit on train, thresholded at the midpoint of the two classes'
  mean projections: its test accuracy with a percentile bootstrap interval over test words
  (:func:`~repr_jax.eval.concepts.held_out_accuracy`) and its balanced accuracy (the mean of the
  two classes' recalls: one category against 25 is ~96% negatives);
* the logistic probe's direction (:func:`~repr_jax.eval.concepts.probe_directions` with
  ``balanced=True``: the two classes weighed equally, the L2 penalty chosen by balanced accuracy
  on 10% of train): its test accuracy with interval, balanced accuracy and penalty;
* the shuffled-label control of the difference of means
  (:func:`~repr_jax.eval.concepts.shuffled_accuracy`, ``method="mean"``): its accuracy with
  interval, its balanced accuracy (~0.5) and the chance level of its prediction rates.

Each category's difference of means fit on **all** its labelled words against all the others,
scaled to unit norm, is written as float32 ``[D]`` to ``DIR/directions/layer_{L}/{category}.npy``
(the category's name with characters other than letters, digits, ``.``, ``_`` and ``-`` as
``_``): exactly what ``repr-jax steer --layer L --direction FILE`` reads.

**SAE latents matched to concepts** (``--sae SAE_RUN ...``: runs trained with ``method.name=sae``
on ``data.name=activations:STORE``, each store written from this model — its ``meta.json``'s
``model`` equal to this one's name, a run's absolute path or the ``--init-from`` name — at one of
``--layers``). The words' vectors at the SAE's layer (those above) are encoded by the SAE's own
``embed`` (:class:`~repr_jax.methods.sae.SparseAutoencoder`: its input scale, ``x - b_dec``, the
encoder and activation, eval mode) to latent activations ``[W, S]``, columns in latent order:
the ids ``repr-jax features`` shows. Each latent is a one-number classifier of a category,
one-vs-rest on the same split (:func:`~repr_jax.eval.concepts.best_latent`): positive where it
fires (activation > 0: ``--sae-rule fires``, the default, natural for TopK SAEs whose latents are
0 unless among a vector's k largest), or where it is above its own best threshold on train
(``--sae-rule threshold``: for ReLU or JumpReLU SAEs, whose latents may fire widely). The
latent with the best train balanced accuracy is chosen (the lowest id among ties) and scored on
test: its balanced accuracy with a percentile bootstrap interval over test words
(:func:`~repr_jax.eval.concepts.balanced_accuracy`), its train balanced accuracy, and the
fractions of the category's test words and of the others' on which it fires. Controls: the same
choice on the train and test labels each permuted within their split as the difference of
means' control permutes them (its train balanced accuracy shows how far choosing among S latents
overfits; its test one is ~0.5), and the category's probe balanced accuracy at that layer. A
template that puts the word first makes a decoder read a one-token word at position 0, its
attention sink, which stores leave out (``skip_first``): the command warns.

**The unembedding space** (a decoder LLM only; not per layer): Park, Choe, Jiang & Veitch 2024
("The Geometry of Categorical and Hierarchical Concepts in Large Language Models", arXiv
2406.01506). The output head ``gamma`` ``[V, D]`` (the tied input embedding, or the checkpoint's
own head) is whitened by :func:`~repr_jax.eval.concepts.causal_transform` (the causal inner
product); a category stands for the distinct tokens of the words of its whole set (not only the
sample) that are a single token as a continuation (``" " + word``, as ``repr-jax steer --words``
reads words; Park et al. keep the words the vocabulary holds whole);
a token shared by two categories neither of which contains the other is dropped from both. Each
category's vector representation is :func:`~repr_jax.eval.concepts.lda_direction` of its tokens'
transformed vectors. Then :func:`~repr_jax.eval.concepts.hierarchy_cosine` for every parent/child
pair among the named synsets (0 predicted; its control: the child's tokens replaced by random
vocabulary tokens), and :func:`~repr_jax.eval.concepts.simplex_test` of every set of at least
three sibling categories (those with the same nearest named ancestors — none of them contains
another; with ``lexfile``, all of them) of at most ``D + 1``; each with its bootstrap interval
over words and its control. A category with fewer than 2 tokens left is skipped there, with the
reason recorded.

**Output** (``--out DIR``, a new or empty folder, or one this command wrote before, whose files
are replaced; every file written atomically, ``concepts.json`` last): the directions above and
``DIR/concepts.json``::

    format "repr_jax.concepts", version 1, created_by
    model, step (a run's; null with --init-from), family, depth, width (D)
    categories_from ("lexfile" | "synsets"), template, max_words, seed, bootstrap, level (0.95)
    representation: how a word's vector is read (last token | mean over its tokens)
    layers: [L, ...]
    categories: [{name, source ("noun.animal" | the synset as named), synset (offset | null),
                  file ("animal.npy"), below: [names of the categories it contains],
                  size (words in its set before sampling), count (sampled), words: [sampled],
                  labelled: [its words in the per-layer analysis], train, test (their split)}]
    left_out: {ambiguous: [sampled words in two categories neither containing the other]}
    per_layer: [{layer, directions ("directions/layer_L"),
                 summary: {accuracy, balanced_accuracy, probe_accuracy,
                           probe_balanced_accuracy, control_accuracy,
                           control_balanced_accuracy, control_chance}
                          (means over the categories of the point values),
                 categories: {name: {
                    mean: {accuracy: INTERVAL, balanced_accuracy, threshold, sign, norm},
                    probe: {accuracy: INTERVAL, balanced_accuracy, l2},
                    control: {accuracy: INTERVAL, balanced_accuracy, chance}}},
                 sae: [one entry per --sae run of this layer ([] if none): {
                    run (absolute path), step, activation, latents (S),
                    rule ("fires" | "threshold"),
                    summary: {balanced_accuracy, control_balanced_accuracy,
                              probe_balanced_accuracy (means over the categories),
                              latents_chosen (distinct latents among the categories')},
                    categories: {name: {
                       latent (its id, as repr-jax features numbers it), threshold (0 for
                       "fires"), train_balanced_accuracy, balanced_accuracy: INTERVAL (test),
                       fires: {category, rest} (fraction of its test words, of the others',
                              above the threshold),
                       control: {latent, train_balanced_accuracy, balanced_accuracy: INTERVAL},
                       probe_balanced_accuracy}}}]}]
    unembedding: null (not a decoder) | {vocab (V), width, head ("tied" | "untied"),
                 categories: {name: {words (in its whole set), tokens (distinct
                                     single-token words kept), dropped (tokens shared with a
                                     category neither containing it)}},
                 hierarchy: [{parent, child, cosine: INTERVAL, control: INTERVAL}],
                 simplex: [{under: [the siblings' nearest named ancestors; [] at the top],
                            categories: [names], ratio, spread, control_ratio,
                            control_spread (each an INTERVAL)}],
                 skipped: [one line per pair or simplex left out, and why]}
    INTERVAL = {value, low, high} (low and high null with --bootstrap 0)

``mean.threshold`` and ``mean.sign`` are of the train-fit difference of means (unnormalised);
``mean.norm`` is the length of the all-words difference of means before it was scaled to the
unit vector written. A readable table goes to stdout: per layer the mean accuracies over
categories, then the decoder's orthogonality and simplex numbers.

**Cost**, for W words (C categories) of T tokens each, a model of depth ``depth`` and width D,
layers ``L`` analysed, R bootstrap resamples: the forward pass ``O(W T model)`` once (every block,
one batch of 64 words at a time: memory ``O(64 T D depth)``), features held ``O(L W D)``; per
layer the differences of means ``O(W D)``, the C probes ``O(C x 7 penalties x (W D min(W, D) +
min(W, D)^3 + iters W min(W, D)))`` (:func:`~repr_jax.eval.concepts.probe_directions`: the
dominant term), the bootstraps ``O(C R W)``. The unembedding analysis: ``O(V D^2 + D^3)``
(whitening) plus ``O(R (W_c D min(W_c, D) + min(W_c, D)^3))`` per category in each pair or
simplex (W_c: its tokens), memory ``O(V D)``. Each ``--sae`` run of S latents: its checkpoint
and store opened once (:func:`~repr_jax.train.run.load_trained` checks the store's digests:
``O(N D)`` for its N vectors), the encoding ``O(W D S)``, the choice of latent ``O(C W S)``
(``fires``: one count per latent) or ``O(C W S log W)`` (``threshold``: a sort per latent), each
twice (real and control), the bootstraps ``O(2 C R W)``; memory ``O(W S)``.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from repr_jax import files

FORMAT, VERSION = "repr_jax.concepts", 1
RESULT = "concepts.json"
DIRECTIONS = "directions"
TEST_FRACTION = 0.2
LEVEL = 0.95
BATCH = 64  # words encoded at once (one compilation)
NAMING = ("name a synset as LEMMA.n.NN (e.g. animal.n.01, dog.n.01; a bare lemma is its first "
          "sense), or give lexfile")


# --------------------------------------------------------------------------------------------------
# The concepts: WordNet categories and their words
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Categories:
    """The categories (module docstring): ``names`` in order, their ``sources`` (``noun.animal``
    or the synset as named) and ``synsets`` (offsets, None for lexfiles); ``sizes`` (words in each
    set before sampling) and ``words`` (each sample, sorted); ``below[i]`` the indices of the
    categories ``i`` contains; ``labelled`` (words) and ``labels`` (category indices) of the
    per-layer analysis; ``ambiguous`` the sampled words left out of it."""
    names: list[str]
    sources: list[str]
    synsets: list[int | None]
    sizes: list[int]
    words: list[list[str]]
    below: list[set[int]]
    labelled: list[str]
    labels: np.ndarray
    ambiguous: list[str]
    kind: str = "lexfile"
    everything: list[list[str]] = dataclasses.field(default_factory=list)  # each full set, sorted

    def contains(self, i: int, j: int) -> bool:
        return j in self.below[i]

    def nested(self, i: int, j: int) -> bool:
        """Whether one of the two categories contains the other (or they are one)."""
        return i == j or self.contains(i, j) or self.contains(j, i)


def file_name(name: str) -> str:
    """A category's ``.npy`` file name: characters other than letters, digits, ``.``, ``_``, ``-``
    as ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"


def _sample(words: Sequence[str], max_words: int, rng: np.random.Generator) -> list[str]:
    words = sorted(words)
    if len(words) <= max_words:
        return words
    return sorted(words[i] for i in rng.choice(len(words), max_words, replace=False))


@functools.lru_cache(maxsize=2)
def _hierarchy(wordnet_dir: str | None):
    """WordNet's noun hierarchy, read once per process (it is not changed after it is read)."""
    from repr_jax.data.wordnet_hierarchy import noun_hierarchy
    return noun_hierarchy() if wordnet_dir is None else noun_hierarchy(wordnet_dir)


def concept_words(categories: str | Sequence[str] = "lexfile", *, max_words: int = 200,
                  seed: int = 0, wordnet_dir: str | None = None) -> Categories:
    """The categories of ``--categories`` and their sampled words (module docstring); an unknown
    synset, a synset named twice, fewer than 2 categories, or a category with fewer than 2 words
    (sampled, or of its own in the per-layer analysis) is one line. Time: one read of WordNet
    (~1-2 s) plus the categories' closures."""
    from repr_jax.data.wordnet_hierarchy import (category_words, hypernym_closure,
                                                 lexfile_categories, synset)
    if isinstance(categories, str):
        specs = [s.strip() for s in categories.split(",") if s.strip()]
    else:
        specs = [str(s).strip() for s in categories if str(s).strip()]
    if not specs:
        raise ValueError(f"--categories {categories!r}: {NAMING}")
    rng = np.random.default_rng(seed)
    hierarchy = _hierarchy(wordnet_dir)
    if specs == ["lexfile"]:
        sets = lexfile_categories(hierarchy)
        names = [c[len("noun."):] if c.startswith("noun.") else c for c in sets]
        sources, offsets = list(sets), [None] * len(sets)
        full = [frozenset(v) for v in sets.values()]
        below: list[set[int]] = [set() for _ in names]
        kind = "lexfile"
    else:
        if "lexfile" in specs:
            raise ValueError(f"--categories {categories!r}: give lexfile alone, or synsets")
        offsets, seen = [], {}
        for s in specs:
            try:
                offset = synset(hierarchy, s).offset
            except ValueError as e:
                raise ValueError(f"--categories {s!r}: {e}; {NAMING}") from None
            if offset in seen:
                raise ValueError(f"--categories: {seen[offset]} and {s} name the same synset; "
                                 f"give it once")
            seen[offset] = s
            offsets.append(offset)
        names, sources = list(specs), list(specs)
        full = [category_words(hierarchy, o) for o in offsets]
        ancestors = [set(hypernym_closure(hierarchy, o)) for o in offsets]
        below = [{j for j in range(len(offsets)) if offsets[i] in ancestors[j]}
                 for i in range(len(offsets))]
        kind = "synsets"
    if len(names) < 2:
        raise ValueError(f"--categories {categories!r}: give at least 2 categories (each is "
                         f"read one-vs-rest: against the others)")
    files_ = [file_name(n) for n in names]
    clash = sorted({f for f in files_ if files_.count(f) > 1})
    if clash:
        raise ValueError(f"--categories: two categories would both be written as {clash[0]}; "
                         f"name them differently")
    samples = [_sample(w, max_words, rng) for w in full]
    for name, size, sample in zip(names, map(len, full), samples):
        if len(sample) < 2:
            raise ValueError(f"--categories: {name} has {size} single-word lemma(s)"
                             f"{' (' + ', '.join(sample) + ')' if sample else ''}; a concept needs "
                             f"at least 2 words")
    label: dict[str, int] = {}
    ambiguous = set()
    for i, sample in enumerate(samples):
        for word in sample:
            holders = [j for j in range(len(names)) if word in full[j]]
            deepest = [j for j in holders if all(k == j or j in below[k] for k in holders)]
            if len(deepest) != 1:
                ambiguous.add(word)
            elif deepest[0] == i:
                label[word] = i
    ambiguous -= set(label)
    counts = np.bincount(list(label.values()), minlength=len(names))
    for i, name in enumerate(names):
        if counts[i] < 2:
            inner = ", ".join(names[j] for j in sorted(below[i]))
            why = (f" (the others are in {inner}, below it)" if inner else
                   " (the others are also in a category that does not contain it)")
            raise ValueError(f"--categories: {name} has {counts[i]} word(s) of its own among its "
                             f"{len(samples[i])} sampled{why}; a concept needs at least 2: raise "
                             f"--max-words or name other synsets")
    labelled = sorted(label, key=lambda w: (label[w], w))
    return Categories(names, sources, offsets, [len(f) for f in full], samples, below, labelled,
                    np.asarray([label[w] for w in labelled], np.int32), sorted(ambiguous), kind,
                    [sorted(f) for f in full])


def split_words(labels: np.ndarray, seed: int = 0, test_fraction: float = TEST_FRACTION
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` indices (sorted), stratified by label: of each category's n words,
    ``round(test_fraction n)`` (at least 1, at most n - 1) drawn for test
    (``default_rng(seed)``, categories in label order). Time ``O(W)``."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    test = []
    for c in range(int(labels.max()) + 1 if len(labels) else 0):
        idx = np.flatnonzero(labels == c)
        if len(idx) < 2:
            raise ValueError(f"category {c} has {len(idx)} word(s); a split needs at least 2")
        k = min(len(idx) - 1, max(1, int(round(test_fraction * len(idx)))))
        test.extend(rng.permutation(idx)[:k].tolist())
    test_idx = np.asarray(sorted(test), np.int64)
    train_idx = np.setdiff1d(np.arange(len(labels)), test_idx)
    return train_idx, test_idx


# --------------------------------------------------------------------------------------------------
# The words' representations
# --------------------------------------------------------------------------------------------------

def check_template(template: str) -> tuple[str, str]:
    """``(prefix, suffix)`` around the template's one ``{}``; anything else is one line."""
    if not isinstance(template, str) or template.count("{}") != 1:
        raise ValueError(f"--template {template!r}: put {{}} once where the word goes, e.g. "
                         f"\"{{}}\" or \"a picture of a {{}}\"")
    prefix, _, suffix = template.partition("{}")
    return prefix, suffix


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def word_positions(model, words: Sequence[str], template: str = "{}"
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(ids [W, T], weights [W, T])``: each word's text (``template``) as the model reads a
    document, and the weights that read its representation off a layer's states
    (``sum_t weights[w, t] h[w, t]``): one-hot at the word's last token for a decoder_lm, uniform
    over its tokens otherwise (module docstring). A text cut at the model's length is one line.
    Time ``O(W T)``."""
    from repr_jax.data.tokenizer import Cuts
    from repr_jax.train.activations import trim_columns
    prefix, suffix = check_template(template)
    cuts = Cuts()
    tok, sides = model.tokenizer, model.sides

    def encode(texts):
        return np.asarray(sides.encode(tok, texts, "doc", cuts=cuts), np.int32)

    full = encode([prefix + w + suffix for w in words])
    head = encode([prefix + w for w in words]) if suffix else full
    base = encode([prefix.rstrip()])
    if cuts.cut["doc"]:
        raise ValueError(f"{cuts.cut['doc']} of the words' texts (template {template!r}) are "
                         f"longer than the model's {sides.length('doc')} tokens")
    sep = getattr(tok, "sep_id", None)

    def core(ids_T):
        valid = np.asarray(model.valid(ids_T[None]))[0]
        n = int(valid.sum())
        if not valid[:n].all():
            raise ValueError("word_positions expects right-padded rows")
        row = ids_T[:n]
        return row[:-1] if sep is not None and n and row[-1] == sep else row

    base_core = core(base[0])
    last = model.family == "decoder_lm"
    weights = np.zeros(full.shape, np.float32)
    for i in range(len(words)):
        text = core(full[i])
        if not len(text):
            raise ValueError(f"the word {words[i]!r} has no token (template {template!r})")
        start = min(_lcp(base_core, text), len(text) - 1)
        stop = min(max(_lcp(core(head[i]), text), start + 1), len(text))
        if last:
            weights[i, stop - 1] = 1.0
        else:
            weights[i, start:stop] = 1.0 / (stop - start)
    trimmed = trim_columns(full, np.asarray(model.valid(full)))
    return trimmed, weights[:, :trimmed.shape[1]]


def word_features(model, ids_WxT: np.ndarray, weights_WxT: np.ndarray, layers: Sequence[int], *,
                  batch_size: int = BATCH, bar=None) -> np.ndarray:
    """``[len(layers), W, D]`` float32: ``sum_t weights[w, t] h_L[w, t]`` for each layer ``L``
    (every block computed once per batch; the last batch padded with repeats, so one program
    compiles). Time ``O(W T model)``, memory ``O(B T D depth + L W D)``."""
    import jax
    import jax.numpy as jnp
    layers = tuple(int(l) for l in layers)

    def f(variables, ids, w_BxT):
        hs = model.layers(variables, ids)
        w = w_BxT[:, :, None]
        return jnp.stack([(w * hs[l].astype(jnp.float32)).sum(axis=1) for l in layers])

    fn = jax.jit(f)
    n = len(ids_WxT)
    b = max(1, min(batch_size, n))
    out = None
    for s in range(0, n, b):
        ids, w = ids_WxT[s:s + b], weights_WxT[s:s + b]
        pad = b - len(ids)
        if pad:
            ids = np.concatenate([ids, np.repeat(ids[-1:], pad, 0)])
            w = np.concatenate([w, np.repeat(w[-1:], pad, 0)])
        h = np.asarray(jax.device_get(fn(model.variables, ids, w)), np.float32)[:, :b - pad]
        if out is None:
            out = np.zeros((len(layers), n, h.shape[-1]), np.float32)
        out[:, s:s + b - pad] = h
        if bar is not None:
            bar.update(b - pad)
    return out


# --------------------------------------------------------------------------------------------------
# The analyses
# --------------------------------------------------------------------------------------------------

def _interval(v) -> dict:
    """``{value, low, high}`` of an Estimate or float (nan bounds as null)."""
    def clean(x):
        x = float(x)
        return None if math.isnan(x) else x
    return {"value": clean(v), "low": clean(getattr(v, "low", math.nan)),
            "high": clean(getattr(v, "high", math.nan))}


def _balanced(predicted, truth) -> float:
    predicted, truth = np.asarray(predicted).astype(bool), np.asarray(truth).astype(bool)
    recalls = [float((predicted[truth == t] == t).mean()) for t in (True, False)
               if (truth == t).any()]
    return float(np.mean(recalls))


def unit_directions(x_WxD, labels_W, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(directions [C, D] float32 unit rows, norms [C])``: each category's one-vs-rest
    difference of means over all the words, and its length before scaling."""
    from repr_jax.eval.concepts import difference_of_means
    d = np.asarray(difference_of_means(x_WxD, labels_W, num_classes=num_classes), np.float64)
    norms = np.linalg.norm(d, axis=1)
    return (d / np.maximum(norms, np.finfo(np.float64).tiny)[:, None]).astype(np.float32), norms


def layer_analysis(x_WxD, labels_W, train, test, names: Sequence[str], *, bootstrap: int = 1000,
                   seed: int = 0) -> dict[str, Any]:
    """One layer's rows (module docstring's ``per_layer`` entry without ``layer``/``directions``),
    plus ``"_directions"``: the unit all-words differences of means ``[C, D]``. Costs: the
    module docstring's per-layer terms."""
    from repr_jax.eval.concepts import (difference_of_means, held_out_accuracy, probe_directions,
                                        shuffled_accuracy)
    x = np.asarray(x_WxD, np.float32)
    labels = np.asarray(labels_W)
    c = len(names)
    x_train, x_test, y_train, y_test = x[train], x[test], labels[train], labels[test]
    mean_CxD = difference_of_means(x_train, y_train, num_classes=c)
    probe = probe_directions(x_train, y_train, x_test, y_test, num_classes=c, seed=seed,
                             bootstrap=bootstrap, level=LEVEL, balanced=True)
    directions, norms = unit_directions(x, labels, c)
    rows = {}
    for k, name in enumerate(names):
        positive_train, positive_test = y_train == k, y_test == k
        mean = held_out_accuracy(mean_CxD[k], x_train, positive_train, x_test, positive_test,
                                 bootstrap=bootstrap, level=LEVEL)
        control = shuffled_accuracy(x_train, positive_train, x_test, positive_test,
                                    method="mean", seed=seed, bootstrap=bootstrap, level=LEVEL)
        probe_correct = probe["correct_CxM"][k] > 0
        rows[name] = dict(
            mean=dict(accuracy=_interval(mean["accuracy"]),
                      balanced_accuracy=_balanced(mean["predicted"], positive_test),
                      threshold=mean["threshold"], sign=mean["sign"], norm=float(norms[k])),
            probe=dict(accuracy=_interval(probe["accuracy"][k]),
                       balanced_accuracy=_balanced(np.where(probe_correct, positive_test,
                                                            ~positive_test), positive_test),
                       l2=float(probe["l2_C"][k])),
            control=dict(accuracy=_interval(control["accuracy"]),
                         balanced_accuracy=_balanced(
                             np.where(control["correct"] > 0, control["labels"],
                                      ~control["labels"]), control["labels"]),
                         chance=control["chance"]))

    def average(part, key):
        values = [r[part][key] for r in rows.values()]
        return float(np.mean([v["value"] if isinstance(v, dict) else v for v in values]))
    summary = dict(accuracy=average("mean", "accuracy"),
                   balanced_accuracy=average("mean", "balanced_accuracy"),
                   probe_accuracy=average("probe", "accuracy"),
                   probe_balanced_accuracy=average("probe", "balanced_accuracy"),
                   control_accuracy=average("control", "accuracy"),
                   control_balanced_accuracy=average("control", "balanced_accuracy"),
                   control_chance=average("control", "chance"))
    return dict(summary=summary, categories=rows, _directions=directions)


# --------------------------------------------------------------------------------------------------
# Sparse autoencoders' latents as one-latent classifiers (--sae)
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class SAE:
    """An ``--sae`` run: its absolute path, config and store's ``meta.json``; ``method`` and
    ``state`` once loaded (:func:`load_sae`)."""
    run: Path
    cfg: Any
    meta: dict
    method: Any = None
    state: Any = None


def check_sae_runs(runs: Sequence[str | Path]) -> list[SAE]:
    """Each ``--sae`` run's config and store metadata (no checkpoint read): a run given twice,
    a folder that is not a run, a run that is not an SAE on an activation store, or a store
    that cannot be read is one line. Time ``O(runs)`` small file reads."""
    from repr_jax import config as config_lib
    from repr_jax.data.activations import PREFIX, folder_of, read_meta
    from repr_jax.train.run import run_config_path
    out: list[SAE] = []
    for given in runs:
        run = Path(given).expanduser().absolute()
        if any(s.run == run for s in out):
            raise ValueError(f"--sae {given}: given twice; give each SAE run once")
        if not run.is_dir():
            raise ValueError(f"--sae {given}: no such folder (give an SAE run directory)")
        try:
            cfg = config_lib.load_json(run_config_path(run))
        except ValueError as e:
            raise ValueError(f"--sae {given}: {e}") from None
        if cfg.method.name != "sae" or not cfg.data.name.startswith(PREFIX):
            what = (f"a {cfg.method.name} run" if cfg.method.name != "sae"
                    else f"an SAE trained on {cfg.data.name}")
            raise ValueError(f"--sae {given}: {what}, not a sparse autoencoder on an activation "
                             f"store (method.name=sae, data.name=activations:DIR)")
        try:
            meta = read_meta(folder_of(cfg.data.name))
        except ValueError as e:
            raise ValueError(f"--sae {given}: its store is not readable: {e}") from None
        out.append(SAE(run, cfg, meta))
    return out


def check_sae_layers(saes: Sequence[SAE], *, model_name: str, layers: Sequence[int]) -> None:
    """Each SAE's store must be of the model read and one of the layers analysed; else one line
    naming both."""
    for s in saes:
        layer, model = s.meta["layer"], s.meta["model"]
        if model != model_name:
            raise ValueError(f"--sae {s.run}: the SAE read layer {layer} of {model}; this is "
                             f"{model_name}")
        if layer not in layers:
            raise ValueError(f"--sae {s.run}: the SAE read layer {layer} of {model}; --layers "
                             f"are {','.join(map(str, layers))}")


def load_sae(s: SAE) -> SAE:
    """``s`` with its method and latest checkpoint (:func:`repr_jax.train.run.load_trained`,
    which opens and verifies its store: ``O(N D)`` once)."""
    from repr_jax.train.run import load_trained
    _, _, s.method, s.state = load_trained(s.run)
    return s


def sae_latents(s: SAE, x_WxD: np.ndarray, *, batch_size: int = 1024) -> np.ndarray:
    """``[W, L]`` float32: the SAE's latent activations of ``x`` (its own ``embed``: the input
    scale, ``x - b_dec``, the encoder and its activation, eval mode; the columns are the latent
    ids ``repr-jax features`` shows), a batch at a time, the last padded with repeats (one
    compilation). Time ``O(W D L)``, memory ``O(B (D + L) + W L)``."""
    import jax
    embed = jax.jit(s.method.embed)  # the SAE's weights an argument, as features does
    x = np.asarray(x_WxD, np.float32)
    b = max(1, min(batch_size, len(x)))
    parts = []
    for start in range(0, len(x), b):
        chunk = x[start:start + b]
        pad = b - len(chunk)
        if pad:
            chunk = np.concatenate([chunk, np.repeat(chunk[-1:], pad, 0)])
        parts.append(np.asarray(jax.device_get(embed(s.state.variables, chunk)),
                                np.float32)[:b - pad])
    return np.concatenate(parts)


def sae_analysis(z_WxL, labels_W, train, test, names: Sequence[str], probe_balanced, *,
                 rule: str = "fires", bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The ``summary`` and ``categories`` of one SAE's entry (module docstring): per category
    one-vs-rest :func:`~repr_jax.eval.concepts.best_latent` on the split, and the same on the
    train and test labels each permuted within their split as
    :func:`~repr_jax.eval.concepts.shuffled_accuracy` permutes them (``default_rng(seed)``,
    train first; one permutation of the labels serves every category, as it does there);
    ``probe_balanced[name]`` is the category's probe balanced accuracy at the layer. Time
    ``O(C W L)`` (``"fires"``) or ``O(C W L log W)`` (``"threshold"``), plus ``O(C R W)``."""
    from repr_jax.eval.concepts import best_latent
    z = np.asarray(z_WxL, np.float32)
    labels = np.asarray(labels_W)
    z_train, z_test, y_train, y_test = z[train], z[test], labels[train], labels[test]
    rng = np.random.default_rng(seed)
    shuffled_train, shuffled_test = rng.permutation(y_train), rng.permutation(y_test)
    kw = dict(rule=rule, bootstrap=bootstrap, level=LEVEL)

    def clean(x):
        return None if math.isnan(x) else float(x)
    rows = {}
    for k, name in enumerate(names):
        real = best_latent(z_train, y_train == k, z_test, y_test == k, **kw)
        control = best_latent(z_train, shuffled_train == k, z_test, shuffled_test == k, **kw)
        rows[name] = dict(
            latent=real["latent"], threshold=real["threshold"],
            train_balanced_accuracy=real["train_balanced_accuracy"],
            balanced_accuracy=_interval(real["balanced_accuracy"]),
            fires=dict(category=clean(real["rates"][0]), rest=clean(real["rates"][1])),
            control=dict(latent=control["latent"],
                         train_balanced_accuracy=control["train_balanced_accuracy"],
                         balanced_accuracy=_interval(control["balanced_accuracy"])),
            probe_balanced_accuracy=float(probe_balanced[name]))
    summary = dict(
        balanced_accuracy=float(np.mean([r["balanced_accuracy"]["value"] for r in rows.values()])),
        control_balanced_accuracy=float(np.mean([r["control"]["balanced_accuracy"]["value"]
                                                 for r in rows.values()])),
        probe_balanced_accuracy=float(np.mean([r["probe_balanced_accuracy"]
                                               for r in rows.values()])),
        latents_chosen=len({r["latent"] for r in rows.values()}))
    return dict(summary=summary, categories=rows)


def unembedding_matrix(model, cfg) -> tuple[np.ndarray, str]:
    """``(gamma [V, D] float32, "tied" | "untied")``: a decoder's output head, as
    :func:`repr_jax.train.steer.steer` reads it (the weights' own head where untied)."""
    from repr_jax.encoders.decoder_lm import _output_matrix
    from repr_jax.encoders.decoder_lm_weights import output_head
    spec = model.describe["model"] if cfg is None else getattr(cfg.encoder, "init_from", "")
    head = output_head(spec) if spec else None
    gamma = _output_matrix(model.variables, head)
    return np.asarray(gamma, np.float32), ("tied" if head is None else "untied")


def category_tokens(tokenizer, concepts: Categories) -> tuple[list[list[int]], list[int]]:
    """``(tokens per category, dropped per category)``: the distinct tokens of the words of each
    category's whole set (``everything``; the sample where it is not kept) that are one token as
    a continuation (``" " + word``), as Park et al. keep the words the vocabulary holds whole (a
    longer word's first token is a fragment such as `` aard``), less those shared with a
    category neither containing the other. Time ``O(sum of set sizes)`` tokenisations."""
    tokens = []
    for words in concepts.everything or concepts.words:
        ids = []
        for w in words:
            t = tokenizer.tokenize(" " + w)
            if len(t) == 1 and int(t[0]) not in ids:
                ids.append(int(t[0]))
        tokens.append(ids)
    owners: dict[int, set[int]] = {}
    for i, ids in enumerate(tokens):
        for t in ids:
            owners.setdefault(t, set()).add(i)
    kept, dropped = [], []
    for i, ids in enumerate(tokens):
        keep = [t for t in ids if all(concepts.nested(i, j) for j in owners[t])]
        kept.append(keep)
        dropped.append(len(ids) - len(keep))
    return kept, dropped


def sibling_groups(concepts: Categories) -> list[tuple[list[int], list[int]]]:
    """``[(nearest named ancestors, sibling categories)]``: categories grouped by the set of
    their nearest containing categories (none of a group contains another); groups of 3 or
    more, in the categories' order."""
    n = len(concepts.names)
    groups: dict[frozenset, list[int]] = {}
    for i in range(n):
        above = {j for j in range(n) if concepts.contains(j, i)}
        nearest = frozenset(j for j in above
                            if not any(concepts.contains(j, k) for k in above if k != j))
        groups.setdefault(nearest, []).append(i)
    return [(sorted(key), members) for key, members in groups.items() if len(members) >= 3]


def unembedding_analysis(gamma_VxD: np.ndarray, tokenizer, concepts: Categories, *,
                         bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The ``unembedding`` entry of the module docstring (less ``head``). Costs: the module
    docstring's."""
    from repr_jax.eval.concepts import (causal_coordinates, causal_transform, hierarchy_cosine,
                                        simplex_test)
    gamma = np.asarray(gamma_VxD, np.float32)
    v, d = gamma.shape
    mean_D, a_DxD = causal_transform(gamma)
    g_VxD = causal_coordinates(gamma, mean_D, a_DxD)
    tokens, dropped = category_tokens(tokenizer, concepts)
    names = concepts.names
    out: dict[str, Any] = dict(
        vocab=int(v), width=int(d),
        categories={n: dict(words=len(w), tokens=len(t), dropped=k)
                    for n, w, t, k in zip(names, concepts.everything or concepts.words, tokens,
                                          dropped)},
        hierarchy=[], simplex=[], skipped=[])
    kw = dict(bootstrap=bootstrap, level=LEVEL, seed=seed)
    few = [i for i in range(len(names)) if len(tokens[i]) < 2]
    for p in range(len(names)):
        for c in sorted(concepts.below[p]):
            short = [names[i] for i in (p, c) if i in few]
            if short:
                out["skipped"].append(f"hierarchy {names[p]} > {names[c]}: "
                                      f"{', '.join(short)} has fewer than 2 tokens")
                continue
            r = hierarchy_cosine(g_VxD[tokens[p]], g_VxD[tokens[c]], g_VxD, **kw)
            out["hierarchy"].append(dict(parent=names[p], child=names[c],
                                         cosine=_interval(r["cosine"]),
                                         control=_interval(r["control"])))
    for above, members in sibling_groups(concepts):
        under = [names[j] for j in above]
        where = f"under {', '.join(under)}" if under else "at the top"
        kept = [i for i in members if i not in few]
        if len(kept) < len(members):
            out["skipped"].append(f"simplex {where}: left out "
                                  f"{', '.join(names[i] for i in members if i in few)} "
                                  f"(fewer than 2 tokens)")
        if len(kept) < 3 or len(kept) > d + 1:
            out["skipped"].append(f"simplex {where}: {len(kept)} categories; the test takes 3 "
                                  f"to D + 1 = {d + 1}")
            continue
        r = simplex_test([g_VxD[tokens[i]] for i in kept], **kw)
        out["simplex"].append(dict(under=under, categories=[names[i] for i in kept],
                                   **{k: _interval(r[k]) for k in
                                      ("ratio", "spread", "control_ratio", "control_spread")}))
    return out


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------

def parse_layers(layers) -> list[int] | None:
    """``--layers``: None for ``all``, else the blocks (counted from 0, duplicates once); anything
    else is one line (:func:`repr_jax.train.activations.parse_layer`)."""
    from repr_jax.train.activations import parse_layer
    if layers is None or (isinstance(layers, str) and layers.strip() in ("all", "")):
        return None
    parts = layers.split(",") if isinstance(layers, str) else list(layers)
    out: list[int] = []
    for part in parts:
        part = part.strip() if isinstance(part, str) else part
        if part == "":
            continue
        try:
            value = parse_layer(part)
        except ValueError:
            raise ValueError(f"--layers {layers!r}: give blocks counted from 0 (e.g. 0,5,11) or "
                             f"all") from None
        if value == "embedding":
            raise ValueError("--layers embedding: concepts reads the blocks' token states; give "
                             "blocks counted from 0, or all")
        if value not in out:
            out.append(value)
    if not out:
        raise ValueError(f"--layers {layers!r}: give blocks counted from 0 (e.g. 0,5,11) or all")
    return out


def _check_layers(layers: list[int], depth: int, family: str) -> None:
    from repr_jax.train.activations import check_layer
    for layer in layers:
        try:
            check_layer(layer, depth, family)
        except ValueError as e:
            raise ValueError(str(e).replace("--layer ", "--layers ", 1)
                             .removesuffix(" or embedding")) from None


def _old_direction_files(out: Path) -> set[Path]:
    """The direction files already in ``out`` (a folder this command wrote,
    :func:`_check_out_folder`): those a previous ``concepts.json`` lists and any other
    ``directions/layer_*/*.npy`` (a killed run's, which no ``concepts.json`` lists); the
    temporaries a killed run left there are removed, one warning each."""
    old = set(out.glob(f"{DIRECTIONS}/layer_*/*.npy"))
    for tmp in out.glob(f"{DIRECTIONS}/layer_*/.*.npy.*.tmp"):  # named as files.write_* names
        name = re.fullmatch(r"\.(.+\.npy)\.[a-z0-9_]+\.tmp", tmp.name)
        if name:
            files.remove_stale(tmp.parent, re.escape(tmp.name), f"a temporary copy of "
                               f"{name.group(1)}")
    try:
        previous = files.read_json(out / RESULT)
        return old | {out / row["directions"] / c["file"] for row in previous.get("per_layer", [])
                      for c in previous.get("categories", [])}
    except (OSError, ValueError, KeyError, TypeError):
        return old


def _check_out_folder(out: Path) -> None:
    """A new or empty folder, or one holding only a previous concepts output (``concepts.json``,
    ``directions/``); else one line."""
    if not out.exists():
        return
    other = sorted(p.name for p in out.iterdir() if p.name not in (RESULT, DIRECTIONS)
                   and not (p.name.startswith(".") and p.name.endswith(".tmp")))
    if other:
        raise ValueError(f"--out {out} holds other files ({', '.join(other[:3])}) and is not a "
                         f"concepts folder; give a new or empty folder, or one this command "
                         f"wrote")


def _save_npy(path: Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    files.write_bytes(path, buffer.getvalue())


def concepts(*, out: str | Path, workdir: str | None = None, init_from: str | None = None,
             categories: str | Sequence[str] = "lexfile", layers="all", template: str = "{}",
             max_words: int = 200, bootstrap: int = 1000, seed: int = 0, progress: bool = True,
             batch_size: int = BATCH, wordnet_dir: str | None = None,
             sae: Sequence[str | Path] = (), sae_rule: str = "fires") -> dict[str, Any]:
    """Runs the analysis (module docstring), writes the directions and ``concepts.json`` to
    ``out``, prints the table and returns the JSON's content. Every input is checked before the
    model runs (the layers' range and the ``sae`` runs' model and layer right after it loads),
    one line each."""
    from repr_jax import __version__
    from repr_jax.train.activations import load_model
    if bool(workdir) == bool(init_from):
        raise ValueError("give one of --workdir RUN or --init-from MODEL")
    check_template(template)
    if max_words < 2:
        raise ValueError(f"--max-words must be at least 2, got {max_words}")
    if bootstrap < 0:
        raise ValueError(f"--bootstrap must be at least 0, got {bootstrap}")
    if seed < 0:
        raise ValueError(f"--seed must be at least 0, got {seed}")
    chosen = parse_layers(layers)
    from repr_jax.eval.concepts import LATENT_RULES
    if sae_rule not in LATENT_RULES:
        raise ValueError(f"--sae-rule {sae_rule!r}; choose from {', '.join(LATENT_RULES)}")
    saes = check_sae_runs(sae or ())
    inputs = [Path(p) for p in (workdir, init_from) if p and Path(p).exists()]
    inputs += [s.run for s in saes]
    out = files.check_output(out, flag="--out", inputs=inputs, folder=True)
    files.check_writable(out, flag="--out")
    _check_out_folder(out)
    concept = concept_words(categories, max_words=max_words, seed=seed, wordnet_dir=wordnet_dir)

    model, cfg = load_model(workdir=workdir, init_from=init_from, text=True, skip_first=0)
    if model.tokenizer is None or model.family not in ("decoder_lm", "text_transformer"):
        raise ValueError(f"concepts reads words as text: it takes a text_transformer or a "
                         f"decoder_lm, not a {model.family}")
    chosen = list(range(model.depth)) if chosen is None else chosen
    _check_layers(chosen, model.depth, model.family)
    check_sae_layers(saes, model_name=model.describe["model"], layers=chosen)
    ids, weights = word_positions(model, concept.labelled, template)
    saes = [load_sae(s) for s in saes]
    if model.family == "decoder_lm" and not check_template(template)[0] and any(
            s.meta.get("skip_first", 0) for s in saes):
        print(f"repr-jax: warning: concepts: template {template!r} puts each word first, so a "
              f"one-token word is read at position 0 (the attention sink), which the SAEs' "
              f"stores left out (skip_first); give words before {{}}, e.g. \"a {{}}\"",
              file=sys.stderr)
    train, test = split_words(concept.labels, seed)

    from tqdm.auto import tqdm
    with tqdm(total=len(ids), desc="concepts: words", unit="word", leave=False,
              dynamic_ncols=True, disable=not progress) as bar:
        features = word_features(model, ids, weights, chosen, batch_size=batch_size, bar=bar)
    width = int(features.shape[-1])
    names = concept.names
    old_files = _old_direction_files(out)
    written: set[Path] = set()
    per_layer = []
    for k, layer in enumerate(tqdm(chosen, desc="concepts: layers", unit="layer", leave=False,
                                   dynamic_ncols=True, disable=not progress)):
        row = layer_analysis(features[k], concept.labels, train, test, names,
                             bootstrap=bootstrap, seed=seed)
        folder = f"{DIRECTIONS}/layer_{layer}"
        for name, direction in zip(names, row.pop("_directions")):
            path = out / folder / file_name(name)
            _save_npy(path, direction)
            written.add(path)
        probe = {n: r["probe"]["balanced_accuracy"] for n, r in row["categories"].items()}
        row["sae"] = []
        for s in (s for s in saes if s.meta["layer"] == layer):
            z_WxL = sae_latents(s, features[k])
            row["sae"].append(dict(
                run=str(s.run), step=int(s.state.step), activation=s.cfg.method.activation,
                latents=int(z_WxL.shape[1]), rule=sae_rule,
                **sae_analysis(z_WxL, concept.labels, train, test, names, probe, rule=sae_rule,
                               bootstrap=bootstrap, seed=seed)))
        per_layer.append(dict(layer=layer, directions=folder, **row))

    unembedding = None
    if model.family == "decoder_lm":
        gamma, head = unembedding_matrix(model, cfg)
        unembedding = dict(head=head, **unembedding_analysis(
            gamma, model.tokenizer, concept, bootstrap=bootstrap, seed=seed))

    test_counts = np.bincount(concept.labels[test], minlength=len(names))
    train_counts = np.bincount(concept.labels[train], minlength=len(names))
    labelled_of = [[w for w, l in zip(concept.labelled, concept.labels) if l == i]
                   for i in range(len(names))]
    result = dict(
        format=FORMAT, version=VERSION, created_by=f"repr_jax {__version__}",
        model=model.describe["model"], step=model.describe["step"], family=model.family,
        depth=int(model.depth), width=width, categories_from=concept.kind, template=template,
        max_words=max_words, seed=seed, bootstrap=bootstrap, level=LEVEL,
        representation=("the hidden state at the word's last token" if model.family ==
                        "decoder_lm" else "the mean of the hidden states over the word's tokens"),
        layers=chosen,
        categories=[dict(name=n, source=s, synset=o, file=file_name(n),
                         below=[names[j] for j in sorted(concept.below[i])], size=size,
                         count=len(words), words=words, labelled=labelled_of[i],
                         train=int(train_counts[i]), test=int(test_counts[i]))
                    for i, (n, s, o, size, words) in enumerate(zip(
                        names, concept.sources, concept.synsets, concept.sizes, concept.words))],
        left_out=dict(ambiguous=concept.ambiguous),
        per_layer=per_layer, unembedding=unembedding)
    files.write_json(out / RESULT, result)
    for stale in old_files - written:
        stale.unlink(missing_ok=True)
    for folder in out.glob(f"{DIRECTIONS}/layer_*"):  # a layer no longer analysed
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    print_table(result, out)
    return result


def _fmt(v: dict) -> str:
    if v["value"] is None:
        return "—"
    text = f"{v['value']:+.3f}"
    return text + (f" [{v['low']:+.3f}, {v['high']:+.3f}]" if v["low"] is not None else "")


def _ba(v: dict) -> str:
    if v["value"] is None:
        return "—"
    return f"{v['value']:.3f}" + (f" [{v['low']:.3f}, {v['high']:.3f}]"
                                  if v["low"] is not None else "")


def print_sae_table(entry: dict, layer: int) -> None:
    """One ``--sae`` entry of a layer: per category the chosen latent and its held-out balanced
    accuracy, beside the shuffled-label control's and the probe's (module docstring)."""
    s = entry["summary"]
    rule = ("fires (activation > 0)" if entry["rule"] == "fires"
            else "above its best threshold on train")
    print(f"\nSAE {entry['run']} (layer {layer}, {entry['latents']:,} {entry['activation']} "
          f"latents): per category the latent whose rule, {rule}, best separates it on train "
          f"(balanced accuracy), scored on test; mean {s['balanced_accuracy']:.3f}, control "
          f"{s['control_balanced_accuracy']:.3f}, probe {s['probe_balanced_accuracy']:.3f}; "
          f"{s['latents_chosen']} distinct latents\n")
    print("| category | latent | held-out balanced | train | fires on category / rest "
          "| shuffled control | probe |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in entry["categories"].items():
        f = r["fires"]
        rates = " / ".join("—" if v is None else f"{v:.2f}" for v in (f["category"], f["rest"]))
        print(f"| {name} | {r['latent']} | {_ba(r['balanced_accuracy'])} | "
              f"{r['train_balanced_accuracy']:.3f} | {rates} | "
              f"{_ba(r['control']['balanced_accuracy'])} | {r['probe_balanced_accuracy']:.3f} |")


def print_table(result: dict, out: Path | None = None) -> None:
    """The readable summary of a ``concepts.json`` (module docstring), to stdout."""
    cats = result["categories"]
    words = sum(len(c["labelled"]) for c in cats)
    train = sum(c["train"] for c in cats)
    print(f"concepts: {result['model']} ({result['family']}, {result['depth']} blocks, width "
          f"{result['width']}); {len(cats)} categories ({result['categories_from']}), {words} "
          f"words ({train} train, {words - train} test); template {result['template']!r}: "
          f"{result['representation']}")
    print(f"\nheld-out one-vs-rest accuracy, mean over the {len(cats)} categories (intervals per "
          f"category in {RESULT}):\n")
    print("| layer | difference of means | balanced | probe | probe balanced | shuffled control "
          "| control balanced | chance |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in result["per_layer"]:
        s = row["summary"]
        print(f"| {row['layer']} | {s['accuracy']:.3f} | {s['balanced_accuracy']:.3f} | "
              f"{s['probe_accuracy']:.3f} | {s['probe_balanced_accuracy']:.3f} | "
              f"{s['control_accuracy']:.3f} | {s['control_balanced_accuracy']:.3f} | "
              f"{s['control_chance']:.3f} |")
    for row in result["per_layer"]:
        for entry in row.get("sae", ()):
            print_sae_table(entry, row["layer"])
    if out is not None:
        print(f"\ndirections (unit, fit on all words) -> {out}/{DIRECTIONS}/layer_L/CATEGORY.npy")
    u = result.get("unembedding")
    if u:
        print(f"\nunembedding space (causal inner product, Park et al. 2024): {u['vocab']:,} "
              f"tokens, width {u['width']}, {u['head']} head")
        if u["hierarchy"]:
            print("\nhierarchical orthogonality, cos(l_parent, l_child - l_parent) (0 predicted; "
                  "control: the child's tokens replaced by random ones):\n")
            print("| parent | child | cosine | control |")
            print("| --- | --- | ---: | ---: |")
            for h in u["hierarchy"]:
                print(f"| {h['parent']} | {h['child']} | {_fmt(h['cosine'])} | "
                      f"{_fmt(h['control'])} |")
        if u["simplex"]:
            print("\nsimplex of sibling categories (ratio s_min/s_max of l_i - l_1: 0 collapsed; "
                  "spread s_max/mean|l|; control: labels shuffled):\n")
            print("| categories | ratio | spread | control ratio | control spread |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for s in u["simplex"]:
                shown = ", ".join(s["categories"][:6]) + (
                    f", … ({len(s['categories'])})" if len(s["categories"]) > 6 else "")
                print(f"| {shown} | {_fmt(s['ratio'])} | {_fmt(s['spread'])} | "
                      f"{_fmt(s['control_ratio'])} | {_fmt(s['control_spread'])} |")
        for line in u["skipped"]:
            print(f"skipped: {line}")
    sys.stdout.flush()
