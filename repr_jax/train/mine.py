"""Hard-negative mining: ``repr-jax mine`` (sentence-transformers' ``util.mine_hard_negatives``).

For every (query, positive) pair of a ``pairs:`` file or a BEIR collection's ``qrels/train.tsv``,
the corpus (BEIR: its documents; a pairs file: every distinct positive and negative text) is
searched exactly (:func:`repr_jax.eval.retrieval.retrieve`, tiled) with the query tower of a
trained run or a local sentence-transformers model, and the negatives are chosen from the
documents ranked ``[range_min, range_max)`` among those that are not one of the query's positives,
keeping those scoring below ``max_score`` and below ``positive score - margin``, the best first
(``sampling="top"``) or drawn at random. The result is a ``pairs:`` file (written atomically) with
the scores beside the texts; a pair with no negative passing the filters is left out and counted.
The corpus embeddings are kept beside the output (``<out>.cache/``), keyed by the model and the
token ids, so mining again with other knobs does not encode again.

Cost (Q queries, N documents, D dims): encoding ``O((Q + N) T^2)`` per model; search ``O(Q N D)``
time and ``O(N D)`` memory plus a tile.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from repr_jax.data.tokenizer import Sides, make_tokenizer

SAMPLING = ("top", "random")


@dataclasses.dataclass
class MiningData:
    """Queries, corpus texts, and the pairs to mine for: ``pairs[i] = (query index, positive's
    corpus index)``."""
    queries: list[str]
    corpus: list[str]
    pairs: list[tuple[int, int]]

    @property
    def positives(self) -> list[set[int]]:
        """``positives[q]``: every corpus index paired with query ``q`` (never its negative)."""
        out: list[set[int]] = [set() for _ in self.queries]
        for q, d in self.pairs:
            out[q].add(d)
        return out


def input_files(spec: str) -> list[Path]:
    """The files ``pairs:FILE`` or ``beir:DIR`` reads (a missing one: a one-line ValueError)."""
    from repr_jax.data import text_pairs
    if spec.startswith(text_pairs.BEIR):
        from repr_jax.data import beir
        root = beir.check_layout(spec[len(text_pairs.BEIR):])
        return [root / f for f in beir.FILES] + sorted((root / "qrels").glob("*.tsv"))
    if not spec.startswith(text_pairs.PAIRS):
        raise ValueError(f"--data takes pairs:FILE.jsonl or beir:DIR, not {spec!r}")
    return [text_pairs.path_of(spec, flag="--data")]


def check_text_run(workdir: str | Path) -> None:
    """A one-line ValueError when the run in ``workdir`` does not read text with a tokenizer
    (its towers could not encode the pairs' text). (A reranker's first stage and a compare arm
    are checked by :func:`repr_jax.train.arms.check_arm`, which names their own option.)"""
    from repr_jax import config as config_lib
    from repr_jax.data.tokenizer import TextData
    from repr_jax.encoders import TOKEN_FAMILIES
    from repr_jax.train.run import run_config_path
    cfg = config_lib.load_json(run_config_path(Path(workdir)))
    if cfg.encoder.name not in TOKEN_FAMILIES:
        raise ValueError(f"--workdir {workdir}: its encoder {cfg.encoder.name!r} reads "
                         f"{cfg.data.name} inputs, not text; this command needs a run whose model "
                         f"read text ({', '.join(TOKEN_FAMILIES)} on pairs:, beir: or wordnet)")
    if not isinstance(cfg.data, TextData):
        raise ValueError(f"--workdir {workdir}: it was trained on {cfg.data.name}, whose tokens "
                         f"are not text a tokenizer reads")


def mining_data(spec: str) -> MiningData:
    """The pairs and corpus of ``pairs:FILE`` or ``beir:DIR``."""
    from repr_jax.data import text_pairs
    if spec.startswith(text_pairs.BEIR):
        from repr_jax.data import beir
        c = beir.read_collection(spec[len(text_pairs.BEIR):])
        if "train" not in c.qrels:
            raise ValueError(f"{spec}: no qrels/train.tsv: nothing to mine negatives for")
        r = c.qrels["train"]
        keep = r["grade"] >= 1
        used = np.unique(r["query"][keep])
        row = {int(q): i for i, q in enumerate(used)}
        pairs = [(row[int(q)], int(d)) for q, d in zip(r["query"][keep], r["doc"][keep])]
        return MiningData([c.query_texts[i] for i in used], c.doc_texts, pairs)
    path = input_files(spec)[0]  # the same one-line checks as data.name
    queries: dict[str, int] = {}
    corpus: dict[str, int] = {}
    pairs = []
    for _, query, positive, negatives in text_pairs.read_pairs(path):
        q = queries.setdefault(query, len(queries))
        pairs.append((q, corpus.setdefault(positive, len(corpus))))
        for n in negatives:
            corpus.setdefault(n, len(corpus))
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return MiningData(list(queries), list(corpus), pairs)


@dataclasses.dataclass
class Encoders:
    """Texts to embeddings: ``query(texts)`` and ``document(texts)`` ``[n, D]`` float32;
    ``plain(texts)``: the representation with no prefix, as the similarity sets (STS) embed.
    Each takes ``prefix=`` to put another instruction before the texts than the run's."""
    query: Callable[[Sequence[str]], np.ndarray]
    document: Callable[[Sequence[str]], np.ndarray]
    plain: Callable[[Sequence[str]], np.ndarray] | None = None
    identity: str = ""  # the model's path, checkpoint step and lengths: what names its cache
    instructed: bool = False  # its queries or documents carry a prefix (an instruction)
    parameters: int = 0  # the run's trained parameters (its ``params``: adapters included)
    max_tokens: int = 0  # the longest text it reads, in tokens (the longer side's length)
    # its declared output is unit length: a Normalize module, or a run compared by cosine (as
    # its export writes it); the callables return the vectors before that normalisation
    normalized: bool = False


