"""``repr-jax features``: a feature browser for a sparse autoencoder trained on an activation store
(``method.name=sae``, ``data.name=activations:STORE``): each latent's firing frequency, activation
histogram, top and sampled contexts and, for a decoder LLM's store, the tokens its decoder
direction promotes and suppresses; written as ``features.json`` and one static ``index.html``
(no server, no network: inline JS and CSS, the JSON embedded).

A latent fires on a vector where its activation is above 0 (every SAE kind here is
non-negative). Every vector of the store is read (all splits), a batch of B at a time, in two
passes: (1) firing counts, sums and maxima per latent; (2) per latent a histogram over
``[0, max]`` in ``bins`` bins, the ``top`` firings by activation, and a uniform sample of
``sample`` of its other firings. Both lists are a running merge: per batch the kept ``[L, K]``
is concatenated with the batch's ``[L, B]`` candidates and ``lax.top_k`` keeps K. The sample
draws each (vector, latent) a priority uniform in [0, 1) from ``(seed, row)`` (the same for any
batch size) and keeps the ``top + sample`` firings of highest priority; at the end the top ones
are removed and the ``sample`` of highest priority left are a uniform sample, without
replacement, of the firings outside the top (at most ``top`` of the kept ones are top ones).
Contexts (text stores): the texts of the kept firings, re-tokenised as the store was written,
``BEFORE`` tokens before and ``AFTER`` after the firing token. Promoted and suppressed tokens
(decoder_lm stores): ``W_dec[l] @ U.T`` with ``U [V, D]`` the unembedding (the tied input
embedding or the untied output head; no final norm), in chunks of latents.

Cost, N vectors of width D, L latents, V tokens: time ``O(2 N D L)`` (two encoder passes) plus
``O(2 N L)`` for the statistics and merges (``top_k`` over ``top + sample + B`` per latent and
batch), ``O(L D V)`` for the logits; memory ``O(B (D + L) + L (top + sample + bins))``, and
``O(C V)`` for a chunk of C logit rows (``CHUNK_BYTES``): never ``[N, L]`` nor ``[L, V]``.

``features.json`` (format ``repr_jax.features``, version 1): ``format``, ``version``, ``run``
(the SAE run's absolute path), ``step``, ``store`` (the store's absolute path), ``encoder``,
``layer``, ``data`` (the store's), ``latents`` (L), ``tokens_seen`` (N, vectors read), ``dead``
(latents that never fired), ``top``, ``sample``, ``bins``, ``seed``, ``created_by``, and
``features``: one object per latent, in latent order, with ``latent``; ``frequency`` (firings /
N); ``fired`` (firings); ``mean_activation`` (over firings; 0 when dead); ``max_activation``;
``histogram`` ``{edges: [bins + 1], counts: [bins]}`` (the last bin closed); ``top`` (by
activation, descending) and ``sample`` (a random sample of the other firings, shown by
activation, descending), lists of ``{example, position, activation, tokens, marked}``:
``tokens`` the context's token strings, which concatenate into readable text (a WordPiece piece
has its ``##`` removed and a word-start piece a space before it; byte-level BPE pieces decode
with their own spaces), ``marked`` the firing token's index in it (null for a pooled embedding,
position -1); both null for an image store; for a decoder_lm store ``promotes`` and
``suppresses``, lists of ``{token, logit}`` (``LOGIT_TOKENS`` each, most promoted or suppressed
first). Floats carry ``DIGITS`` significant digits. A dead latent has frequency 0, empty lists.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax import files
from repr_jax.data import activations as store_lib

FORMAT_NAME, VERSION = "repr_jax.features", 1
JSON_NAME, PAGE_NAME, TEMPLATE = "features.json", "index.html", "features_page.html"
BEFORE, AFTER = 12, 4  # context tokens around the firing token
LOGIT_TOKENS = 10  # promoted and suppressed tokens per latent
CHUNK_BYTES = 1 << 26  # a chunk of latents' [C, V] float32 logits
DIGITS = 6  # significant digits of the floats written
TEXT_SOURCES = ("pairs:", "beir:")


@dataclasses.dataclass(frozen=True)
class Scan:
    """What the two passes found, per latent (numpy): ``fired_L``, ``sum_L``, ``max_L``,
    ``hist_LxH`` (counts over ``[0, max]``), ``top_row_LxK``/``top_val_LxK`` (by activation,
    descending) and ``sample_row_LxS``/``sample_val_LxS`` (the sample by activation,
    descending); row -1 where a latent has fewer firings."""
    vectors: int
    fired_L: np.ndarray
    sum_L: np.ndarray
    max_L: np.ndarray
    hist_LxH: np.ndarray
    top_row_LxK: np.ndarray
    top_val_LxK: np.ndarray
    sample_row_LxS: np.ndarray
    sample_val_LxS: np.ndarray


def _merge(key_LxK, carry_LxK, key_LxB, carry_LxB):
    """Per latent, the K largest ``key`` of the kept ``[L, K]`` and the batch's ``[L, B]``; each
    array of ``carry`` follows its key. Time ``O(L (K + B) log K)``, memory ``O(L (K + B))``."""
    key, idx = jax.lax.top_k(jnp.concatenate([key_LxK, key_LxB], axis=1), key_LxK.shape[1])
    return key, tuple(jnp.take_along_axis(jnp.concatenate([a, b], axis=1), idx, axis=1)
                      for a, b in zip(carry_LxK, carry_LxB))


@jax.jit
def _first(z_BxL, valid_B):
    """Pass 1 of a batch: firings, activation sums and maxima ``[L]``. ``O(B L)``."""
    act_BxL = jnp.where((z_BxL > 0) & valid_B[:, None], z_BxL, 0.0)
    return jnp.sum(act_BxL > 0, axis=0, dtype=jnp.int32), act_BxL.sum(axis=0), act_BxL.max(axis=0)


@functools.partial(jax.jit, static_argnames="bins")
def _second(state, z_BxL, rows_B, valid_B, max_L, key, *, bins: int):
    """Pass 2 of a batch: the histograms, the top merge and the priority merge. ``O(B L)``."""
    fire_BxL = (z_BxL > 0) & valid_B[:, None]
    latents = z_BxL.shape[1]
    scale_1xL = jnp.where(max_L > 0, max_L, 1.0)[None, :]
    bin_BxL = jnp.clip(jnp.floor(z_BxL / scale_1xL * bins), 0, bins - 1)
    flat = (jnp.arange(latents)[None, :] * bins + bin_BxL.astype(jnp.int32)).reshape(-1)
    out = dict(state, hist=state["hist"].at[flat].add(fire_BxL.reshape(-1).astype(jnp.int32)))
    act_LxB = jnp.where(fire_BxL, z_BxL, -jnp.inf).T
    rows_LxB = jnp.broadcast_to(rows_B[None, :], act_LxB.shape)
    out["top_val"], (out["top_row"],) = _merge(state["top_val"], (state["top_row"],), act_LxB,
                                               (rows_LxB,))
    if "pri" in state:  # a priority per (row, latent), whatever the batch
        pri_BxL = jax.vmap(lambda r: jax.random.uniform(jax.random.fold_in(key, r),
                                                        (latents,)))(rows_B)
        out["pri"], (out["pri_row"], out["pri_val"]) = _merge(
            state["pri"], (state["pri_row"], state["pri_val"]),
            jnp.where(fire_BxL, pri_BxL, -jnp.inf).T, (rows_LxB, act_LxB))
    return out


def scan(encode: Callable, vectors, *, top: int = 20, sample: int = 10, bins: int = 30,
         batch_size: int = 4096, seed: int = 0, bar=None) -> Scan:
    """The two passes (module docstring) of ``encode(x_BxD) -> z_BxL`` over ``vectors [N, D]``
    (an array or memory map, read B rows at a time; the last batch padded: one shape).
    ``bar``: a progress bar updated once a batch and pass. Time ``O(2 N D L)``, memory
    ``O(B (D + L) + L (top + sample + bins))``."""
    n = len(vectors)
    b = min(batch_size, n)

    def batches():
        for start in range(0, n, b):
            x_BxD = np.asarray(vectors[start:start + b], np.float32)
            rows = len(x_BxD)
            if rows < b:
                x_BxD = np.concatenate([x_BxD, np.zeros((b - rows,) + x_BxD.shape[1:], np.float32)])
            yield start, jnp.asarray(encode(x_BxD), jnp.float32), jnp.arange(b) < rows
            if bar is not None:
                bar.update(1)

    fired_L = sum_L = max_L = 0
    for _, z_BxL, valid_B in batches():
        f, s, m = jax.device_get(_first(z_BxL, valid_B))
        fired_L, sum_L = fired_L + f.astype(np.int64), sum_L + s.astype(np.float64)
        max_L = np.maximum(max_L, m)
    latents = len(fired_L)
    state = dict(hist=jnp.zeros(latents * bins, jnp.int32),
                 top_val=jnp.full((latents, top), -jnp.inf), top_row=jnp.zeros((latents, top),
                                                                               jnp.int32))
    if sample:
        state.update(pri=jnp.full((latents, top + sample), -jnp.inf),
                     pri_row=jnp.zeros((latents, top + sample), jnp.int32),
                     pri_val=jnp.zeros((latents, top + sample), jnp.float32))
    key, max_dev = jax.random.PRNGKey(seed), jnp.asarray(max_L, jnp.float32)
    for start, z_BxL, valid_B in batches():
        rows_B = start + jnp.arange(b, dtype=jnp.int32)
        state = _second(state, z_BxL, rows_B, valid_B, max_dev, key, bins=bins)
    st = jax.device_get(state)
    top_val = st["top_val"]
    top_row = np.where(np.isfinite(top_val), st["top_row"], -1)
    sample_row, sample_val = np.full((latents, sample), -1), np.zeros((latents, sample),
                                                                      np.float32)
    if sample:  # the kept priorities less the top ones: the first `sample` left
        in_top = (st["pri_row"][:, :, None] == top_row[:, None, :]).any(axis=2)
        keep = np.isfinite(st["pri"]) & ~in_top
        order = np.argsort(~keep, axis=1, kind="stable")[:, :sample]
        ok = np.take_along_axis(keep, order, axis=1)
        sample_row = np.where(ok, np.take_along_axis(st["pri_row"], order, axis=1), -1)
        sample_val = np.where(ok, np.take_along_axis(st["pri_val"], order, axis=1), -np.inf)
        by_act = np.argsort(-sample_val, axis=1, kind="stable")
        sample_row = np.take_along_axis(sample_row, by_act, axis=1)
        sample_val = np.take_along_axis(sample_val, by_act, axis=1)
    return Scan(n, fired_L, sum_L, np.asarray(max_L, np.float32),
                st["hist"].reshape(latents, bins).astype(np.int64), top_row, top_val,
                sample_row, sample_val)


def logit_tokens(w_dec_LxD, unembed_VxD, *, k: int = LOGIT_TOKENS, chunk: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(promoted ids, logits, suppressed ids, logits)``, each ``[L, k]``, of ``W_dec @ U.T``
    (most promoted, most suppressed first), a chunk of ``chunk`` latents at a time (default: as
    many as ``CHUNK_BYTES`` of logits hold). Time ``O(L D V)``, memory ``O(chunk V)``."""
    w_dec_LxD, unembed_VxD = jnp.asarray(w_dec_LxD, jnp.float32), jnp.asarray(unembed_VxD,
                                                                              jnp.float32)
    latents, vocab = w_dec_LxD.shape[0], unembed_VxD.shape[0]
    chunk = min(latents, chunk or max(1, CHUNK_BYTES // (4 * vocab)))

    @jax.jit
    def ends(w_CxD, u_VxD):
        logits_CxV = jnp.dot(w_CxD, u_VxD.T, precision=jax.lax.Precision.HIGHEST)
        up, up_id = jax.lax.top_k(logits_CxV, k)
        down, down_id = jax.lax.top_k(-logits_CxV, k)
        return up_id, up, down_id, -down

    parts = []
    for start in range(0, latents, chunk):
        w_CxD = w_dec_LxD[start:start + chunk]
        rows = w_CxD.shape[0]
        if rows < chunk:  # one shape: one compilation
            w_CxD = jnp.concatenate([w_CxD, jnp.zeros((chunk - rows, w_CxD.shape[1]))])
        parts.append([np.asarray(a)[:rows] for a in ends(w_CxD, unembed_VxD)])
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))


