"""LLM2Vec's masked next-token prediction (BehnamGhader et al. 2024): a decoder LLM taught to read
with bidirectional attention before it is trained as an embedder.

Per text, ``round(mask_ratio * n)`` of its ``n`` maskable tokens are chosen uniformly (a text token
that a text or instruction token precedes in its row: never the first token, padding, an
instruction token or a control token such as ``<bos>``); the chosen ones become ``mask_token``
(LLM2Vec's "blank" ``_`` for decoders without a mask token) — all of them
(``corruption=all_mask``, LLM2Vec's Mistral recipe) or BERT's 80% mask / 10% random token / 10%
kept (``corruption=bert``, transformers' ``DataCollatorForLanguageModeling``, LLM2Vec's default);
the decoder reads the corrupted text (with ``encoder.attention=bidirectional``, as LLM2Vec); and
each chosen token ``i`` is predicted from position ``i - 1``'s final state through the LM head, the
tied input embedding, as LLM2Vec's ``run_mntp.py`` shifts (``preds[:, :-1]`` against
``labels[:, 1:]``). The loss is the cross-entropy averaged over chosen tokens. LLM2Vec draws each
token independently with probability ``mask_ratio``; an exact count per text gives the same mean
and lets the logits be computed at ``K = ceil(mask_ratio * T)`` positions per text instead of
``T``.

Data: text (``x``), and with pairs (``beir:DIR``, ``pairs:FILE``) the documents (``x_pos``) too,
each a forward pass. With ``optim.lora_rank`` the adapters train and the embedding (the head)
stays frozen; a later run with ``encoder.init_from=<this run>`` starts from the adapters folded
into the weights (LLM2Vec merges them before its contrastive stage).

Cost per text of T tokens: the decoder's forward and backward, plus ``O(K D V)`` for the logits
of its K chosen positions (V the vocabulary, D the width); memory ``O(B K V)`` for those logits.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import ConfigError, MethodConfig, config, static
from repr_jax.encoders.decoder_lm import PAD, DecoderLM, next_token_logits
from repr_jax.encoders.pooling import layer_summaries
from repr_jax.methods.base import BuildContext, Method, MethodSpec, apply_train, normalized_std

CORRUPTIONS = ("all_mask", "bert")
TEXT_KEYS = ("x", "x_pos")
# control tokens never chosen: <bos>, <|im_start|>, <start_of_turn>, [CLS], ...
_CONTROL = re.compile(r"<\|?[A-Za-z0-9_]+\|?>|\[[A-Z]+\]")


def control_tokens(vocab: Sequence[str]) -> np.ndarray:
    """``[V]`` bool: the vocabulary's control tokens (``<...>``, ``<|...|>``, ``[...]`` names),
    which are never chosen."""
    return np.array([bool(_CONTROL.fullmatch(t)) for t in vocab], bool)


def maskable_tokens(ids_BxT: jax.Array, control_V: jax.Array, pad_id: int = PAD) -> jax.Array:
    """``[B, T]`` bool: text tokens (id >= 0: not padding ``-1`` nor an instruction token
    ``-2 - id``, nor ``pad_id``) that are not control tokens and that a text or instruction token
    precedes in the row (a prediction needs the state before it)."""
    present = (ids_BxT != PAD) & (ids_BxT != pad_id)
    text = present & (ids_BxT >= 0) & ~control_V[jnp.maximum(ids_BxT, 0)]
    before = jnp.pad(present[:, :-1], ((0, 0), (1, 0)))
    return text & before


def choose_positions(key: jax.Array, maskable_BxT: jax.Array, ratio: float
                     ) -> tuple[jax.Array, jax.Array]:
    """``(positions [B, K] int32, chosen [B, K] float)`` with ``K = ceil(ratio * T)``: per row,
    ``round(ratio * n)`` of its ``n`` maskable positions drawn uniformly without replacement
    (``chosen`` 1), the rest of the ``K`` slots pointing at unchosen positions (``chosen`` 0).
    Time ``O(B T log T)``."""
    b, t = maskable_BxT.shape
    k = max(1, min(t, math.ceil(ratio * t)))
    score = jnp.where(maskable_BxT, jax.random.uniform(key, (b, t)), 2.0)
    positions = jnp.argsort(score, axis=1)[:, :k].astype(jnp.int32)
    count = jnp.floor(ratio * maskable_BxT.sum(axis=1) + 0.5)
    chosen = (jnp.arange(k)[None, :] < count[:, None]).astype(jnp.float32)
    return positions, chosen


def corrupt(key: jax.Array, ids_BxT: jax.Array, positions_BxK: jax.Array, chosen_BxK: jax.Array,
            *, mask_id: int, vocab_size: int, corruption: str) -> jax.Array:
    """``ids`` with the chosen positions replaced: all by ``mask_id`` (``all_mask``), or 80% by
    ``mask_id``, 10% by a uniform random token, 10% kept (``bert``)."""
    k_kind, k_rand = jax.random.split(key)
    kind = jax.random.uniform(k_kind, positions_BxK.shape)
    new = jnp.full(positions_BxK.shape, mask_id, ids_BxT.dtype)
    if corruption == "bert":
        original = jnp.take_along_axis(ids_BxT, positions_BxK, axis=1)
        random = jax.random.randint(k_rand, positions_BxK.shape, 0, vocab_size, ids_BxT.dtype)
        new = jnp.where(kind < 0.8, new, jnp.where(kind < 0.9, random, original))
    rows = jnp.arange(ids_BxT.shape[0])[:, None]
    current = ids_BxT[rows, positions_BxK]
    return ids_BxT.at[rows, positions_BxK].set(jnp.where(chosen_BxK > 0, new, current))


def masked_next_token_loss(params, tokens_BxTxD: jax.Array, ids_BxT: jax.Array,
                           positions_BxK: jax.Array, chosen_BxK: jax.Array
                           ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(summed cross-entropy, correct argmax count, chosen count)`` of predicting the original
    token at each chosen position ``i`` from the final state at ``i - 1`` through the tied head
    (``params``: the DecoderLM's tree). Time ``O(B K D V)``, memory ``O(B K V)``."""
    rows = jnp.arange(ids_BxT.shape[0])[:, None]
    before = tokens_BxTxD[rows, jnp.maximum(positions_BxK - 1, 0)]
    target = ids_BxT[rows, positions_BxK]
    logits = next_token_logits(params, before)
    picked = jnp.take_along_axis(logits, target[..., None], axis=-1)[..., 0]
    ce = jax.nn.logsumexp(logits, axis=-1) - picked
    right = (jnp.argmax(logits, axis=-1) == target).astype(jnp.float32)
    return jnp.sum(ce * chosen_BxK), jnp.sum(right * chosen_BxK), jnp.sum(chosen_BxK)