def max_len_limit(*, workdir: str | None = None, init_from: str | None = None
                  ) -> tuple[int, str] | None:
    """``(the most tokens a text may have, what sets it)`` for the model ``mine`` would encode
    with, from its files alone (no weights read): the rows of a BERT-style encoder's absolute
    position table (a sentence-transformers model's ``max_position_embeddings``; a run's
    text_transformer, less the landmark tokens landmark pooling inserts). None where nothing
    limits the length (rotary positions, an LSTM)."""
    from repr_jax import files
    if init_from:
        from repr_jax.train.pretrained import weights_path
        config = Path(weights_path(init_from)) / "config.json"
        if not config.is_file():
            return None  # not a model folder: encoders_of names what is missing
        n = int(files.read_json(config).get("max_position_embeddings", 512))
        return n, f"{init_from}'s position embeddings (max_position_embeddings={n})"
    from repr_jax import config as config_lib
    from repr_jax.encoders.text_transformer import text_max_len
    from repr_jax.train.pretrained import encoder_module
    from repr_jax.train.run import run_config_path, text_stand_in
    cfg = config_lib.load_json(run_config_path(Path(workdir)))
    if cfg.encoder.name != "text_transformer":
        return None
    module = encoder_module(cfg, text_stand_in(cfg))
    n, landmarks = module.max_len, ""
    if module.pooling == "landmark":  # a landmark every landmark_chunk tokens takes a position
        n = max(t for t in range(1, n + 1) if text_max_len(t, module.landmark_chunk) <= n)
        landmarks = f", less a landmark every {module.landmark_chunk} tokens"
    return n, (f"the run's {module.max_len} position embeddings{landmarks} (it trained at "
               f"data.max_len={cfg.data.max_len or 64})")


