"""``repr-jax steer``: add ``alpha`` times a direction to the output of block ``--layer`` of a
model (activation addition, Turner et al. 2023) and measure what it does. For a decoder LLM,
steered at every position: the next token — the log-probability of a concept's words against
random directions of the same norm — and greedy continuations. For a text embedder (a
text_transformer run or sentence-transformers model), steered at every non-padding token of each
query: where the concept's documents rank in a collection (``--documents``).

The direction (``--direction``): a ``.npy`` vector ``[D]`` (a concept direction, a probe's
weights), or ``latent:SAE_RUN:J``, latent ``J``'s decoder row of a sparse autoencoder trained on
this model's layer (its store's model and layer must be these). It is used at unit norm, so
``alpha`` is in the residual stream's own units: the command prints the layer's median token norm
over the prompts to scale it by (SmolLM2-135M's layer 15: ~184; all-MiniLM-L6-v2's layer 3,
after its LayerNorm: ~12).

A decoder, for each ``alpha``: over the prompts (one text a line of ``--prompts``, UTF-8), the
change in next-token log-probability at each prompt's last token, averaged over the concept's
words (``--words``: each word's first token as a continuation, `` word``), steered minus clean:
``concept``; the same for ``--random`` directions drawn uniformly on the sphere (seed
``--seed``), averaged over them: ``random``; and ``concept - random`` paired by prompt. Each is a
mean over prompts with the project's percentile bootstrap interval. Then ``--show`` prompts'
greedy continuations of ``--new-tokens`` tokens, clean and at each ``alpha``.

An embedder: the prompts are queries (read as the model's query side, its query prefix and
length), ``--documents`` a collection (UTF-8, one document a line) encoded once, un-steered; the
concept's documents are those holding one of ``--words`` as a whole word, case-insensitive. Each
query, steered, is re-pooled by the model's own pooling and ranks the collection by the run's
retrieval similarity (cosine for a sentence-transformers model; ties to the lower index). For
each ``alpha``, per query: the nDCG@10 of the ranking with the concept's documents as the
relevant ones (the retrieval evaluator's nDCG) and their mean rank (1: first), each steered minus
clean, for the concept direction (``concept``), averaged over the random directions
(``random``), and ``concept - random`` paired by query; means over queries with the same
intervals, and the share of (query, random direction) pairs whose nDCG change the concept's beats.
Then the top ``TOP`` documents of ``--show`` queries, clean and at each ``alpha``. A two-tower
run's documents are read by its query tower, as the ``sae`` evaluator's splice reads them.

Cost, a decoder: ``(1 + R) x A`` forward passes over P prompts of T tokens (R random directions,
A values of alpha), each ``O(P T model)``, plus ``(1 + A) x new_tokens`` passes over the shown
prompts (no cache: each recomputes ``T + new_tokens`` positions). Memory ``O(P T D + P V)``.
An embedder: one pass over the N documents, ``O(N T model)``, then ``1 + A (1 + R)`` passes over
the Q queries — every (direction, query) row of an ``alpha`` in batches of ``CHUNK`` (one
compilation for all) — each row ``O(T model)`` and its ranking ``O(N (E + log N))`` for
embeddings of width E: time ``O((N + A R Q) T model + A R Q N (E + log N))``, memory
``O(CHUNK (T D + N) + N E)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import files
from repr_jax.encoders.decoder_lm import last_valid, next_token_logits, split_ids
from repr_jax.encoders.intervene import adding, replacing_block
from repr_jax.eval.retrieval import ranked_metrics, similarity_matrix
from repr_jax.eval.stats import with_ci
from repr_jax.train.activations import trim_columns

LATENT = "latent:"
NEW_TOKENS = 20  # a decoder's greedy continuation length by default
DECODER_MAX_LEN = 128  # tokens per prompt of a decoder by default
CUTOFF = 10  # an embedder's nDCG@10
TOP = 5  # documents shown per query
CHUNK = 256  # (direction, query) rows of an embedder's steered pass
DOC_BATCH = 64  # documents of a clean pass


# --------------------------------------------------------------------------------------------------
# Inputs, each checked in one line before the model runs
# --------------------------------------------------------------------------------------------------

def read_lines(path: str | Path, *, flag: str = "--prompts", what: str = "prompt") -> list[str]:
    """The non-empty lines of a UTF-8 file (``flag``'s); anything else is one line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{flag} {path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{flag} {path}: not UTF-8 text (byte {e.start}: "
                         f"{raw[e.start:e.start + 1]!r}); save it as UTF-8") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{flag} {path}: no {what} (one text a line)")
    return lines


