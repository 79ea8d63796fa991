"""The optimizer and its schedule, built once per run.

AdamW (no decay on biases and norm scales) with linear warmup and cosine decay, optionally after
global-norm clipping. The optimizer is constructed once from the structural fields (``b1``, ``b2``,
``clip_norm``); the numbers a population may vary (``lr``, ``weight_decay``, ``warmup_steps``,
``warmup_fraction``, ``min_lr_ratio``) reach it as arguments of each update, so they stay traceable and vmappable:

    tx = make_optimizer(b1=0.9, b2=0.999)
    lr = learning_rate(step, hp, total_steps=1000)
    updates, opt_state = tx.update(grads, opt_state, params, learning_rate=lr,
                                   weight_decay=hp.weight_decay)

``learning_rate`` may also be a tree shaped like the parameters (:func:`lr_scales` times the
rate): frozen parameters (scale 0), layer-wise decay and a separate rate for heads.

Its state has the structure of ``optax.adamw``'s (checkpoints of either restore into the other) and
its updates are the same numbers (tested).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import optax


def warmup_cosine(step, *, peak, warmup_steps, total_steps: int, min_lr_ratio=0.0):
    """Linear warmup from 0 to ``peak`` over ``warmup_steps``, then cosine decay to
    ``peak * min_lr_ratio`` at ``total_steps``.

    Same values as ``optax.warmup_cosine_decay_schedule(0, peak, warmup_steps, total_steps,
    peak * min_lr_ratio)``, but written with array ops only, so ``warmup_steps`` (like every other
    number here) may be a traced leaf of a vmapped population.
    """
    step = jnp.asarray(step, jnp.float32)
    warm = peak * step / jnp.maximum(warmup_steps, 1.0)
    progress = jnp.clip((step - warmup_steps) / jnp.maximum(total_steps - warmup_steps, 1.0), 0, 1)
    cosine = peak * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + jnp.cos(jnp.pi * progress)))
    return jnp.where(step < warmup_steps, warm, cosine)


def learning_rate(step, hp: Any, *, total_steps: int) -> jax.Array:
    """The learning rate of update ``step`` for an ``OptimConfig``-like ``hp`` (leaves may be
    traced): the warmup is ``warmup_fraction`` of ``total_steps`` when that is > 0, else
    ``warmup_steps``."""
    fraction = getattr(hp, "warmup_fraction", 0.0)
    warmup = jnp.where(fraction > 0, fraction * total_steps, hp.warmup_steps)
    return warmup_cosine(step, peak=hp.lr, warmup_steps=warmup, total_steps=total_steps,
                         min_lr_ratio=hp.min_lr_ratio)


def _decay_weights_by_argument() -> optax.GradientTransformationExtraArgs:
    """``updates + weight_decay * params``, ``weight_decay`` given to each update."""
    def update(updates, state, params=None, *, weight_decay, **extra):
        del extra
        return jax.tree.map(lambda g, p: g + weight_decay * p, updates, params), state
    return optax.GradientTransformationExtraArgs(lambda params: optax.EmptyState(), update)


def _scale_by_learning_rate_argument() -> optax.GradientTransformationExtraArgs:
    """``-learning_rate * updates``, ``learning_rate`` given to each update; counts updates as
    ``optax.scale_by_schedule`` does (same state)."""
    def init(params):
        del params
        return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

    def update(updates, state, params=None, *, learning_rate, **extra):
        del params, extra
        if jax.tree.structure(learning_rate) == jax.tree.structure(updates):  # one per parameter
            updates = jax.tree.map(lambda g, lr: jnp.array(-lr, dtype=g.dtype) * g, updates,
                                   learning_rate)
        else:
            updates = jax.tree.map(lambda g: jnp.array(-learning_rate, dtype=g.dtype) * g, updates)
        return updates, optax.ScaleByScheduleState(count=optax.safe_increment(state.count))
    return optax.GradientTransformationExtraArgs(init, update)


def _decayed(params) -> Any:
    """Weight decay applies to matrices and kernels, not to biases and norm scales."""
    return jax.tree.map(lambda p: p.ndim > 1, params)


@functools.lru_cache(maxsize=None)
def make_optimizer(*, b1: float = 0.9, b2: float = 0.999, clip_norm: float = 0.0
                   ) -> optax.GradientTransformationExtraArgs:
    """AdamW whose ``update`` takes ``learning_rate=`` and ``weight_decay=`` (see the module
    docstring); ``clip_norm > 0`` clips the global gradient norm first. One object per setting:
    a run's initial state and its step share it."""
    adamw = optax.chain(optax.scale_by_adam(b1=b1, b2=b2),
                        optax.masked(_decay_weights_by_argument(), _decayed),
                        _scale_by_learning_rate_argument())
    return optax.chain(optax.clip_by_global_norm(clip_norm), adamw) if clip_norm else adamw