def token_strings(tokenizer) -> Callable[[int], str]:
    """``id -> text`` of the project's tokenizers (cached), pieces that concatenate into
    readable text (module docstring); an instruction id ``-2 - id`` reads as ``id``."""
    from repr_jax.data.tokenizer import SPECIALS, BPETokenizer, WordPieceTokenizer

    def piece(i: int) -> str:
        if isinstance(tokenizer, WordPieceTokenizer):
            t = tokenizer.vocab[i]
            return t[2:] if t.startswith("##") else " " + t
        if isinstance(tokenizer, BPETokenizer):
            return tokenizer.backend.decode([i], skip_special_tokens=False)
        if i < len(SPECIALS):  # the byte tokenizer's specials
            return tokenizer.vocab[i]
        return tokenizer.decode([i])
    cached = functools.lru_cache(maxsize=None)(piece)
    return lambda i: cached(int(i) if i >= 0 else -2 - int(i))


def contexts(model, texts: list[str], wanted, *, before: int = BEFORE, after: int = AFTER,
             chunk: int = 1024) -> dict[tuple[int, int], tuple[list[str], int | None]]:
    """``{(example, position): (tokens, marked)}`` of each wanted firing: its text re-tokenised
    as the store was (``model.sides``, ``model.valid``), the read tokens from ``before`` before
    to ``after`` after the position (position -1, a pooled embedding: the text's first ones,
    marked None). Time ``O(E T)`` for the E texts named."""
    string = token_strings(model.tokenizer)
    examples = sorted({e for e, _ in wanted})
    ids_of = {}
    for start in range(0, len(examples), chunk):
        part = examples[start:start + chunk]
        ids = np.asarray(model.sides.encode(model.tokenizer, [texts[e] for e in part], "doc"))
        valid = np.asarray(model.valid(ids))
        ids_of.update({e: (row, v) for e, row, v in zip(part, ids, valid)})
    out = {}
    for e, p in wanted:
        row, valid = ids_of[e]
        if p >= len(row) or (p >= 0 and not valid[p]):
            raise ValueError(f"example {e} position {p} is not a token of its text re-tokenised "
                             f"({int(valid.sum())} tokens): the store and its model disagree")
        lo, hi = (max(0, p - before), p + after + 1) if p >= 0 else (0, before + after + 1)
        kept = [q for q in range(lo, min(hi, len(row))) if valid[q]]
        out[(e, p)] = ([string(row[q]) for q in kept], kept.index(p) if p >= 0 else None)
    return out