def read_prompts(path: str | Path) -> list[str]:
    """``--prompts``: :func:`read_lines`."""
    return read_lines(path)


def check_alphas(alphas: Sequence[float]) -> list[float]:
    bad = [a for a in alphas if not math.isfinite(a)]
    if bad or not alphas:
        raise ValueError(f"--alpha {bad[0] if bad else ''}: give finite numbers, e.g. "
                         f"--alpha 4,8,16")
    return [float(a) for a in alphas]


def read_direction(spec: str, width: int, *, layer: int, model_name: str) -> np.ndarray:
    """The unit direction ``[D]`` of ``--direction`` (module docstring); a vector of another
    width, not finite or zero, or an SAE of another model or layer, is one line."""
    if spec.startswith(LATENT):
        vec = _latent_direction(spec, layer=layer, model_name=model_name)
    else:
        path = Path(spec)
        if not path.is_file():
            raise ValueError(f"--direction {spec}: no such file (a .npy vector, or "
                             f"{LATENT}SAE_RUN:LATENT)")
        try:
            vec = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise ValueError(f"--direction {spec}: not a .npy array ({e})") from None
        vec = np.asarray(vec, np.float64)
        if vec.ndim == 2 and 1 in vec.shape:
            vec = vec.reshape(-1)
        if vec.ndim != 1:
            raise ValueError(f"--direction {spec}: shape {list(vec.shape)}; give one vector [D]")
    if vec.shape[0] != width:
        raise ValueError(f"--direction {spec}: width {vec.shape[0]}, but layer {layer} of "
                         f"{model_name} has width {width}")
    norm = float(np.linalg.norm(vec))
    if not np.isfinite(vec).all() or norm == 0:
        raise ValueError(f"--direction {spec}: not a finite, non-zero vector")
    return (vec / norm).astype(np.float32)


def _latent_direction(spec: str, *, layer: int, model_name: str) -> np.ndarray:
    """Latent ``J``'s decoder row of an SAE run on this model's ``layer`` (in the store's units:
    the SAE scales its inputs, not the direction)."""
    from repr_jax.data.activations import PREFIX, folder_of, read_meta
    from repr_jax.train.run import load_trained
    run, _, latent = spec[len(LATENT):].rpartition(":")
    if not run or not latent.isdigit():
        raise ValueError(f"--direction {spec}: give {LATENT}SAE_RUN:LATENT (a number)")
    try:
        cfg, _, _, state = load_trained(run)
    except (ValueError, FileNotFoundError) as e:
        raise ValueError(f"--direction {spec}: {e}") from None
    if cfg.method.name != "sae":
        raise ValueError(f"--direction {spec}: {run} is not a sparse autoencoder run")
    if not cfg.data.name.startswith(PREFIX):
        raise ValueError(f"--direction {spec}: {run} is an SAE trained on {cfg.data.name}, not "
                         f"on an activation store of a model's layer")
    meta = read_meta(folder_of(cfg.data.name))
    if meta["layer"] != layer or meta["model"] != model_name:
        raise ValueError(f"--direction {spec}: the SAE read layer {meta['layer']} of "
                         f"{meta['model']}; this is layer {layer} of {model_name}")
    w_dec = np.asarray(jax.device_get(state.variables["params"]["sae"]["W_dec"]))
    j = int(latent)
    if j >= len(w_dec):
        raise ValueError(f"--direction {spec}: the SAE has {len(w_dec)} latents (0 to "
                         f"{len(w_dec) - 1})")
    return w_dec[j].astype(np.float64)


