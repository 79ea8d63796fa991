"""A Llama-family decoder as an embedding model (E5-Mistral, LLM2Vec, GritLM, SGPT).

Input: token ids ``[B, T]`` where ``-1`` marks padding (left or right: the pad id of these
vocabularies is often their EOS, so padding is never read from the ids' values) and ``-2 - id``
marks an instruction token: it is read and attended to like any other but left out of the
pooling (LLM2Vec's and GritLM's instruction mask). Each block is pre-norm::

    x = x + Attn(RMSNorm(x));  x = x + SwiGLU(RMSNorm(x))

with rotary position embeddings (Hugging Face's ``rotate_half`` layout, positions counted from
each row's first real token, so left padding changes nothing), grouped-query attention and a final
RMSNorm — the conventions of Hugging Face's ``LlamaModel`` (Mistral and Qwen2 too; Qwen2's
``qkv_bias``). Gemma 3 is the same family with options (``Gemma3-270M``; a ``gemma3`` GGUF sets
them): a head size of its own, RMSNorm scaled by ``1 + w``, norms after attention and FFN too,
RMS-normalised queries and keys, embeddings times ``sqrt(width)``, GeGLU (tanh GELU), and local
blocks whose keys lie within a sliding window, with their own rotary base, between global ones
(every sixth)::

    x = x + RMSNorm(Attn(RMSNorm(x)));  x = x + RMSNorm(GeGLU(RMSNorm(x)))

``attention`` is ``causal`` (as pretrained) or ``bidirectional`` (LLM2Vec): a
static choice, never derived from the batch. Poolings: ``last_token`` (each row's last real token,
under either padding side), ``mean`` and ``weighted_mean`` (position-weighted, SGPT). Parameter
names mirror the Hugging Face layout so ``decoder_lm_weights`` maps a checkpoint one tensor to one
parameter. Cost per text: ``O(depth * (T * width * (width + mlp_dim) + T^2 * width))``; attention
memory ``O(T^2)`` per head, or with ``attention_chunk`` (:func:`chunked_attention`) ``O(chunk * T)``
in global blocks and ``O(chunk * (chunk + window))`` in local ones, whose time falls to
``O(T * (chunk + window) * width)``.

As a language model: :func:`next_token_logits` puts the final-norm states through the (tied)
output embedding, :func:`next_token_cross_entropy` scores each text token's prediction of the next
(whole logits, or :func:`next_token_cross_entropy_chunked` a few positions at a time) — what a
sparse autoencoder's "cross-entropy recovered" is measured with.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax.config import EncoderConfig, config, static
from repr_jax.encoders import precision
from repr_jax.encoders.attention import attend
from repr_jax.encoders.family import Family, sizes
from repr_jax.encoders.lora import LoRA, dense_factory
from repr_jax.llm_files import GEMMA3

PAD = -1  # the padding id of decoder_lm inputs
ATTENTIONS = ("causal", "bidirectional")
POOLINGS = ("last_token", "mean", "weighted_mean")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")  # the default: attention projections
DENSE_LAYERS = LORA_TARGETS + ("gate_proj", "up_proj", "down_proj")

VARIANTS = {
    "tiny": dict(width=32, depth=2, num_heads=4, num_kv_heads=2, mlp_dim=64),
    "SmolLM2-135M": dict(width=576, depth=30, num_heads=9, num_kv_heads=3, mlp_dim=1536,
                         rope_base=100000.0, eps=1e-5),
    "Gemma3-270M": dict(width=640, depth=18, num_heads=4, num_kv_heads=1, head_dim=256,
                        mlp_dim=2048, rope_base=1e6, eps=1e-6, sliding_window=512, **GEMMA3),
}


def split_ids(ids: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(token ids, valid [B, T], pooled [B, T])`` of decoder_lm inputs (module docstring):
    padding is ``-1`` (not valid), an instruction token ``-2 - id`` (valid, not pooled)."""
    ids = ids.astype(jnp.int32)
    valid, pooled = ids != PAD, ids >= 0
    return jnp.where(pooled, ids, jnp.where(valid, -2 - ids, 0)), valid, pooled


def last_valid(valid: jax.Array) -> jax.Array:
    """Index ``[B]`` of each row's last valid position (left or right padding alike)."""
    t = valid.shape[1]
    return t - 1 - jnp.argmax(valid[:, ::-1], axis=1)