def encoders_of(*, workdir: str | None = None, init_from: str | None = None, max_len: int = 0,
                batch_size: int = 128, progress: bool | str = True,
                cache_dir: str | Path | None = None) -> Encoders:
    """The query and document encoders of a trained run (its two towers where it has them, in
    the space its objective compared them) or of a local sentence-transformers model, through the
    evaluators' :class:`~repr_jax.eval.Embedder` (fixed-shape batches: one compilation). With
    ``cache_dir``, embeddings are kept under a folder named by the model (path, checkpoint step,
    length) and keyed by the token ids, so mining again with other knobs does not encode again.
    ``max_len`` (0: the run's lengths, the model's ``max_seq_length``) is checked against
    :func:`max_len_limit`. ``progress``: a bar (a string: its label)."""
    import jax

    from repr_jax import files
    from repr_jax.eval import Embedder
    if bool(workdir) == bool(init_from):
        raise ValueError("give one of --workdir RUN or --init-from MODEL_DIR")
    check_max_len(max_len, workdir=workdir, init_from=init_from)
    if init_from:
        from repr_jax.encoders.pretrained import load_sentence_transformer
        from repr_jax.train.pretrained import weights_path
        init_from = str(weights_path(init_from).absolute())
        loaded = load_sentence_transformer(init_from)
        module, variables, tokenizer = loaded.module, loaded.params, loaded.tokenizer
        length = max_len or min(loaded.config.max_seq_length, loaded.config.max_position)
        sides = Sides(length, length)

        def query(params, ids):
            return module.apply({"params": params}, ids)[0]
        document = represent = query
        plain_sides = sides
        identity = f"{Path(init_from).absolute()}|{length}"
        normalized = loaded.config.normalize
    else:
        from repr_jax.train.run import load_trained
        check_text_run(workdir)
        cfg, _, method, state = load_trained(workdir, text_only=True)  # its data: not needed
        variables, tokenizer = state.variables, make_tokenizer(cfg.data.tokenizer)
        sides = Sides.of_section(cfg.data)  # check_text_run: a text section
        if max_len:
            sides = dataclasses.replace(sides, query_len=max_len, doc_len=max_len)
        length = sides
        query = method.embed_query or method.embed
        document = method.embed_pos or method.embed
        represent = method.embed  # as the run's similarity sets embed: no prefix
        plain_sides = Sides.of(max_len or cfg.data.max_len or 64)
        identity = f"{Path(workdir).absolute()}|step {int(jax.device_get(state.step))}|{length}"
        normalized = cfg.eval.retrieval.similarity == "cosine"
    if cache_dir:
        cache_dir = files.keyed_cache(cache_dir, identity, what="cached embeddings")
    label = progress if isinstance(progress, str) else "mine: encoding"
    embedder = Embedder(represent, {}, batch_size=batch_size, query_fn=query, pos_fn=document,
                        cache_dir=cache_dir, progress=label if progress else "",
                        pad_id=tokenizer.pad_id)

    def texts_to(which: str):
        def embed(texts: Sequence[str], prefix: str | None = None) -> np.ndarray:
            """``prefix``: this side's instruction instead of the run's (None: the run's)."""
            side = "query" if which == "query" else "doc"
            used = plain_sides if which == "x" else sides
            if prefix is not None:
                used = dataclasses.replace(used, **{f"{side}_prefix": prefix})
            return np.asarray(embedder.embed(variables, used.encode(tokenizer, texts, side),
                                             which))
        return embed
    params = variables["params"] if hasattr(variables, "keys") and "params" in variables \
        else variables
    return Encoders(texts_to("query"), texts_to("pos"), texts_to("x"), identity,
                    bool(sides.query_prefix or sides.doc_prefix),
                    sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params)),
                    max(sides.query_len, sides.doc_len), normalized)