def _round(v) -> float:
    """``v`` to ``DIGITS`` significant digits (a smaller JSON; float32 holds about 7)."""
    return float(f"{float(v):.{DIGITS}g}")


def _firings(rows, vals, index, ctx) -> list[dict[str, Any]]:
    """The ``{example, position, activation, tokens, marked}`` of a latent's kept rows (-1:
    none); ``index``: ``{row: (example, position)}``."""
    out = []
    for r, v in zip(rows, vals):
        if r < 0:
            continue
        e, p = (int(a) for a in index[r])
        tokens, marked = ctx.get((e, p), (None, None))
        out.append(dict(example=e, position=p, activation=_round(v), tokens=tokens,
                        marked=marked))
    return out


def feature_list(s: Scan, index, *, bins: int, ctx=None, logits=None, strings=None
                 ) -> list[dict[str, Any]]:
    """The ``features`` of ``features.json`` (module docstring) from a :class:`Scan`, the
    store's ``index [N, 2]``, the contexts (:func:`contexts`) and :func:`logit_tokens`'s
    (``strings``: :func:`token_strings`). Time ``O(L (top + sample + bins))``."""
    rows = np.unique(np.concatenate([s.top_row_LxK.ravel(), s.sample_row_LxS.ravel()]))
    rows = rows[rows >= 0]
    idx = dict(zip(rows.tolist(), np.asarray(index[rows]).tolist()))  # rows read in order
    ctx = ctx or {}
    out = []
    for l in range(len(s.fired_L)):
        fired = int(s.fired_L[l])
        f = dict(latent=l, frequency=_round(fired / s.vectors), fired=fired,
                 mean_activation=_round(s.sum_L[l] / fired) if fired else 0.0,
                 max_activation=_round(s.max_L[l]),
                 histogram=dict(edges=[_round(e) for e in np.linspace(0, s.max_L[l], bins + 1)],
                                counts=s.hist_LxH[l].tolist()),
                 top=_firings(s.top_row_LxK[l], s.top_val_LxK[l], idx, ctx),
                 sample=_firings(s.sample_row_LxS[l], s.sample_val_LxS[l], idx, ctx))
        if logits is not None:
            up_id, up, down_id, down = (a[l] for a in logits)
            f["promotes"] = [dict(token=strings(i), logit=_round(v)) for i, v in zip(up_id, up)]
            f["suppresses"] = [dict(token=strings(i), logit=_round(v))
                               for i, v in zip(down_id, down)]
        out.append(f)
    return out