class MaskedNextToken(nn.Module):
    """A decoder whose final states feed its own LM head (the loss reads ``features["tokens"]``);
    embeds as the decoder does."""
    encoder: nn.Module

    def __call__(self, batch_or_ids, *, train: bool = False):
        ids = batch_or_ids["x"] if isinstance(batch_or_ids, dict) else batch_or_ids
        return self.encoder(ids, train=train)

    def embed(self, ids):
        return self.encoder(ids, train=False)[0]

    def embed_layers(self, ids):
        return layer_summaries(*self.encoder(ids, train=False))


def mntp(encoder: DecoderLM, views_fn: Callable, *, vocab: Sequence[str], mask_ratio: float = 0.2,
         mask_token: str = "_", corruption: str = "bert") -> Method:
    """Masked next-token prediction over the batch's texts (``x``, and ``x_pos`` when present)."""
    if corruption not in CORRUPTIONS:
        raise ValueError(f"mntp: corruption={corruption!r}; choose from {', '.join(CORRUPTIONS)}")
    if mask_token not in vocab:
        near = [t for t in ("_", "<mask>", "[MASK]", "▁") if t in vocab]
        raise ConfigError(f"method.mask_token={mask_token!r} is not a token of this vocabulary "
                          f"({len(vocab)} tokens); tokens there that serve: "
                          f"{', '.join(map(repr, near)) or 'none of _, <mask>, [MASK]'}")
    mask_id, control = list(vocab).index(mask_token), jnp.asarray(control_tokens(vocab))
    model = MaskedNextToken(encoder)

    def loss(params, model_state, extra, batch, key, hp):
        total = right = count = 0.0
        metrics = {}
        for i, name in enumerate(k for k in TEXT_KEYS if k in batch):
            k_view, k_choose, k_corrupt = jax.random.split(jax.random.fold_in(key, i), 3)
            ids = views_fn(k_view, batch[name])
            positions, chosen = choose_positions(
                k_choose, maskable_tokens(ids, control, encoder.pad_id), mask_ratio)
            corrupted = corrupt(k_corrupt, ids, positions, chosen, mask_id=mask_id,
                                vocab_size=len(vocab), corruption=corruption)
            (emb, features), model_state = apply_train(model, params, model_state, corrupted)
            ce, ok, n = masked_next_token_loss(params["encoder"], features["tokens"], ids,
                                               positions, chosen)
            total, right, count = total + ce, right + ok, count + n
            if name == "x":
                metrics["emb_std"] = normalized_std(emb)
        value = total / jnp.maximum(count, 1.0)
        metrics.update(mntp_accuracy=right / jnp.maximum(count, 1.0), masked_tokens=count)
        return hp.loss_weight * value, (model_state, extra, metrics)

    return Method("mntp", model, loss)


# --------------------------------------------------------------------------------------------------
# Config section and registry entry
# --------------------------------------------------------------------------------------------------

@config
class MNTPConfig(MethodConfig):
    mask_ratio: float = static(0.2, "(0,1]", "fraction of each text's tokens predicted "
                                             "(LLM2Vec: 0.2; 0.8 with all_mask for Mistral)")
    mask_token: str = static("_", doc="the token that hides a chosen one (LLM2Vec's blank '_'; "
                                      "'<mask>' for Gemma 3)")
    corruption: str = static("bert", CORRUPTIONS, "bert: 80% mask, 10% random, 10% kept; "
                                                  "all_mask: every chosen token masked")


def _build(section: MNTPConfig, ctx: BuildContext) -> Method:
    encoder = ctx.encoder()
    if not isinstance(encoder, DecoderLM) or ctx.dataset.vocab is None:
        raise ConfigError(f"method 'mntp' predicts tokens through a decoder's LM head: it needs "
                          f"encoder.name=decoder_lm and text data, not "
                          f"{type(encoder).__name__} on {ctx.dataset.name!r}")
    if ctx.init_from:
        from repr_jax.encoders.decoder_lm_weights import output_head
        from repr_jax.llm_files import decoder_source
        source = decoder_source(ctx.init_from)
        if source is not None and output_head(source) is not None:
            raise ConfigError(f"method 'mntp': {source} has an output head of its own (not tied "
                              f"to the input embedding), which the run's parameters do not "
                              f"hold; mntp reads tied heads (SmolLM2, Gemma 3, Qwen2 0.5B)")
    return mntp(encoder, ctx.views_fn, vocab=tuple(ctx.dataset.vocab),
                mask_ratio=section.mask_ratio, mask_token=section.mask_token,
                corruption=section.corruption)


MNTP = MethodSpec(MNTPConfig, _build)