def word_ids(tokenizer, words: Sequence[str]) -> list[int]:
    """Each word's first token as a continuation (`` word``); a word with none is one line."""
    out = []
    for w in words:
        ids = tokenizer.tokenize(" " + w.strip())
        if not w.strip() or not ids:
            raise ValueError(f"--words: {w!r} has no token")
        out.append(ids[0])
    return out


# --------------------------------------------------------------------------------------------------
# The steered model
# --------------------------------------------------------------------------------------------------

def steered_logprobs(model, head_VxD=None):
    """``f(variables, ids [B, T], direction [D], alpha) -> [B, V]``: next-token log-probabilities
    at each row's last token with ``alpha * direction`` added after block ``layer`` (jitted, a
    function of ``layer`` by closure). Time ``O(B T model + B D V)``."""
    module = model.module

    def f(variables, ids, direction_D, alpha, layer: int):
        with replacing_block(model.family, layer, adding(direction_D, alpha)):
            tokens = module.apply(variables, ids)[1]["tokens"]
        last = last_valid(split_ids(ids)[1])
        at = jnp.take_along_axis(tokens, last[:, None, None], axis=1)  # [B, 1, D]
        return jax.nn.log_softmax(next_token_logits(variables["params"], at, head_VxD)[:, 0])
    return jax.jit(f, static_argnames="layer")


