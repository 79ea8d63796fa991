"""Turns a config into the pieces of a run: dataset, method, optimizer. The only place that reads
whole config sections and hands explicit arguments to the rooms below."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from repr_jax import data, encoders
from repr_jax.config import Config, OptimConfig
from repr_jax.methods import METHODS, Method


def load_dataset(cfg: Config) -> data.Dataset:
    d = cfg.data
    kwargs = {}
    if d.num_examples:
        kwargs["num_examples"] = d.num_examples
    if d.num_classes:
        if d.name != "latent_classes":
            raise ValueError("data.num_classes is only for generated latent_classes data")
        kwargs["num_classes"] = d.num_classes
    if kwargs and d.name not in ("mnist1d", "latent_classes"):
        raise ValueError(f"data.num_examples only applies to generated datasets "
                         f"(mnist1d, latent_classes), not {d.name!r}")
    return data.load(d.name, data_dir=d.data_dir, **kwargs)


def build_method(cfg: Config, *, num_classes: int) -> Method:
    e, m = cfg.encoder, cfg.method
    family_kwargs = {"kernel_size": e.kernel_size} if e.name == "cnn" else {}
    encoder = encoders.build(e.name, widths=e.widths, embed_dim=e.embed_dim, norm=e.norm,
                             **family_kwargs)
    views_fn = data.make_views_fn(**dataclasses.asdict(cfg.data.views))
    if m.name == "simclr":
        return METHODS["simclr"](encoder, views_fn, proj_hidden=m.proj_hidden,
                                 proj_dim=m.proj_dim)
    if m.name == "supervised":
        return METHODS["supervised"](encoder, views_fn, num_classes=num_classes)
    raise ValueError(f"unknown method {m.name!r}; choose from: {', '.join(METHODS)}")


def warmup_cosine(step, *, peak, warmup_steps, total_steps: int, min_lr_ratio=0.0):
    """Linear warmup from 0 to ``peak`` over ``warmup_steps``, then cosine decay to
    ``peak * min_lr_ratio`` at ``total_steps``.

    Same values as ``optax.warmup_cosine_decay_schedule(0, peak, warmup_steps, total_steps,
    peak * min_lr_ratio)``, but written with array ops only, so ``warmup_steps`` (like every other
    number here) may be a traced pytree leaf of a vmapped population.
    """
    step = jnp.asarray(step, jnp.float32)
    warm = peak * step / jnp.maximum(warmup_steps, 1.0)
    progress = jnp.clip((step - warmup_steps) / jnp.maximum(total_steps - warmup_steps, 1.0), 0, 1)
    cosine = peak * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + jnp.cos(jnp.pi * progress)))
    return jnp.where(step < warmup_steps, warm, cosine)


def make_optimizer(hp: OptimConfig, *, total_steps: int) -> optax.GradientTransformation:
    """AdamW (decay skipped on biases and norm scales) with warmup + cosine, optional clipping.

    ``hp``'s numeric fields may be traced: the optimizer is rebuilt inside the step from them, and its
    state's structure does not depend on their values.
    """
    schedule = lambda count: warmup_cosine(  # noqa: E731
        count, peak=hp.lr, warmup_steps=hp.warmup_steps, total_steps=total_steps,
        min_lr_ratio=hp.min_lr_ratio)
    adamw = optax.adamw(schedule, b1=hp.b1, b2=hp.b2, weight_decay=hp.weight_decay,
                        mask=lambda params: jax.tree.map(lambda p: p.ndim > 1, params))
    if hp.clip_norm:
        return optax.chain(optax.clip_by_global_norm(hp.clip_norm), adamw)
    return adamw