def optimizer_for(optim_cfg: Any) -> optax.GradientTransformationExtraArgs:
    """:func:`make_optimizer` from an ``OptimConfig``'s structural fields."""
    return make_optimizer(b1=optim_cfg.b1, b2=optim_cfg.b2, clip_norm=optim_cfg.clip_norm)


_LAYER = re.compile(r"^(?:layer|block|layers|blocks)_?(\d+)(?:_|$)")
_EMBEDDING_SIDE = re.compile(r"embedding|^stem$|^cls$|^pos")


def _path(keys) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in keys)


def _matches(path: str, pattern: str) -> bool:
    """``pattern`` matches the path or any of its tails that start at a segment."""
    parts = path.split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[i:]), pattern) for i in range(len(parts)))


def lr_scales(params: Any, *, freeze=(), layer_decay=1.0, head_lr_mult=1.0) -> Any:
    """A learning-rate multiplier per parameter (a tree like ``params``): 0 for those matching a
    ``freeze`` pattern; ``head_lr_mult`` outside the encoder (no ``encoder`` path segment); inside
    it, ``layer_decay ** (L + 1 - depth)`` where ``depth`` is 0 for the embedding side (names with
    "embedding", ``stem``, ``cls``, ``pos*``), i + 1 for layer/block i, and L + 1 for the rest
    (final norms, pooling, output embedding) — BEiT's layer-wise decay. ``layer_decay`` and
    ``head_lr_mult`` may be traced (population leaves); a pattern that matches nothing is a
    ConfigError."""
    from repr_jax.config import ConfigError
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    paths = [_path(keys) for keys, _ in leaves]
    unused = [p for p in freeze if not any(_matches(path, p) for path in paths)]
    if unused:
        sample = ", ".join(paths[:6])
        raise ConfigError(f"optim.freeze patterns {unused} match no parameter (paths look like: "
                          f"{sample}, ...)")

    def depth(path: str) -> tuple[bool, int | None]:
        parts = path.split("/")
        if "encoder" not in parts:
            return False, None
        inner = parts[parts.index("encoder") + 1:]
        layer = next((int(m.group(1)) for part in inner if (m := _LAYER.match(part))), None)
        if layer is not None:
            return True, layer + 1
        return True, 0 if inner and _EMBEDDING_SIDE.search(inner[0]) else -1  # -1: the top

    depths = [depth(p) for p in paths]
    top = 1 + max([d for enc, d in depths if enc and d is not None and d > 0], default=0)
    scales = []
    for path, (in_encoder, d) in zip(paths, depths):
        if any(_matches(path, p) for p in freeze):
            scales.append(jnp.zeros([], jnp.float32))
        elif not in_encoder:
            scales.append(jnp.asarray(head_lr_mult, jnp.float32))
        else:
            d = top if d == -1 else d
            scales.append(jnp.asarray(layer_decay, jnp.float32) ** (top - d))
    return jax.tree_util.tree_unflatten(treedef, scales)


# ----------------------------------------------------------------------------- trainable subsets
def trainable_filter(optim_cfg: Any):
    """``keep(path) -> bool`` of the parameters that train when only some do (LoRA: the adapters
    and everything outside the encoder); None when all train. Frozen parameters get neither
    gradients nor optimizer state (:func:`split_trainable`)."""
    if not getattr(optim_cfg, "lora_rank", 0):
        return None
    from repr_jax.encoders.lora import is_adapter
    return lambda path: is_adapter(path) or "encoder" not in path.split("/")


def split_trainable(params: Any, keep) -> tuple[Any, Any]:
    """``(trainable, frozen)``: two trees shaped like ``params``, each with ``None`` where the
    other has the leaf (a ``None`` is an empty subtree: optax and ``jax.tree.map`` skip it)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    kept = [keep(_path(k)) for k, _ in leaves]
    return (treedef.unflatten([x if k else None for (_, x), k in zip(leaves, kept)]),
            treedef.unflatten([None if k else x for (_, x), k in zip(leaves, kept)]))


def join_trainable(trainable: Any, frozen: Any) -> Any:
    """The inverse of :func:`split_trainable`."""
    def is_leaf(x):
        return x is None
    a, treedef = jax.tree_util.tree_flatten(trainable, is_leaf=is_leaf)
    b = jax.tree_util.tree_leaves(frozen, is_leaf=is_leaf)
    return treedef.unflatten([x if x is not None else y for x, y in zip(a, b)])