def check_max_len(max_len: int, *, workdir: str | None = None,
                  init_from: str | None = None) -> None:
    """A one-line ValueError naming ``--max-len`` and its value when it is negative or longer
    than the model's positions allow (:func:`max_len_limit`): before anything is encoded."""
    if max_len < 0:
        raise ValueError(f"--max-len must be at least 0 (0: the model's own), got {max_len}")
    limit = max_len_limit(workdir=workdir, init_from=init_from) if max_len else None
    if limit is not None and max_len > limit[0]:
        raise ValueError(f"--max-len {max_len} is longer than {limit[1]} allow: use at most "
                         f"{limit[0]} (or 0 for the model's own length)")


DROP_REASONS = {  # why a pair had no negative, as mine's summary says it
    "range": "no non-positive document ranked in [--range-min, --range-max)",
    "margin": "--margin: every candidate scored within the margin of the positive",
    "max-score": "--max-score: every candidate scored above it",
    "both": "--margin and --max-score, each of them alone",
}


def _drop_reason(ranked, pos_score: float, margin, max_score) -> str:
    """Which filter left a pair with no negative (a key of :data:`DROP_REASONS`)."""
    if not ranked:
        return "range"
    by_margin = margin is not None and not any(s + margin < pos_score for _, s in ranked)
    by_score = max_score is not None and not any(s <= max_score for _, s in ranked)
    if by_margin != by_score:
        return "margin" if by_margin else "max-score"
    return "both"  # both keep low scores: a candidate passing each passes the two together


def select_negatives(scores_QxK: np.ndarray, indices_QxK: np.ndarray, pairs, positives,
                     positive_scores: np.ndarray, *, range_min: int, range_max: int,
                     margin: float | None, max_score: float | None, num_negatives: int,
                     sampling: str, seed: int, reasons: list | None = None
                     ) -> list[list[tuple[int, float]]]:
    """For each pair: ``[(corpus index, score)]`` of its negatives (see the module docstring).
    Time ``O(P k)`` for P pairs and k candidates per query.
    ``scores_QxK``/``indices_QxK``: each query's best documents, best first. ``reasons``: a list
    that gets, for each pair, None or (no negative passed) the key of :data:`DROP_REASONS` that
    says which filter left it none."""
    rng = np.random.default_rng(seed)
    out = []
    for (q, _), pos_score in zip(pairs, positive_scores):
        ranked = [(int(i), float(s)) for i, s in zip(indices_QxK[q], scores_QxK[q])
                  if int(i) not in positives[q]][range_min:range_max]
        kept = [(i, s) for i, s in ranked
                if (margin is None or s + margin < pos_score)
                and (max_score is None or s <= max_score)]
        if reasons is not None:
            reasons.append(None if kept else _drop_reason(ranked, pos_score, margin, max_score))
        if sampling == "random" and len(kept) > num_negatives:
            pick = np.sort(rng.choice(len(kept), num_negatives, replace=False))
            kept = [kept[j] for j in pick]
        out.append(kept[:num_negatives])
    return out