def page(data: dict[str, Any]) -> str:
    """``index.html``: the page template with ``data`` embedded as JSON (``<``, ``>``, ``&``
    escaped: no text can close its script element). Time ``O(size of data)``."""
    blob = json.dumps(data, separators=(",", ":"))
    blob = blob.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    template = resources.files("repr_jax").joinpath(TEMPLATE).read_text(encoding="utf-8")
    return template.replace("__FEATURES_JSON__", blob)


def _sae_store(workdir: Path) -> Path:
    """The store folder of the SAE run in ``workdir``; one line when it is not an SAE run on a
    store, or its store is not there."""
    from repr_jax import config as config_lib
    from repr_jax.train.run import run_config_path
    try:
        path = run_config_path(workdir)
    except config_lib.ConfigError as e:  # the message starts with the folder: name the flag
        raise ValueError(f"--workdir {e}") from None
    cfg = config_lib.load_json(path)
    if cfg.method.name != "sae":
        raise ValueError(f"--workdir {workdir}: a {cfg.method.name} run; this command browses "
                         f"a sparse autoencoder's latents (a method.name=sae run)")
    if not cfg.data.name.startswith(store_lib.PREFIX):
        raise ValueError(f"--workdir {workdir}: an SAE trained on {cfg.data.name}, not on an "
                         f"activation store (data.name=activations:DIR): no contexts to show")
    folder = store_lib.folder_of(cfg.data.name).absolute()
    try:
        store_lib.read_meta(folder)
    except ValueError as e:
        raise ValueError(f"--workdir {workdir}: its store is not readable: {e}") from None
    return folder