def greedy(model, variables, rows: Sequence[Sequence[int]], *, layer: int, direction_D, alpha,
           new_tokens: int, head_VxD=None) -> list[list[int]]:
    """Each row's ``new_tokens`` greedy continuation with ``alpha * direction`` added (no cache:
    a fixed ``[B, T + new_tokens]`` buffer, one compilation). Time ``O(new_tokens B T model)``."""
    width = max(map(len, rows)) + new_tokens
    ids = np.full((len(rows), width), -1, np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    lengths = np.asarray([len(r) for r in rows])
    module = model.module

    @jax.jit
    def next_ids(variables, ids, at, alpha):
        with replacing_block(model.family, layer, adding(direction_D, alpha)):
            tokens = module.apply(variables, ids)[1]["tokens"]
        h = jnp.take_along_axis(tokens, at[:, None, None], axis=1)
        return jnp.argmax(next_token_logits(variables["params"], h, head_VxD)[:, 0], axis=-1)

    for step in range(new_tokens):
        at = lengths + step - 1
        ids[np.arange(len(rows)), at + 1] = np.asarray(next_ids(variables, ids, at, alpha))
    return [ids[i, lengths[i]:lengths[i] + new_tokens].tolist() for i in range(len(rows))]


def random_directions(n: int, width: int, seed: int) -> np.ndarray:
    """``[n, D]`` uniform on the unit sphere."""
    v = np.random.default_rng(seed).standard_normal((n, width))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def shifts(fn, variables, ids, layer: int, direction_D, random_RxD, alpha: float,
           word_W: Sequence[int], clean_BxV, bar=None) -> tuple[np.ndarray, np.ndarray]:
    """``(concept [B], random [B, R])``: the words' mean log-probability change per prompt."""
    words = np.asarray(word_W)

    def delta(direction):
        steered = np.asarray(fn(variables, ids, jnp.asarray(direction), alpha, layer=layer))
        if bar is not None:
            bar.update(1)
        return (steered[:, words] - clean_BxV[:, words]).mean(axis=1)
    return delta(direction_D), np.stack([delta(r) for r in random_RxD], axis=1)


# --------------------------------------------------------------------------------------------------
# A text embedder: where the concept's documents rank for steered queries
# --------------------------------------------------------------------------------------------------

def concept_documents(documents: Sequence[str], words: Sequence[str]) -> np.ndarray:
    """``[N]`` bool: the documents holding one of ``words`` as a whole word, case-insensitive.

    >>> concept_documents(["A Cat sat", "concatenate", "cats", "(cat)"], ["cat"]).tolist()
    [True, False, False, True]
    """
    pattern = re.compile("|".join(rf"(?<!\w){re.escape(w.strip())}(?!\w)" for w in words
                                  if w.strip()), re.IGNORECASE)
    return np.asarray([pattern.search(d) is not None for d in documents], bool)


def steered_embeddings(model):
    """``f(variables, ids [C, T], valid [C, T], direction [C, D], alpha, layer) -> [C, E]``: the
    model's embedding (``variables``: its ``embed_variables``) with ``alpha * direction[c]``
    added to block ``layer``'s output at row ``c``'s ``valid`` tokens, every later block and the
    pooling reading the sum (jitted; ``alpha`` traced). Time ``O(C T model)``."""
    def f(variables, ids, valid, direction_CxD, alpha, layer: int):
        with replacing_block(model.family, layer, adding(direction_CxD, alpha, valid)):
            return model.embed(variables, ids)
    return jax.jit(f, static_argnames="layer")


@functools.partial(jax.jit, static_argnames="similarity")
def concept_ranking(q_CxE, d_NxE, concept_N, similarity: str = "cosine"):
    """``(ndcg [C], mean_rank [C], top [C, TOP])`` of each query's ranking of the documents
    (ties to the lower index, as the retrieval evaluator breaks them): nDCG@10 with the concept's
    documents as the relevant ones (the evaluator's :func:`ranked_metrics`), their mean rank
    (1: first) and the first ``TOP`` documents. Time ``O(C N (E + log N))``, memory ``O(C N)``."""
    scores_CxN = similarity_matrix(q_CxE.astype(jnp.float32), d_NxE.astype(jnp.float32),
                                   similarity)
    order_CxN = jnp.argsort(-scores_CxN, axis=1, stable=True)
    rank_CxN = jnp.argsort(order_CxN, axis=1) + 1
    rel_N = concept_N.astype(jnp.float32)
    ndcg = ranked_metrics(rel_N[order_CxN[:, :CUTOFF]], jnp.broadcast_to(rel_N, scores_CxN.shape),
                          (CUTOFF,))[f"ndcg@{CUTOFF}"]
    mean_rank = jnp.sum(rank_CxN * rel_N[None, :], axis=1) / jnp.sum(rel_N)
    return ndcg, mean_rank, order_CxN[:, :TOP]


class Ranked(NamedTuple):
    ndcg: np.ndarray  # [K, Q] nDCG@10 of the concept's documents
    mean_rank: np.ndarray  # [K, Q] their mean rank (1: first)
    top: np.ndarray  # [K, Q, TOP] the first documents


def rank_steered(fn, variables, ids_QxT, valid_QxT, directions_KxD, alpha: float, *,
                 layer: int, docs_NxE, concept_N, similarity: str, chunk: int,
                 bar=None) -> Ranked:
    """Every query steered along every direction at ``alpha`` (``fn``:
    :func:`steered_embeddings`) and ranking the documents: (direction, query) rows in batches
    of ``chunk``, the last padded (one compilation for every ``alpha`` and direction count).
    Time ``O(K Q (T model + N (E + log N)))``, memory ``O(chunk (T D + N))``."""
    k, q = len(directions_KxD), len(ids_QxT)
    n = k * q
    ndcg, mean_rank = np.empty(n, np.float32), np.empty(n, np.float32)
    top = np.empty((n, min(TOP, len(concept_N))), np.int64)
    for start in range(0, n, chunk):
        rows = np.minimum(np.arange(start, start + chunk), n - 1)
        b, d = rows % q, rows // q
        emb = fn(variables, ids_QxT[b], valid_QxT[b], jnp.asarray(directions_KxD[d]), alpha,
                 layer=layer)
        got = concept_ranking(emb, docs_NxE, concept_N, similarity=similarity)
        m = min(chunk, n - start)
        for out, value in zip((ndcg, mean_rank, top), got):
            out[start:start + m] = np.asarray(value)[:m]
        if bar is not None:
            bar.update(1)
    return Ranked(ndcg.reshape(k, q), mean_rank.reshape(k, q), top.reshape(k, q, -1))


def embed_documents(model, ids_NxT: np.ndarray) -> np.ndarray:
    """The clean embeddings ``[N, E]``: batches of ``DOC_BATCH``, shortest first, each cut to
    its longest text (a few shapes compile). Time ``O(N T model)``."""
    fn = jax.jit(model.embed)
    valid = np.asarray(model.valid(ids_NxT))
    order = np.argsort(valid.sum(axis=1), kind="stable")
    size = min(DOC_BATCH, len(order))
    out = None
    for start in range(0, len(order), size):
        rows = order[start:start + size]
        take = np.concatenate([rows, np.repeat(rows[-1:], size - len(rows))])
        emb = np.asarray(fn(model.embed_variables, trim_columns(ids_NxT[take], valid[take])),
                         np.float32)
        if out is None:
            out = np.empty((len(order), emb.shape[1]), np.float32)
        out[rows] = emb[:len(rows)]
    return out


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------

def steer(*, layer: int, direction: str, alphas: Sequence[float], prompts: str,
          words: Sequence[str], workdir: str | None = None, init_from: str | None = None,
          documents: str | None = None, random: int = 16, new_tokens: int | None = None,
          show: int = 3, bootstrap: int = 1000, seed: int = 0, out: str | None = None,
          max_len: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Runs the measurement (module docstring) of a decoder LLM or a text embedder, prints it,
    writes ``out`` (JSON) when given and returns it. Every input is checked before the model
    runs; ``documents`` is an embedder's only and ``new_tokens`` (default ``NEW_TOKENS``) a
    decoder's only. ``max_len``: tokens per prompt (default ``DECODER_MAX_LEN``) of a decoder;
    of an embedder, per document and (``init_from``) per query (default the model's own)."""
    from repr_jax.train.activations import check_layer, load_model, parse_layer
    if bool(workdir) == bool(init_from):
        raise ValueError("give one of --workdir RUN or --init-from MODEL")
    if random < 1:
        raise ValueError(f"--random must be at least 1, got {random}")
    alphas = check_alphas(alphas)
    texts = read_prompts(prompts)
    words = [w.strip() for w in words if w.strip()]
    if not words:
        raise ValueError("--words: give the concept's words, e.g. --words cat,dog,horse")
    layer = parse_layer(layer)
    if layer == "embedding":
        raise ValueError("--layer embedding: steering adds to a block's output; give a block")
    docs = concept_N = None
    if documents is not None:
        docs = read_lines(documents, flag="--documents", what="document")
        concept_N = concept_documents(docs, words)
        if not concept_N.any():
            raise ValueError(f"--documents {documents}: none of its {len(docs)} documents holds "
                             f"one of --words {','.join(words)} as a whole word "
                             f"(case-insensitive)")
    if out is not None:
        out = files.check_output(out, flag="--out", inputs=[Path(prompts)] + (
            [Path(direction)] if not direction.startswith(LATENT) else []) + (
            [Path(documents)] if documents is not None else []))
    model, cfg = load_model(workdir=workdir, init_from=init_from, max_len=max_len or 0,
                            text=True, skip_first=0)
    name = model.describe["model"]
    if model.family == "text_transformer":
        if new_tokens is not None:
            raise ValueError(f"--new-tokens: {name} is a text embedder, which has no "
                             f"continuations; leave it out (steer ranks --documents for it)")
        if docs is None:
            raise ValueError(f"--documents FILE: {name} is a text embedder; steer measures "
                             f"how the concept's documents rank in a collection: give one "
                             f"(UTF-8, one document a line)")
        if max_len and max_len > model.module.max_len:
            raise ValueError(f"--max-len {max_len}: {name} reads at most "
                             f"{model.module.max_len} tokens a text")
    elif model.family == "decoder_lm":
        if documents is not None:
            raise ValueError(f"--documents: {name} is a decoder LLM; steer measures its "
                             f"next-token distribution (--documents is for a text embedder)")
        max_len = max_len or DECODER_MAX_LEN
        model.sides = dataclasses.replace(model.sides, doc_len=max_len)
    else:
        raise ValueError(f"steer takes a decoder_lm (next-token log-probabilities) or a "
                         f"text_transformer (retrieval ranking), not a {model.family}")
    try:
        check_layer(layer, model.depth, model.family)
    except ValueError as e:  # steering takes a block, not the pooled embedding
        raise ValueError(str(e).removesuffix(" or embedding")) from None
    common = dict(layer=layer, direction=direction, alphas=alphas, texts=texts, words=words,
                  random=random, show=show, bootstrap=bootstrap, seed=seed, progress=progress)
    if model.family == "text_transformer":
        result = _steer_embedder(model, cfg, documents=docs, concept_N=concept_N, **common)
    else:
        result = _steer_decoder(model, cfg, max_len=max_len, new_tokens=(
            NEW_TOKENS if new_tokens is None else new_tokens), **common)
    if out is not None:
        files.write_json(out, result)
    return result


def _steer_decoder(model, cfg, *, layer: int, direction: str, alphas: list[float],
                   texts: list[str], words: list[str], random: int, new_tokens: int, show: int,
                   bootstrap: int, seed: int, max_len: int, progress: bool) -> dict[str, Any]:
    """The next-token shift and continuations of a decoder LLM (module docstring), printed."""
    variables = model.variables
    ids = model.sides.encode(model.tokenizer, texts, "doc")
    layer_BxTxD = np.asarray(jax.jit(lambda v, x: model.layers(v, x)[layer])(variables, ids))
    width = layer_BxTxD.shape[-1]
    name = model.describe["model"]
    direction_D = read_direction(direction, width, layer=layer, model_name=name)
    word_W = word_ids(model.tokenizer, words)
    head = _output_head(name, cfg)
    median_norm = float(np.median(np.linalg.norm(layer_BxTxD[np.asarray(model.valid(ids))],
                                                 axis=-1)))
    fn = steered_logprobs(model, head)
    clean = np.asarray(fn(variables, ids, jnp.asarray(direction_D), 0.0, layer=layer))
    random_RxD = random_directions(random, width, seed)
    rows, bar = [], None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(alphas) * (1 + random), desc="steer", unit="pass", leave=False,
                   dynamic_ncols=True)
    for alpha in alphas:
        concept, rand_BxR = shifts(fn, variables, ids, layer, direction_D, random_RxD, alpha,
                                   word_W, clean, bar)
        rand = rand_BxR.mean(axis=1)
        rows.append(dict(alpha=alpha, concept=with_ci(concept, bootstrap=bootstrap),
                         random=with_ci(rand, bootstrap=bootstrap),
                         difference=with_ci(concept - rand, bootstrap=bootstrap),
                         beats_random=float((concept[:, None] > rand_BxR).mean())))
    if bar is not None:
        bar.close()
    shown = model.tokenizer.rows(texts[:show], max_len=max_len) if new_tokens else []
    continuations = {}
    for key, alpha in [("clean", 0.0)] + [(f"{a:g}", a) for a in alphas] if shown else []:
        continuations[key] = [model.tokenizer.decode(c) for c in greedy(
            model, variables, shown, layer=layer, direction_D=direction_D, alpha=alpha,
            new_tokens=new_tokens, head_VxD=head)]
    result = dict(model=name, family=model.family, layer=layer, direction=direction,
                  words=list(words), prompts=len(texts), random=random, seed=seed,
                  median_token_norm=median_norm,
                  rows=[{k: _plain(v) for k, v in r.items()} for r in rows],
                  continuations={k: dict(zip(texts[:show], v)) for k, v in continuations.items()})
    _print(result, rows, texts[:show], continuations)
    return result


def _steer_embedder(model, cfg, *, layer: int, direction: str, alphas: list[float],
                    texts: list[str], documents: list[str], concept_N: np.ndarray,
                    words: list[str], random: int, show: int, bootstrap: int, seed: int,
                    progress: bool) -> dict[str, Any]:
    """The concept's documents' ranking under steered queries (module docstring), printed."""
    q_ids = model.sides.encode(model.tokenizer, texts, "query")
    q_valid = np.asarray(model.valid(q_ids))
    q_ids = trim_columns(q_ids, q_valid)
    q_valid = q_valid[:, :q_ids.shape[1]]
    layer_QxTxD = np.asarray(jax.jit(lambda v, x: model.layers(v, x)[layer])(model.variables,
                                                                            q_ids))
    width = layer_QxTxD.shape[-1]
    name = model.describe["model"]
    direction_D = read_direction(direction, width, layer=layer, model_name=name)
    median_norm = float(np.median(np.linalg.norm(layer_QxTxD[q_valid], axis=-1)))
    similarity = cfg.eval.retrieval.similarity if cfg is not None else "cosine"
    docs_NxE = embed_documents(model, model.sides.encode(model.tokenizer, documents, "doc"))
    directions_KxD = np.concatenate([direction_D[None], random_directions(random, width, seed)])
    chunk = min(CHUNK, len(directions_KxD) * len(texts))
    rank = functools.partial(rank_steered, steered_embeddings(model), model.embed_variables,
                             q_ids, q_valid, layer=layer, docs_NxE=jnp.asarray(docs_NxE),
                             concept_N=jnp.asarray(concept_N), similarity=similarity,
                             chunk=chunk)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(alphas) * -(-len(directions_KxD) * len(texts) // chunk),
                   desc="steer", unit="batch", leave=False, dynamic_ncols=True)
    clean = rank(direction_D[None], 0.0)
    clean_ci = dict(ndcg=with_ci(clean.ndcg[0], bootstrap=bootstrap),
                    mean_rank=with_ci(clean.mean_rank[0], bootstrap=bootstrap))
    rows, top = [], {"clean": clean.top[0]}
    for alpha in alphas:
        steered = rank(directions_KxD, alpha, bar=bar)
        ndcg_KxB, rank_KxB = steered.ndcg - clean.ndcg, steered.mean_rank - clean.mean_rank
        rows.append(dict(alpha=alpha, **_paired(ndcg_KxB, "", bootstrap),
                         **_paired(rank_KxB, "rank_", bootstrap),
                         beats_random=float((ndcg_KxB[0][:, None] > ndcg_KxB[1:].T).mean())))
        top[f"{alpha:g}"] = steered.top[0]
    if bar is not None:
        bar.close()
    result = dict(
        model=name, family=model.family, layer=layer, direction=direction, words=list(words),
        prompts=len(texts), documents=len(documents), concept_documents=int(concept_N.sum()),
        random=random, seed=seed, similarity=similarity, median_token_norm=median_norm,
        clean={k: _plain(v) for k, v in clean_ci.items()},
        rows=[{k: _plain(v) for k, v in r.items()} for r in rows],
        top={q: {key: [dict(index=int(j), concept=bool(concept_N[j]), text=documents[j])
                       for j in idx[i]] for key, idx in top.items()}
             for i, q in enumerate(texts[:show])})
    _print_embedder(result, rows, clean_ci)
    return result


def _paired(change_KxB: np.ndarray, prefix: str, bootstrap: int) -> dict[str, Any]:
    """The concept direction's change (row 0), the random directions' mean change and their
    difference, each a mean over queries with its interval."""
    concept, rand = change_KxB[0], change_KxB[1:].mean(axis=0)
    return {f"{prefix}concept": with_ci(concept, bootstrap=bootstrap),
            f"{prefix}random": with_ci(rand, bootstrap=bootstrap),
            f"{prefix}difference": with_ci(concept - rand, bootstrap=bootstrap)}


def _output_head(name: str, cfg):
    from repr_jax.encoders.decoder_lm_weights import output_head
    spec = name if cfg is None else getattr(cfg.encoder, "init_from", "")
    return output_head(spec) if spec else None


def _plain(v):
    """A float, or ``{value, low, high}`` for a value with an interval."""
    if hasattr(v, "low"):
        return dict(value=float(v), low=float(v.low), high=float(v.high))
    return v


def _fmt(v, digits: int = 3, sign: str = "+") -> str:
    f = f"{sign}.{digits}f"
    return f"{float(v):{f}}" + (f" [{v.low:{f}}, {v.high:{f}}]" if hasattr(v, "low") else "")


def _print(result, rows, shown, continuations) -> None:
    print(f"steer: layer {result['layer']} of {result['model']}, direction "
          f"{result['direction']} (unit); median token norm at this layer over the "
          f"{result['prompts']} prompts: {result['median_token_norm']:.1f}")
    print(f"words: {', '.join(result['words'])}; {result['random']} random directions\n")
    print("| alpha | concept Δ log p | random Δ log p | concept − random | beats random |")
    print("| ---: | --- | --- | --- | ---: |")
    for r in rows:
        print(f"| {r['alpha']:g} | {_fmt(r['concept'])} | {_fmt(r['random'])} | "
              f"{_fmt(r['difference'])} | {r['beats_random']:.2f} |")
    for i, prompt in enumerate(shown):
        print(f"\n{prompt!r}")
        for key, texts in continuations.items():
            print(f"  {key:>6}: {texts[i]!r}")
    sys.stdout.flush()


def _print_embedder(result, rows, clean) -> None:
    print(f"steer: layer {result['layer']} of {result['model']} (a text embedder: the queries "
          f"steered, the documents not), direction {result['direction']} (unit); median token "
          f"norm at this layer over the {result['prompts']} queries: "
          f"{result['median_token_norm']:.1f}")
    print(f"words: {', '.join(result['words'])}; concept documents (holding one as a whole word): "
          f"{result['concept_documents']} of {result['documents']}; {result['random']} random "
          f"directions; {result['similarity']} similarity")
    print(f"clean: nDCG@{CUTOFF} of the concept documents {_fmt(clean['ndcg'], sign='')}, "
          f"their mean rank {_fmt(clean['mean_rank'], 1, '')} (1: first)\n")
    print(f"| alpha | concept Δ nDCG@{CUTOFF} | random Δ nDCG@{CUTOFF} | concept − random | "
          f"concept Δ mean rank | random Δ mean rank | concept − random | beats random |")
    print("| ---: | --- | --- | --- | --- | --- | --- | ---: |")
    for r in rows:
        print(f"| {r['alpha']:g} | {_fmt(r['concept'])} | {_fmt(r['random'])} | "
              f"{_fmt(r['difference'])} | {_fmt(r['rank_concept'], 1)} | "
              f"{_fmt(r['rank_random'], 1)} | {_fmt(r['rank_difference'], 1)} | "
              f"{r['beats_random']:.2f} |")
    print("(Δ: steered − clean, mean over queries [95% interval]; a concept document rising "
          "lowers its rank)")
    for query, tops in result["top"].items():
        print(f"\n{query!r}: top {TOP} (* a concept document)")
        for key, docs in tops.items():
            for place, doc in enumerate(docs):
                text = doc["text"] if len(doc["text"]) <= 70 else doc["text"][:69] + "…"
                label = "" if place else "clean" if key == "clean" else f"alpha {key}"
                print(f"  {label:>9} {place + 1}. "
                      f"{'*' if doc['concept'] else ' '} {text!r}")
    sys.stdout.flush()