def check_mine_args(*, data: str, out: str | Path, workdir: str | None, init_from: str | None,
                    range_min: int, range_max: int, margin: float | None,
                    max_score: float | None, num_negatives: int, sampling: str,
                    seed: int, bm25: bool = False, max_len: int = 0,
                    batch_size: int = 128) -> tuple[Path, Path]:
    """``(out, its cache folder)`` once every argument of :func:`mine` is checked, before anything
    is read or encoded: each problem is a one-line ValueError, and nothing is written."""
    import math

    from repr_jax import files
    if sampling not in SAMPLING:
        raise ValueError(f"--sampling {sampling!r}; choose from {', '.join(SAMPLING)}")
    if not 0 <= range_min < range_max:
        raise ValueError(f"--range-min {range_min} and --range-max {range_max}: need "
                         f"0 <= range-min < range-max")
    if num_negatives < 1:
        raise ValueError(f"--num-negatives must be at least 1, got {num_negatives}")
    if num_negatives > range_max - range_min:
        raise ValueError(f"--num-negatives {num_negatives} is more than the "
                         f"{range_max - range_min} ranks --range-min {range_min} to --range-max "
                         f"{range_max} offer: no pair could have that many")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {batch_size}")
    for flag, value in (("--margin", margin), ("--max-score", max_score)):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{flag} must be a finite number, got {value}")
    if seed < 0:
        raise ValueError(f"--seed must be at least 0, got {seed}")
    if bool(workdir) + bool(init_from) + bm25 != 1:
        raise ValueError("give one of --workdir RUN, --init-from MODEL_DIR or --bm25")
    # a filter no score can pass drops every pair: say so now, not after encoding
    if bm25 and max_score is not None and max_score < 0:
        raise ValueError(f"--max-score {max_score:g}: BM25 scores are at least 0, so no "
                         f"negative could pass")
    if not bm25 and max_score is not None and max_score < -1:
        raise ValueError(f"--max-score {max_score:g}: cosine scores lie in [-1, 1], so no "
                         f"negative could pass")
    if not bm25 and margin is not None and margin >= 2:
        raise ValueError(f"--margin {margin:g}: cosine scores lie in [-1, 1], so no negative "
                         f"scores {margin:g} below its positive")
    if bm25 and max_len:
        raise ValueError(f"--max-len {max_len}: BM25 reads whole texts (it takes no length)")
    out = files.check_output(out, flag="--out", inputs=input_files(data))
    cache = out.parent / f"{out.name}.cache"
    if cache.is_symlink():
        raise ValueError(f"{cache} (where mine keeps its corpus embeddings) is a symbolic link "
                         f"(to {os.readlink(cache)}); remove it or choose another --out")
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"{cache} is a file; mine keeps its corpus embeddings in a folder of "
                         f"that name: remove it or choose another --out")
    files.check_writable(out.parent, flag="--out")
    if workdir:
        check_text_run(workdir)
    if not bm25:
        check_max_len(max_len, workdir=workdir, init_from=init_from)
    return out, cache


def _embedding_candidates(d, k: int, enc: Encoders):
    """``(scores, indices)`` ``[Q, k]`` by cosine similarity of ``enc``'s embeddings, and each
    pair's positive score."""
    import jax.numpy as jnp

    from repr_jax.eval.retrieval import retrieve
    corpus_emb = enc.document(d.corpus)
    query_emb = enc.query(d.queries)
    print(f"mine: searching {len(d.queries):,} queries x {len(d.corpus):,} documents (top {k})",
          file=sys.stderr, flush=True)
    scores, indices = retrieve(jnp.asarray(query_emb), jnp.asarray(corpus_emb), k=k)
    qn = query_emb / np.maximum(np.linalg.norm(query_emb, axis=1, keepdims=True), 1e-12)
    cn = corpus_emb / np.maximum(np.linalg.norm(corpus_emb, axis=1, keepdims=True), 1e-12)
    pos_scores = np.einsum("pd,pd->p", qn[[q for q, _ in d.pairs]], cn[[c for _, c in d.pairs]])
    return np.asarray(scores), np.asarray(indices), pos_scores


def _bm25_candidates(d, k: int):
    """The same from BM25: its top ``k`` and the positives' BM25 scores."""
    from repr_jax.eval.bm25 import BM25
    print(f"mine: BM25 over {len(d.queries):,} queries x {len(d.corpus):,} documents (top {k})",
          file=sys.stderr, flush=True)
    index = BM25(d.corpus)
    indices, scores = index.topk(d.queries, k)
    pos_scores = index.pair_scores([d.queries[q] for q, _ in d.pairs], [c for _, c in d.pairs])
    return scores, indices, pos_scores