def pool(kind: str, tokens: jax.Array, valid: jax.Array, pooled: jax.Array) -> jax.Array:
    """``last_token``: the state of the last valid token (an instruction-only row pools its
    instruction); ``mean``: over the pooled tokens; ``weighted_mean``: each pooled token weighted
    by its position counted from 1 at the row's first token (SGPT; sentence-transformers'
    ``weightedmean`` under right padding)."""
    if kind == "last_token":
        last = last_valid(valid)
        return jnp.take_along_axis(tokens, last[:, None, None], axis=1)[:, 0]
    if kind in ("mean", "weighted_mean"):
        w = pooled.astype(tokens.dtype)
        if kind == "weighted_mean":
            w = w * jnp.cumsum(valid, axis=1).astype(tokens.dtype)
        return jnp.einsum("bt,btd->bd", w, tokens) / jnp.maximum(w.sum(1), 1e-9)[:, None]
    raise ValueError(f"unknown decoder_lm pooling {kind!r}; choose from: {', '.join(POOLINGS)}")


ROPE_SCALINGS = ("none", "linear", "ntk", "yarn")


def rope_frequencies(d: int, base: float, scaling: str = "none", factor: float = 1.0,
                     original_context: int = 0) -> tuple[jax.Array, float]:
    """``(inverse frequencies [d / 2], attention factor)`` of a rotary embedding of head size
    ``d``, scaled to read past the trained context by ``factor``: ``none``; ``linear`` (positions
    divided by the factor, Chen et al. 2023); ``ntk`` (static NTK-aware: the base times ``factor
    ** (d / (d - 2))``, which keeps the highest frequency and divides the lowest by the factor;
    transformers has only the dynamic form, whose base follows the length read); ``yarn`` (Peng
    et al. 2023: frequencies that turn more than 32 times within ``original_context`` kept,
    fewer than once interpolated by the factor, a linear ramp between; cos and sin times
    ``0.1 ln(factor) + 1``, on queries and keys alike, as transformers does). ``linear`` and
    ``yarn`` equal transformers' ``ROPE_INIT_FUNCTIONS`` (tested). Time ``O(d)``."""
    exponents = jnp.arange(0, d, 2, dtype=jnp.float32) / d
    if scaling == "none" or factor == 1.0:
        return 1.0 / (base ** exponents), 1.0
    if scaling == "linear":
        return 1.0 / (base ** exponents) / factor, 1.0
    if scaling == "ntk":
        return 1.0 / ((base * factor ** (d / (d - 2))) ** exponents), 1.0
    if scaling != "yarn":
        raise ValueError(f"unknown RoPE scaling {scaling!r}; choose from: "
                         f"{', '.join(ROPE_SCALINGS)}")
    import math

    def correction(rotations: float) -> float:  # the dimension that turns this often
        return d * math.log(original_context / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction(32.0)), 0)
    high = min(math.ceil(correction(1.0)), d - 1)
    high = high + 0.001 if low == high else high
    ramp = jnp.clip((jnp.arange(d // 2, dtype=jnp.float32) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # 1: extrapolated (kept), 0: interpolated (divided by the factor)
    pos = base ** exponents
    inv = (1.0 / (factor * pos)) * (1.0 - keep) + (1.0 / pos) * keep
    return inv, 0.1 * math.log(factor) + 1.0


def rope(x: jax.Array, positions: jax.Array, base: float,
         scaling: tuple[str, float, int] = ("none", 1.0, 0)) -> jax.Array:
    """Rotary embedding of ``x [B, T, N, d]`` at ``positions [B, T]`` (``rotate_half`` layout:
    the first and second halves of each head are the pairs); ``scaling`` is
    ``(kind, factor, original context)`` of :func:`rope_frequencies`."""
    d = x.shape[-1]
    inv_freq, attention_factor = rope_frequencies(d, base, *scaling)
    angles = positions[..., None].astype(jnp.float32) * inv_freq[None, None]  # [B, T, d/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    cos = jnp.concatenate([cos] * 2, -1)[:, :, None, :].astype(x.dtype)
    sin = jnp.concatenate([sin] * 2, -1)[:, :, None, :].astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


# ------------------------------------------------------------------------------ next-token head
def _output_matrix(params, head_VxD) -> jax.Array:
    """The ``[V, D]`` output head: ``head_VxD`` when given (an untied checkpoint's), else the
    tied input embedding of ``params`` (DecoderLM's parameter tree, or variables holding it)."""
    if head_VxD is not None:
        return head_VxD
    if "embed_tokens" not in params and "params" in params:
        params = params["params"]
    if "embed_tokens" not in params:
        raise ValueError(f"next-token logits: the parameters hold no embed_tokens/embedding (top "
                         f"level: {', '.join(sorted(params)[:6])}); pass DecoderLM's own tree")
    return params["embed_tokens"]["embedding"]


def next_token_logits(params, tokens_BxTxD: jax.Array, head_VxD: jax.Array | None = None
                      ) -> jax.Array:
    """Next-token logits ``[B, T, V]`` (float32) of the final-norm states ``features["tokens"]``
    of :class:`DecoderLM`: ``tokens @ E.T`` with ``E`` the tied embedding
    ``params["embed_tokens"]["embedding"] [V, D]`` (SmolLM2, Llama 3.2 1B/3B, Qwen2 0.5B/1.5B),
    or ``head_VxD`` for a checkpoint whose output head is its own tensor (GGUF ``output.weight``,
    Hugging Face ``lm_head.weight``): :func:`repr_jax.encoders.decoder_lm_weights.output_head`
    reads it (None when tied) and ``LoadedDecoderLM.head`` holds it. The parameter tree never
    holds an untied head (an embedder does not read it), so without ``head_VxD`` such a model's
    logits here are not its own. Logits at padding positions are computed like any other (mask
    them, e.g. with :func:`next_token_mask`). Time ``O(B * T * D * V)``, memory ``O(B * T * V)``
    (49,152 x 4 bytes per position for SmolLM2: 16 texts of 512 tokens hold 1.6 GB; to avoid
    holding them, :func:`next_token_cross_entropy_chunked`)."""
    w = _output_matrix(params, head_VxD).astype(jnp.float32)
    return jnp.einsum("btd,vd->btv", tokens_BxTxD.astype(jnp.float32), w,
                      precision=jax.lax.Precision.HIGHEST)


def next_token_mask(ids_BxT: jax.Array, valid_BxT: jax.Array) -> jax.Array:
    """``[B, T - 1]``: whether position ``t``'s prediction of token ``t + 1`` is scored — both
    are text tokens: ``valid_BxT`` (the caller's mask, e.g. ``ids != pad_id`` for a vocabulary
    with its own padding id, or activations' kept tokens) and neither padding (``-1``) nor an
    instruction token (``-2 - id``: read by the model, never a target nor a scored context
    position). Under left or right padding the scored pairs are each row's consecutive text
    tokens; a row of n text tokens scores n - 1 predictions."""
    text = (ids_BxT >= 0) & valid_BxT.astype(bool)
    return text[:, :-1] & text[:, 1:]


def _target_ids(ids_BxT: jax.Array) -> jax.Array:
    """``[B, T - 1]``: the token id each position predicts (instructions decoded, padding 0: any
    id in range, since masked)."""
    return split_ids(ids_BxT)[0][:, 1:]


def next_token_cross_entropy(logits_BxTxV: jax.Array, ids_BxT: jax.Array,
                             valid_BxT: jax.Array) -> jax.Array:
    """Per-token cross-entropy ``[B, T - 1]`` in nats (float32): entry ``t`` is
    ``logsumexp(logits[t]) - logits[t, id[t + 1]]``, the loss of predicting token ``t + 1`` from
    position ``t``; 0 where :func:`next_token_mask` is False (a padding or instruction token on
    either side, or ``valid_BxT`` False). ``ids_BxT`` follow the module's input convention (``-1``
    padding, ``-2 - id`` instruction tokens; their ids are decoded, never used as targets). The
    mean over scored tokens is ``ce.sum() / next_token_mask(ids, valid).sum()``. Time
    ``O(B * T * V)`` on top of the logits' ``O(B * T * D * V)``; memory ``O(B * T * V)`` for the
    logits the caller holds (:func:`next_token_cross_entropy_chunked` never holds them)."""
    logits = logits_BxTxV[:, :-1].astype(jnp.float32)
    target = jnp.take_along_axis(logits, _target_ids(ids_BxT)[..., None], axis=-1)[..., 0]
    ce = jax.nn.logsumexp(logits, axis=-1) - target
    return jnp.where(next_token_mask(ids_BxT, valid_BxT), ce, 0.0)


def next_token_cross_entropy_chunked(params, tokens_BxTxD: jax.Array, ids_BxT: jax.Array,
                                     valid_BxT: jax.Array, *, head_VxD: jax.Array | None = None,
                                     chunk: int = 128) -> jax.Array:
    """:func:`next_token_cross_entropy` of :func:`next_token_logits`, ``[B, T - 1]``, computed
    ``chunk`` positions at a time (``lax.map``) so only ``[B, chunk, V]`` logits exist at once:
    the same time ``O(B * T * D * V)``, memory ``O(B * chunk * V)`` instead of ``O(B * T * V)``
    (the last chunk is padded, at most ``chunk - 1`` positions of extra work). Jit-compatible;
    ``chunk`` is static."""
    if chunk < 1:
        raise ValueError(f"next_token_cross_entropy_chunked: chunk={chunk} must be >= 1")
    b, t, d = tokens_BxTxD.shape
    n = t - 1
    if n <= 0:
        return jnp.zeros((b, 0), jnp.float32)
    c = min(chunk, n)
    k = -(-n // c)
    x = jnp.pad(tokens_BxTxD[:, :-1], ((0, 0), (0, k * c - n), (0, 0)))
    y = jnp.pad(_target_ids(ids_BxT), ((0, 0), (0, k * c - n)))
    w = _output_matrix(params, head_VxD)

    def one(xy):
        x_BxCxD, y_BxC = xy
        logits = next_token_logits(None, x_BxCxD, w)
        target = jnp.take_along_axis(logits, y_BxC[..., None], axis=-1)[..., 0]
        return jax.nn.logsumexp(logits, axis=-1) - target

    ce = jax.lax.map(one, (x.reshape(b, k, c, d).swapaxes(0, 1), y.reshape(b, k, c).swapaxes(0, 1)))
    ce = ce.swapaxes(0, 1).reshape(b, k * c)[:, :n]
    return jnp.where(next_token_mask(ids_BxT, valid_BxT), ce, 0.0)


class OffsetRMSNorm(nn.Module):
    """RMSNorm scaled by ``offset + w`` in float32, ``w`` initialised to 0 (Gemma's, offset 1:
    ``x / rms(x) * (1 + w)``). Cost ``O(T * D)``."""
    eps: float
    offset: float = 1.0

    @nn.compact
    def __call__(self, x):
        w = self.param("scale", nn.initializers.zeros, (x.shape[-1],))
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        scale = (self.offset + w.astype(jnp.float32)).reshape((1,) * (x.ndim - 1) + (-1,))
        return (y * scale).astype(x.dtype)


def rms_norm(eps: float, offset: float, name: str):
    """flax's ``nn.RMSNorm`` (``offset`` 0: Llama's, its results unchanged) or
    :class:`OffsetRMSNorm`; either holds one ``scale`` parameter under ``name``."""
    if offset:
        return OffsetRMSNorm(eps, offset, name=name)
    return nn.RMSNorm(eps, name=name)


AUTO_CHUNK_ABOVE = 2048  # attention_chunk 0: texts longer than this go through chunked_attention
AUTO_CHUNK = 512  # ... in query blocks of this many positions


def chunked_attention(q_BxTxHxDh: jax.Array, k_BxTxKxDh: jax.Array, v_BxTxKxDh: jax.Array,
                      valid_BxT: jax.Array, *, chunk: int, window: int = 0,
                      causal: bool = True) -> jax.Array:
    """The decoder's masked attention ``[B, T, H, Dh]`` without a ``T x T`` score or mask array:
    queries in blocks of ``chunk`` positions (``lax.map``, the last block padded), each block's
    mask built from ``valid_BxT`` and its own positions. A local block (``window`` > 0) reads only
    the keys its window can reach, ``[start - window + 1, end]`` (causal; bidirectional to
    ``end + window - 1`` too): time ``O(T * (chunk + window))`` instead of ``O(T^2)``, scores
    ``O(chunk * (chunk + window))`` per head at a time. A global block reads every key at once
    per query block (an exact softmax, no running max/sum to carry, scores ``O(chunk * T)`` per
    head at a time, small beside the weights at ``T`` 8,192): time ``O(T^2)`` still. Each query
    block is rematerialised (``jax.checkpoint``) so a gradient holds one block's scores, not
    all. The products follow the precision policy
    as the dense path does (:func:`attend` under ``precision.active()``). Keys ``k``/``v`` have
    ``K`` heads, each serving ``H / K`` query heads. Equal to the dense path at every query
    with a key to read; a query with none (left padding before the text) gets zeros, where the
    dense path averages every value: no NaN either way, and no text token reads it."""
    b, t, h, dh = q_BxTxHxDh.shape
    c = min(chunk, t)
    n = -(-t // c)
    before = window - 1 if window else 0  # keys a query may read before itself ...
    after = 0 if causal or not window else window - 1  # ... and after it, beyond its block
    span = c + before + after
    q = jnp.pad(q_BxTxHxDh, ((0, 0), (0, n * c - t), (0, 0), (0, 0)))
    local = bool(window) and span < t
    if local:  # padded keys: index j of the original is j + before here
        pads = ((0, 0), (before, n * c - t + after), (0, 0), (0, 0))
        k, v = jnp.pad(k_BxTxKxDh, pads), jnp.pad(v_BxTxKxDh, pads)
    else:
        k, v, span = k_BxTxKxDh, v_BxTxKxDh, t
    group = h // k.shape[2]

    def one(start):
        q_blk = jax.lax.dynamic_slice_in_dim(q, start, c, axis=1)
        if local:
            k_blk = jax.lax.dynamic_slice_in_dim(k, start, span, axis=1)
            v_blk = jax.lax.dynamic_slice_in_dim(v, start, span, axis=1)
            first = start - before
        else:
            k_blk, v_blk, first = k, v, 0
        qi = start + jnp.arange(c)
        kj = first + jnp.arange(span)
        inside = (kj >= 0) & (kj < t)
        m = jnp.take(valid_BxT, jnp.clip(kj, 0, t - 1), axis=1) & inside[None]  # [B, span]
        rel = jnp.ones((c, span), bool)
        if causal:
            rel = rel & (kj[None] <= qi[:, None])
        if window:
            rel = rel & (jnp.abs(qi[:, None] - kj[None]) < window)
        m_Bx1xCxS = m[:, None, None, :] & rel[None, None]
        if precision.active():
            ctx = attend(q_blk, jnp.repeat(k_blk, group, axis=2),
                         jnp.repeat(v_blk, group, axis=2), mask=m_Bx1xCxS)
        else:
            ctx = jax.nn.dot_product_attention(q_blk, k_blk, v_blk, mask=m_Bx1xCxS)
        seen = m_Bx1xCxS.any(-1)[:, 0, :, None, None]  # [B, C, 1, 1]
        return jnp.where(seen, ctx, jnp.zeros((), ctx.dtype))

    out = jax.lax.map(jax.checkpoint(one), jnp.arange(n) * c)  # [n, B, C, H, Dh]
    return out.transpose(1, 0, 2, 3, 4).reshape(b, n * c, h, dh)[:, :t]


ACTIVATIONS = {"silu": nn.silu, "gelu_tanh": lambda x: nn.gelu(x, approximate=True)}


class DecoderBlock(nn.Module):
    """One pre-norm block: Llama's (SwiGLU, two norms) or, with ``post_norms``, Gemma's (norms
    before and after attention and FFN). ``window`` > 0: a local block, its keys within the
    sliding window (the mask it is given already says so) and its rotary base ``rope_base``.
    ``attention_chunk`` > 0: no mask is given (None); :func:`chunked_attention` builds it from
    ``valid_BxT``, ``window`` and ``causal`` a query block at a time."""
    num_heads: int
    num_kv_heads: int
    mlp_dim: int
    rope_base: float
    eps: float
    qkv_bias: bool = False
    lora: LoRA | None = None
    head_dim: int = 0
    norm_offset: float = 0.0
    post_norms: bool = False
    qk_norm: bool = False
    mlp_act: str = "silu"
    window: int = 0
    causal: bool = True
    attention_chunk: int = 0
    rope_scaling: tuple[str, float, int] = ("none", 1.0, 0)  # rope_frequencies' arguments
    query_scalar: float = 0.0  # scores divided by sqrt(this) (0: the head size)

    @nn.compact
    def __call__(self, x_BxTxD, positions_BxT, mask_Bx1xTxT, valid_BxT=None):
        b, t, d = x_BxTxD.shape
        dh = self.head_dim or d // self.num_heads

        def norm(name):
            return rms_norm(self.eps, self.norm_offset, name)

        h = norm("input_layernorm")(x_BxTxD)
        dense = dense_factory(self.lora, LORA_TARGETS)

        def proj(name, heads):
            y = dense(heads * dh, name, self.qkv_bias)(h).reshape(b, t, heads, dh)
            return norm(name[0] + "_norm")(y) if self.qk_norm and name != "v_proj" else y

        q = rope(proj("q_proj", self.num_heads), positions_BxT, self.rope_base, self.rope_scaling)
        k = rope(proj("k_proj", self.num_kv_heads), positions_BxT, self.rope_base,
                 self.rope_scaling)
        v = proj("v_proj", self.num_kv_heads)
        if self.query_scalar and self.query_scalar != dh:  # attention divides by sqrt(dh)
            q = q * jnp.asarray((dh / self.query_scalar) ** 0.5, q.dtype)
        if self.attention_chunk:
            ctx = chunked_attention(q, k, v, valid_BxT, chunk=self.attention_chunk,
                                    window=self.window, causal=self.causal)
        elif precision.active():  # bfloat16 products: each key/value head serves its query group
            group = self.num_heads // self.num_kv_heads
            ctx = attend(q, jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2),
                         mask=mask_Bx1xTxT)
        else:
            ctx = jax.nn.dot_product_attention(q, k, v, mask=mask_Bx1xTxT)  # grouped-query
        out = dense(d, "o_proj", False)(ctx.reshape(b, t, self.num_heads * dh))
        if self.post_norms:
            x = x_BxTxD + norm("post_attention_layernorm")(out)
            h = norm("pre_feedforward_layernorm")(x)
        else:  # Llama's name for its one norm before the FFN
            x = x_BxTxD + out
            h = norm("post_attention_layernorm")(x)
        gate = dense(self.mlp_dim, "gate_proj", False)(h)
        up = dense(self.mlp_dim, "up_proj", False)(h)
        out = dense(d, "down_proj", False)(ACTIVATIONS[self.mlp_act](gate) * up)
        return x + (norm("post_feedforward_layernorm")(out) if self.post_norms else out)


class DecoderLM(nn.Module):
    """Returns ``(embedding [B, E], features)`` with ``tokens`` ``[B, T, D]`` (after the final
    norm), ``layers`` (each block's output), ``mask`` (the pooled tokens), ``pooled`` and
    ``pre_head``."""
    vocab_size: int = 49152
    width: int = 576
    depth: int = 30
    num_heads: int = 9
    num_kv_heads: int = 3
    mlp_dim: int = 1536
    rope_base: float = 10000.0
    eps: float = 1e-5
    qkv_bias: bool = False
    attention: str = "causal"
    pooling: str = "last_token"
    embed_dim: int = 0
    remat: bool = False
    pad_id: int = PAD  # a vocabulary with its own padding token (WordPiece's 0) names it
    lora: LoRA | None = None  # adapters on the layers it names (optim.lora_*)
    # Gemma 3's options (the weights' header sets them: repr_jax.llm_files.GEMMA3)
    head_dim: int = 0  # 0: width // num_heads
    sliding_window: int = 0  # > 0: local blocks see keys fewer than this many positions away
    sliding_pattern: int = 0  # every k-th block global (Gemma 3: 6); 0: all local if windowed
    rope_local_base: float = 0.0  # the local blocks' rotary base (0: rope_base)
    norm_offset: float = 0.0  # RMSNorm scales by (offset + w)
    post_norms: bool = False  # norms after attention and FFN too
    qk_norm: bool = False  # RMS-normalised queries and keys
    embed_scale: bool = False  # embeddings times sqrt(width)
    mlp_act: str = "silu"  # silu (SwiGLU) or gelu_tanh (GeGLU)
    # > 0: attention in query blocks of this many positions (chunked_attention), no T x T array;
    # 0: dense up to AUTO_CHUNK_ABOVE tokens, blocks of AUTO_CHUNK beyond
    attention_chunk: int = 0
    # RoPE scaling of the global blocks (local ones keep theirs, as Gemma 3's): rope_frequencies
    rope_scaling: str = "none"
    rope_factor: float = 1.0
    rope_original_context: int = 0  # yarn: the context the model was trained on
    query_scalar: float = 0.0  # attention scores divided by sqrt(this) (0: the head size)

    def setup_check(self):
        if self.attention not in ATTENTIONS:
            raise ValueError(f"decoder_lm attention {self.attention!r}; choose from: "
                             f"{', '.join(ATTENTIONS)}")
        if (self.width % self.num_heads and not self.head_dim) or \
                self.num_heads % self.num_kv_heads:
            raise ValueError(f"decoder_lm: width {self.width}, num_heads {self.num_heads} and "
                             f"num_kv_heads {self.num_kv_heads} must divide one another")
        if self.mlp_act not in ACTIVATIONS:
            raise ValueError(f"decoder_lm mlp_act {self.mlp_act!r}; choose from: "
                             f"{', '.join(ACTIVATIONS)}")
        if self.sliding_window < 0 or self.sliding_pattern < 0:
            raise ValueError(f"decoder_lm: sliding_window {self.sliding_window} and "
                             f"sliding_pattern {self.sliding_pattern} must be >= 0")
        if self.rope_scaling not in ROPE_SCALINGS:
            raise ValueError(f"decoder_lm rope_scaling {self.rope_scaling!r}; choose from: "
                             f"{', '.join(ROPE_SCALINGS)}")
        if not self.rope_factor > 0:
            raise ValueError(f"decoder_lm: RoPE scaling factor {self.rope_factor} must be > 0 "
                             f"(> 1 reads past the trained context)")
        if self.rope_scaling == "yarn" and self.rope_original_context <= 0:
            raise ValueError("decoder_lm: rope_scaling='yarn' needs rope_original_context, the "
                             "context the model was trained on (Gemma 3: 32768)")
        if self.query_scalar < 0:
            raise ValueError(f"decoder_lm: query_scalar {self.query_scalar} must be >= 0 (0: "
                             f"the head size)")
        if self.attention_chunk < 0:
            raise ValueError(f"decoder_lm: attention_chunk {self.attention_chunk} must be >= 0 "
                             f"(0: dense, or chunked beyond {AUTO_CHUNK_ABOVE} tokens)")

    def is_local(self, i: int) -> bool:
        """Whether block ``i`` attends within the sliding window (Gemma 3: all but every
        ``sliding_pattern``-th, counted from 1)."""
        return bool(self.sliding_window) and (
            not self.sliding_pattern or (i + 1) % self.sliding_pattern != 0)

    @nn.compact
    def __call__(self, ids: jax.Array, *, train: bool = False, segment_ids=None):
        del train, segment_ids  # no dropout; one segment
        self.setup_check()
        if self.pad_id != PAD:
            ids = jnp.where(ids == self.pad_id, PAD, ids)
        ids, valid, pooled = split_ids(ids)
        t = ids.shape[1]
        embed = nn.Embed(self.vocab_size, self.width, name="embed_tokens",
                         embedding_init=nn.initializers.normal(0.02))
        x = embed(ids)
        if self.embed_scale:
            x = x * jnp.asarray(self.width ** 0.5, x.dtype)
        positions = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0)
        chunk = self.attention_chunk or (AUTO_CHUNK if t > AUTO_CHUNK_ABOVE else 0)
        mask = local_mask = None  # chunked: each block builds its own from valid
        if not chunk:
            keys = valid[:, None, None, :]
            if self.attention == "causal":
                keys = keys & jnp.tril(jnp.ones((t, t), bool))[None, None]
            mask = jnp.broadcast_to(keys, (ids.shape[0], 1, t, t))
        # index distance = position distance: a row's tokens are contiguous
        if self.sliding_window and not chunk:
            near = jnp.abs(jnp.arange(t)[:, None] - jnp.arange(t)[None, :]) < self.sliding_window
            local_mask = mask & near[None, None]
        block = nn.remat(DecoderBlock) if self.remat else DecoderBlock
        scaling = (self.rope_scaling, float(self.rope_factor), int(self.rope_original_context))
        layers = []
        for i in range(self.depth):
            local = self.is_local(i)
            base = (self.rope_local_base or self.rope_base) if local else self.rope_base
            x = block(self.num_heads, self.num_kv_heads, self.mlp_dim, base, self.eps,
                      self.qkv_bias, self.lora, self.head_dim, self.norm_offset, self.post_norms,
                      self.qk_norm, self.mlp_act, self.sliding_window if local else 0,
                      self.attention == "causal", chunk,
                      ("none", 1.0, 0) if local else scaling, self.query_scalar,
                      name=f"layer_{i}")(
                x, positions, local_mask if local else mask, valid)
            layers.append(x)
        x = rms_norm(self.eps, self.norm_offset, "norm")(x)
        vec = pool(self.pooling, x, valid, pooled)
        emb = nn.Dense(self.embed_dim, name="embed")(vec) if self.embed_dim else vec
        return emb, {"tokens": x, "layers": tuple(layers), "mask": pooled, "pooled": vec,
                     "pre_head": vec}


@config
class DecoderLMConfig(EncoderConfig):
    """``encoder.name=decoder_lm``: a Llama-family decoder over token ids (sizes 0 = the
    variant's; when ``init_from`` names a GGUF file, ``smollm2`` or a Hugging Face folder, the
    weights' sizes, whatever the section says); its attention mask and pooling."""
    width: int = static(0, ">=0", "hidden width (0 = the variant's)")
    depth: int = static(0, ">=0", "blocks (0 = the variant's)")
    num_heads: int = static(0, ">=0", "query heads (0 = the variant's)")
    num_kv_heads: int = static(0, ">=0", "key/value heads (0 = the variant's)")
    mlp_dim: int = static(0, ">=0", "SwiGLU width (0 = the variant's)")
    rope_base: float = static(0.0, ">=0", "rotary base (0 = the variant's)")
    eps: float = static(0.0, ">=0", "RMSNorm epsilon (0 = the variant's)")
    qkv_bias: bool = static(False, doc="biases on the query/key/value projections (Qwen2)")
    attention: str = static("causal", ATTENTIONS, "causal (as pretrained) or bidirectional "
                                                  "(LLM2Vec)")
    pooling: str = static("last_token", POOLINGS, "token pooling")
    rope_scaling: str = static("none", ROPE_SCALINGS, "RoPE scaling of the global blocks to read "
                                                      "past the trained context")
    rope_factor: float = static(1.0, ">0", "RoPE scaling factor (new context / trained)")
    rope_original_context: int = static(0, ">=0", "yarn: the trained context")


SIZES = {"width": "width", "depth": "depth", "num_heads": "num_heads",
         "num_kv_heads": "num_kv_heads", "mlp_dim": "mlp_dim", "rope_base": "rope_base",
         "eps": "eps", "qkv_bias": "qkv_bias"}


def _weights(e: DecoderLMConfig):
    """The header of the decoder weights ``init_from`` names (directly, or through the run
    directories it names), or None."""
    if not e.init_from:
        return None
    from repr_jax.llm_files import decoder_source, read_header
    source = decoder_source(e.init_from)
    return None if source is None else read_header(source)


def _fields(e: DecoderLMConfig, *, vocab, **_) -> dict:
    from repr_jax.data.tokenizer import pad_id_of
    out = {"vocab_size": len(vocab), "attention": e.attention, "pooling": e.pooling,
           "pad_id": pad_id_of(vocab), "rope_scaling": e.rope_scaling,
           "rope_factor": e.rope_factor, "rope_original_context": e.rope_original_context,
           **sizes(e, SIZES)}
    header = _weights(e)
    if header is not None:  # a pretrained model's sizes are not choices: the weights decide
        out.update(header.module_fields())
    return out


def _check(e: DecoderLMConfig, input_shape, dataset_name: str) -> None:
    del input_shape, dataset_name
    if _weights(e) is not None:
        return
    sizes_ = {**VARIANTS[e.variant or "tiny"], **sizes(e, SIZES)}
    width, heads, kv = sizes_["width"], sizes_["num_heads"], sizes_["num_kv_heads"]
    head = sizes_.get("head_dim") or width // heads
    if (width % heads and not sizes_.get("head_dim")) or heads % kv or head % 2:
        raise ValueError(f"encoder.width={width}, num_heads={heads}, num_kv_heads={kv}: the "
                         f"width must split into heads of even size and the query heads into "
                         f"groups of key/value heads")


FAMILY = Family(DecoderLM, VARIANTS, DecoderLMConfig, _fields, reads="tokens", remat=True,
                check=_check, lora_layers=DENSE_LAYERS, lora_default=LORA_TARGETS,
                mixed_precision=True)
