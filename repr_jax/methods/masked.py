"""Masked-patch reconstruction (MAE's objective on any encoder).

The input (``[B, L]`` signals or ``[B, H, W, C]`` images) is cut into patches, a random
``mask_ratio`` of them is hidden per example, the encoder embeds the input with the hidden patches
zeroed (the SimMIM way: convolutional and MLP encoders cannot drop tokens), an MLP decoder predicts
every patch from the embedding, and ``mae_loss`` scores the hidden patches only (with per-patch
target normalisation). A ViT that drops the hidden tokens, as MAE proper does, plugs into the same
loss once token encoders exist.
"""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax import objectives as O
from repr_jax.config import ConfigError, MethodConfig, config, static
from repr_jax.encoders.pooling import layer_summaries
from repr_jax.methods.base import BuildContext, Method, MethodSpec, apply_train, normalized_std


def patchify(x: jax.Array, p: int) -> jax.Array:
    """``[B, L]`` → ``[B, L/p, p]``; ``[B, H, W, C]`` → ``[B, (H/p)(W/p), p*p*C]``."""
    if x.ndim == 2:
        if x.shape[1] % p:
            raise ValueError(f"mae: signal length {x.shape[1]} is not divisible by patch_size={p}")
        return x.reshape(x.shape[0], -1, p)
    b, h, w, c = x.shape
    if h % p or w % p:
        raise ValueError(f"mae: image {h}x{w} is not divisible by patch_size={p}")
    x = x.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // p) * (w // p), p * p * c)