def mine(*, data: str, out: str | Path, workdir: str | None = None, init_from: str | None = None,
         range_min: int = 0, range_max: int = 100, margin: float | None = None,
         max_score: float | None = None, num_negatives: int = 3, sampling: str = "top",
         seed: int = 0, max_len: int = 0, batch_size: int = 128,
         progress: bool = True, bm25: bool = False) -> dict[str, Any]:
    """Mines hard negatives and writes a ``pairs:`` file at ``out``; returns a summary. ``bm25``:
    candidates and scores from BM25 (:mod:`repr_jax.eval.bm25`; DPR's negatives) instead of a
    model's embeddings."""
    from repr_jax import files
    out, cache = check_mine_args(data=data, out=out, workdir=workdir, init_from=init_from,
                                 range_min=range_min, range_max=range_max, margin=margin,
                                 max_score=max_score, num_negatives=num_negatives,
                                 sampling=sampling, seed=seed, bm25=bm25, max_len=max_len,
                                 batch_size=batch_size)
    d = mining_data(data)
    positives = d.positives
    most_positives = max(len(p) for p in positives)
    room = len(d.corpus) - min(len(p) for p in positives)  # the most non-positives a query has
    if range_min >= room:
        raise ValueError(f"--range-min {range_min} skips every candidate: {data}'s corpus has "
                         f"{len(d.corpus):,} documents, at most {room:,} of them a query's "
                         f"non-positives; nothing would be written")
    k = min(range_max + most_positives, len(d.corpus))
    if bm25:
        scores, indices, pos_scores = _bm25_candidates(d, k)
    else:
        scores, indices, pos_scores = _embedding_candidates(
            d, k, encoders_of(workdir=workdir, init_from=init_from, max_len=max_len,
                              batch_size=batch_size, progress=progress, cache_dir=cache))
    reasons: list = []
    chosen = select_negatives(scores, indices, d.pairs, positives, pos_scores,
                              range_min=range_min, range_max=range_max, margin=margin,
                              max_score=max_score, num_negatives=num_negatives,
                              sampling=sampling, seed=seed, reasons=reasons)
    from repr_jax.data.text_pairs import is_test
    lines, dropped, short, held_out = [], 0, 0, 0
    for (q, p), pos, negs in zip(d.pairs, pos_scores, chosen):
        if not negs:
            dropped += 1
            continue
        short += len(negs) < num_negatives
        held_out += is_test(d.queries[q])
        lines.append(json.dumps({
            "query": d.queries[q], "positive": d.corpus[p],
            "negatives": [d.corpus[i] for i, _ in negs], "positive_score": round(float(pos), 6),
            "negative_scores": [round(s, 6) for _, s in negs]}) + "\n")
    why = {r: reasons.count(r) for r in DROP_REASONS if r in reasons}
    flags = {"range": f"--range-min {range_min}/--range-max {range_max}",
             "margin": f"--margin {margin:g}" if margin is not None else "",
             "max-score": f"--max-score {max_score:g}" if max_score is not None else ""}
    flags["both"] = f"{flags['margin']} and {flags['max-score']}, each alone"
    by = ", ".join(f"{n:,} by {flags[r]}" for r, n in why.items())
    if not lines:
        raise ValueError(f"no pair has a negative passing the filters ({by}): nothing written")
    files.write_text(out, "".join(lines))
    summary = dict(pairs=len(d.pairs), written=len(lines), dropped=dropped, fewer=short,
                   dropped_by=why, held_out=held_out, queries=len(d.queries),
                   corpus=len(d.corpus), out=str(out))
    left = (f"{dropped:,} ({dropped / len(d.pairs):.1%}) left out, no candidate passing the "
            f"filters: {by}" if dropped else "none left out")
    print(f"mine: {len(lines):,} of {len(d.pairs):,} pairs written with negatives -> {out}; "
          f"{left}; {short:,} have fewer than {num_negatives}", file=sys.stderr)
    trains = len(lines) - held_out
    print(f"mine: training on pairs:{out} holds out {held_out:,} more of them (its 5% test "
          f"share of queries): a run on it trains on {trains:,} pairs, "
          f"{trains / len(d.pairs):.1%} of the {len(d.pairs):,} given", file=sys.stderr)
    return summary