def _unembedding(meta, model, cfg) -> np.ndarray:
    """A decoder's ``[V, D]`` unembedding: its untied output head, else its tied input
    embedding (as :meth:`repr_jax.train.splice.Host._output_head` finds it)."""
    from repr_jax.encoders.decoder_lm_weights import output_head
    spec = meta["model"] if cfg is None else getattr(cfg.encoder, "init_from", "")
    head = output_head(spec) if spec else None
    return np.asarray(head if head is not None
                      else model.variables["params"]["embed_tokens"]["embedding"], np.float32)


def features(*, workdir: str | Path, out: str | Path, top: int = 20, sample: int = 10,
             bins: int = 30, batch_size: int = 4096, progress: bool = True) -> dict[str, Any]:
    """Writes ``out/features.json`` and ``out/index.html`` (module docstring) of the SAE run in
    ``workdir``; returns the JSON's object. Every flag is checked before the store is read."""
    from repr_jax import __version__
    from repr_jax.train.activations import load_model, texts_of
    from repr_jax.train.run import load_trained
    for flag, value, least in (("--top", top, 1), ("--sample", sample, 0), ("--bins", bins, 1),
                               ("--batch-size", batch_size, 1)):
        if value < least:
            raise ValueError(f"{flag} must be at least {least}, got {value}")
    workdir = Path(workdir).expanduser().absolute()
    folder = _sae_store(workdir)
    out = files.check_output(out, flag="--out", folder=True,
                             inputs=[workdir, folder, *store_lib.store_files(folder)])
    files.check_writable(out, flag="--out")
    _, _, method, state = load_trained(workdir)
    store = store_lib.open_store(folder, verify=False)  # the run's dataset verified it
    meta = store.meta
    embed = jax.jit(method.embed)  # the SAE's weights an argument, not a compiled constant
    bar = None
    if progress:
        from tqdm.auto import tqdm
        batches = -(-len(store.vectors) // min(batch_size, len(store.vectors)))
        bar = tqdm(total=2 * batches, desc="features: 2 passes", unit="batch", leave=False,
                   dynamic_ncols=True)
    try:
        s = scan(lambda x: embed(state.variables, x), store.vectors, top=top, sample=sample,
                 bins=bins, batch_size=batch_size, bar=bar)
    finally:
        if bar is not None:
            bar.close()
    ctx, logits, strings = {}, None, None
    if str(meta["data"]).startswith(TEXT_SOURCES):
        run = meta["step"] is not None
        if run and not Path(meta["model"]).is_dir():
            print(f"repr-jax: warning: features: its store's model run {meta['model']} is not "
                  f"there: no token contexts", file=sys.stderr)
        else:
            model, cfg = load_model(workdir=meta["model"] if run else None,
                                    init_from=None if run else meta["model"],
                                    max_len=meta["max_len"], text=True,
                                    skip_first=meta.get("skip_first", 0))
            rows = np.concatenate([s.top_row_LxK.ravel(), s.sample_row_LxS.ravel()])
            rows = np.unique(rows[rows >= 0])
            wanted = {tuple(map(int, ep)) for ep in np.asarray(store.index[rows])}
            ctx = contexts(model, texts_of(meta["data"]), wanted)
            if model.family == "decoder_lm":
                strings = token_strings(model.tokenizer)
                logits = logit_tokens(np.asarray(state.params["sae"]["W_dec"]),
                                      _unembedding(meta, model, cfg))
    data = dict(format=FORMAT_NAME, version=VERSION, run=str(workdir),
                step=int(jax.device_get(state.step)), store=str(folder), encoder=meta["encoder"],
                layer=meta["layer"], data=meta["data"], latents=len(s.fired_L),
                tokens_seen=s.vectors, dead=int((s.fired_L == 0).sum()), top=top, sample=sample,
                bins=bins, seed=0, created_by=f"repr_jax {__version__}",
                features=feature_list(s, store.index, bins=bins, ctx=ctx, logits=logits,
                                      strings=strings))
    files.write_json(out / JSON_NAME, data, indent=None, separators=(",", ":"))
    files.write_text(out / PAGE_NAME, page(data))
    print(f"features: {data['latents']:,} latents ({data['dead']:,} dead) over "
          f"{s.vectors:,} vectors -> {out / PAGE_NAME}", file=sys.stderr)
    return data