def unpatchify(patches: jax.Array, shape: tuple[int, ...], p: int) -> jax.Array:
    """Inverse of :func:`patchify` for inputs of ``shape``."""
    if len(shape) == 2:
        return patches.reshape(shape)
    b, h, w, c = shape
    x = patches.reshape(b, h // p, w // p, p, p, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(shape)


def random_patch_mask(key: jax.Array, b: int, n: int, ratio: float) -> jax.Array:
    """``[B, N]`` with exactly ``round(ratio * N)`` ones (hidden patches) per row, chosen uniformly."""
    k = int(round(ratio * n))
    ranks = jnp.argsort(jnp.argsort(jax.random.uniform(key, (b, n)), axis=1), axis=1)
    return (ranks < k).astype(jnp.float32)


class MaskedAutoencoder(nn.Module):
    encoder: nn.Module
    num_patches: int
    patch_dim: int
    decoder_hidden: int = 256

    @nn.compact
    def __call__(self, batch_or_x, *, train: bool = False):
        x = batch_or_x["x"] if isinstance(batch_or_x, dict) else batch_or_x
        emb, features = self.encoder(x, train=train)
        h = nn.gelu(nn.Dense(self.decoder_hidden, name="decoder_hidden")(emb))
        pred = nn.Dense(self.num_patches * self.patch_dim, name="decoder_out")(h)
        return emb, features, pred.reshape(x.shape[0], self.num_patches, self.patch_dim)

    def embed(self, x):
        return self.encoder(x, train=False)[0]

    def embed_layers(self, x):
        return layer_summaries(*self.encoder(x, train=False))


def mae(encoder, views_fn: Callable, *, input_shape: tuple[int, ...], patch_size: int,
        mask_ratio: float, decoder_hidden: int = 256, norm_pix: bool = True) -> Method:
    """Masked-patch reconstruction with ``mae_loss`` on the hidden patches."""
    probe = patchify(jnp.zeros((1,) + tuple(input_shape)), patch_size)
    _, n, pdim = probe.shape
    model = MaskedAutoencoder(encoder, n, pdim, decoder_hidden)

    def loss(params, model_state, extra, batch, key, hp):
        k_view, k_mask = jax.random.split(key)
        x = views_fn(k_view, batch["x"])
        patches = patchify(x, patch_size)
        mask = random_patch_mask(k_mask, x.shape[0], n, mask_ratio)
        visible = unpatchify(patches * (1.0 - mask)[..., None], x.shape, patch_size)
        (emb, _, pred), model_state = apply_train(model, params, model_state, visible)
        value = O.mae_loss(pred, patches, mask, norm_pix=norm_pix)
        return hp.loss_weight * value, (model_state, extra, {"emb_std": normalized_std(emb)})

    return Method("mae", model, loss)


class MaskedLanguageModel(nn.Module):
    """A token encoder with BERT's MLM head (``Dense → GELU → LayerNorm → Dense(vocab)``)."""
    encoder: nn.Module
    vocab_size: int

    @nn.compact
    def __call__(self, batch_or_ids, *, train: bool = False):
        ids = batch_or_ids["x"] if isinstance(batch_or_ids, dict) else batch_or_ids
        emb, features = self.encoder(ids, train=train)
        h = features["tokens"]
        h = nn.LayerNorm(1e-12, name="mlm_ln")(
            nn.gelu(nn.Dense(h.shape[-1], name="mlm_transform")(h), approximate=False))
        return emb, features, nn.Dense(self.vocab_size, name="mlm_decoder")(h)

    def embed(self, ids):
        return self.encoder(ids, train=False)[0]

    def embed_layers(self, ids):
        return layer_summaries(*self.encoder(ids, train=False))


def corrupt_tokens(key: jax.Array, ids: jax.Array, *, mask_ratio: float, mask_id: int,
                   num_special: int, vocab_size: int) -> tuple[jax.Array, jax.Array]:
    """BERT's corruption: select ``mask_ratio`` of the non-special tokens; of those, 80% become
    ``[MASK]``, 10% a random word, 10% stay. Returns ``(corrupted_ids, selected [B, T] float)``."""
    k_sel, k_kind, k_rand = jax.random.split(key, 3)
    maskable = ids >= num_special  # never [PAD], [CLS], [SEP], ...
    selected = maskable & (jax.random.uniform(k_sel, ids.shape) < mask_ratio)
    kind = jax.random.uniform(k_kind, ids.shape)
    random_words = jax.random.randint(k_rand, ids.shape, num_special, vocab_size)
    corrupted = jnp.where(selected & (kind < 0.8), mask_id, ids)
    corrupted = jnp.where(selected & (kind >= 0.8) & (kind < 0.9), random_words, corrupted)
    return corrupted, selected.astype(jnp.float32)


def mlm(encoder, views_fn: Callable, *, vocab: tuple[str, ...], mask_ratio: float = 0.15
        ) -> Method:
    """Masked language modelling (Devlin et al. 2019) with ``mlm_loss`` on the selected tokens.

    ``vocab`` must hold ``[MASK]``; ids below the first ordinary word are special and never masked.
    """
    if "[MASK]" not in vocab:
        raise ValueError("mlm needs a vocabulary with a [MASK] token")
    num_special = next(i for i, tok in enumerate(vocab) if not tok.startswith("["))
    model = MaskedLanguageModel(encoder, len(vocab))

    def loss(params, model_state, extra, batch, key, hp):
        ids = views_fn(key, batch["x"])
        corrupted, selected = corrupt_tokens(key, ids, mask_ratio=mask_ratio,
                                             mask_id=vocab.index("[MASK]"),
                                             num_special=num_special, vocab_size=len(vocab))
        (emb, _, logits), model_state = apply_train(model, params, model_state, corrupted)
        value = O.mlm_loss(logits, ids, selected)
        acc = jnp.sum((jnp.argmax(logits, -1) == ids) * selected) / jnp.maximum(selected.sum(), 1)
        return hp.loss_weight * value, (model_state, extra, {"emb_std": normalized_std(emb),
                                                            "mlm_accuracy": acc})

    return Method("mlm", model, loss)


# --------------------------------------------------------------------------------------------------
# Config sections and registry entries
# --------------------------------------------------------------------------------------------------

@config
class MAEConfig(MethodConfig):
    patch_size: int = static(4, ">0", "patch length (1-D) or side (2-D)")
    mask_ratio: float = static(0.75, "[0,1)", "fraction of patches hidden")


@config
class MLMConfig(MethodConfig):
    mask_ratio: float = static(0.75, "[0,1)", "fraction of tokens selected for prediction")


def _build_mlm(section: MLMConfig, ctx: BuildContext) -> Method:
    if ctx.dataset.vocab is None:
        raise ConfigError(f"method 'mlm' needs a text dataset with a vocabulary, not "
                          f"{ctx.dataset.name!r} (try data.name=latent_topics)")
    return mlm(ctx.encoder(), ctx.views_fn, vocab=ctx.dataset.vocab, mask_ratio=section.mask_ratio)


MAE = MethodSpec(MAEConfig, lambda m, ctx: mae(
    ctx.encoder(), ctx.views_fn, input_shape=ctx.dataset.input_shape, patch_size=m.patch_size,
    mask_ratio=m.mask_ratio))
MLM = MethodSpec(MLMConfig, _build_mlm)
