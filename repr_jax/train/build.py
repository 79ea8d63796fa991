"""Turns a config into the pieces of a run: dataset, method, optimizer. The only place that reads
whole config sections and hands explicit arguments to the rooms below."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from repr_jax import data, encoders
from repr_jax.config import Config, ConfigError, OptimConfig
from repr_jax.methods import DUAL_ENCODER_METHODS, GRAD_CACHE_METHODS, METHODS, Method


def load_dataset(cfg: Config) -> data.Dataset:
    d = cfg.data
    sizes = {k: v for k, v in (("num_examples", d.num_examples), ("num_classes", d.num_classes),
                               ("pairs", d.pairs)) if v}
    dataset = data.load(d.name, data_dir=d.data_dir, tokenizer=d.tokenizer, max_len=d.max_len,
                        **sizes)
    return subset_train(dataset, d.train_examples) if d.train_examples else dataset


def subset_train(dataset: data.Dataset, n: int) -> data.Dataset:
    """``dataset`` training on the first ``n`` of one fixed permutation of its train split, so the
    subsets of a data-size sweep are nested; validation and test stay whole."""
    train = dataset.splits["train"]
    available = len(train["label"])
    if n > available:
        raise ConfigError(f"data.train_examples={n} but {dataset.name!r} has {available} training "
                          f"examples (raise data.num_examples for generated data)")
    keep = np.sort(np.random.default_rng(0).permutation(available)[:n])
    return dataclasses.replace(dataset, splits={**dataset.splits,
                                                "train": {k: v[keep] for k, v in train.items()}})


def load_eval_sets(cfg: Config, dataset: data.Dataset) -> list:
    """The configured ``eval.sets``, prepared for this run's inputs: text sets tokenised like the
    run's text, latent sets drawn through the run's latent-class map."""
    from repr_jax.data import eval_sets
    d, out = cfg.data, []
    for name in cfg.eval.sets:
        if name in eval_sets.TEXT_SETS:
            if dataset.vocab is None or d.name == "latent_topics":
                raise ConfigError(f"eval.sets: {name!r} is text; dataset {d.name!r} is not text "
                                  f"read by a tokenizer")
            out.append(eval_sets.load_eval_set(name, tokenizer=d.tokenizer,
                                               max_len=d.max_len or 64, data_dir=d.data_dir))
        else:
            if d.name not in ("latent_classes", "latent_modalities"):
                raise ConfigError(f"eval.sets: {name!r} is drawn in latent_classes' input space; "
                                  f"dataset {d.name!r} is not latent_classes/latent_modalities")
            out.append(eval_sets.load_eval_set(name, **({"num_classes": d.num_classes}
                                                        if d.num_classes else {})))
    return out


# Which EncoderConfig size fields each family takes, and under which module field name.
_SIZE_FIELDS = {
    "vit": {"width": "width", "depth": "depth", "num_heads": "num_heads", "mlp_dim": "mlp_dim",
            "patch_size": "patch_size"},
    "mixer": {"width": "width", "depth": "depth", "patch_size": "patch_size"},
    "text_transformer": {"width": "width", "depth": "depth", "num_heads": "num_heads",
                         "mlp_dim": "mlp_dim"},
    "lstm": {"width": "hidden", "depth": "depth"},
}


def _build_encoder(cfg: Config, dataset: data.Dataset, *, population: bool = False):
    """The configured encoder; token encoders take their vocabulary from the dataset.
    ``population``: it will be vmapped over per-member weights (``encoder.conv=auto`` then
    computes convolutions as patch matmuls; a population whose members run one after another is
    not vmapped)."""
    e = cfg.encoder
    is_text = e.name in encoders.TOKEN_FAMILIES
    if is_text != (dataset.vocab is not None):
        raise ValueError(
            f"encoder {e.name!r} reads token ids, but dataset {dataset.name!r} has no vocabulary "
            f"(use a text dataset such as latent_topics)" if is_text else
            f"dataset {dataset.name!r} holds token ids; use a token encoder "
            f"({', '.join(encoders.TOKEN_FAMILIES)})")
    if e.name in encoders.IMAGE_FAMILIES and len(dataset.input_shape) != 3:
        raise ValueError(f"encoder {e.name!r} reads images [H, W, C], but {dataset.name!r} has "
                         f"inputs of shape {dataset.input_shape} (try data.name=digits)")
    kwargs = {"embed_dim": e.embed_dim}
    if e.remat:
        kwargs["remat"] = True
    kwargs.update({module_field: getattr(e, field)
                   for field, module_field in _SIZE_FIELDS.get(e.name, {}).items()
                   if getattr(e, field)})
    if is_text:
        t = dataset.input_shape[0]
        kwargs.update(vocab_size=len(dataset.vocab), pooling=e.pooling,
                      max_len=max(t + -(-t // e.landmark_chunk), 8))
        if e.name == "text_transformer":
            kwargs.update(landmark_chunk=e.landmark_chunk,
                          landmark_id=dataset.vocab.index("[SEP]"))
    if e.name in ("mlp", "cnn"):
        kwargs["norm"] = e.norm
        if not e.variant:
            kwargs["widths"] = e.widths
        if e.name == "cnn":
            kwargs["kernel_size"] = e.kernel_size
            kwargs["im2col"] = e.conv == "im2col" or (e.conv == "auto" and population)
    default_variant = None if e.name in ("mlp", "cnn") else "tiny"
    return encoders.build(e.name, e.variant or default_variant, **kwargs)


def build_method(cfg: Config, dataset: data.Dataset, *, population: bool = False) -> Method:
    """The method ``cfg.method.name`` with its encoder(s), heads and views (``population``: see
    :func:`_build_encoder`)."""
    m = cfg.method
    build_encoder = functools.partial(_build_encoder, population=population)
    views_fn = data.make_views_fn(**dataclasses.asdict(cfg.data.views))
    heads = dict(proj_hidden=m.proj_hidden, proj_dim=m.proj_dim)
    options = dict(matryoshka_dims=m.matryoshka_dims, matryoshka_layers=m.matryoshka_layers)
    if cfg.train.grad_cache_chunk:
        if m.name not in GRAD_CACHE_METHODS:
            raise ValueError(f"train.grad_cache_chunk: method {m.name!r} has no in-batch-negative "
                             f"objective to cache; use one of {', '.join(GRAD_CACHE_METHODS)}")
        options["grad_cache_chunk"] = cfg.train.grad_cache_chunk
    build = METHODS[m.name]
    if m.name in ("simclr", "supcon", "vicreg", "barlow_twins"):
        return build(build_encoder(cfg, dataset), views_fn, **heads, **options)
    if m.name in ("simsiam", "byol"):
        return build(build_encoder(cfg, dataset), views_fn, **heads, pred_hidden=m.pred_hidden)
    if m.name == "moco":
        return build(build_encoder(cfg, dataset), views_fn, **heads, queue_size=m.queue_size)
    if m.name in DUAL_ENCODER_METHODS:
        if "x_pos" not in dataset.splits["train"]:
            raise ValueError(f"method {m.name!r} needs paired data with an 'x_pos' feature (e.g. "
                             f"data.name=latent_modalities or latent_classes); {dataset.name!r} "
                             f"has {sorted(dataset.splits['train'])}")
        extra = {"objective": m.objective} if m.name == "biencoder" else {}
        return build(build_encoder(cfg, dataset), build_encoder(cfg, dataset), views_fn,
                     proj_dim=m.proj_dim, **extra, **options)
    if m.name == "mae":
        return build(build_encoder(cfg, dataset), views_fn, input_shape=dataset.input_shape,
                     patch_size=m.patch_size, mask_ratio=m.mask_ratio)
    if m.name == "mlm":
        if dataset.vocab is None:
            raise ValueError(f"method 'mlm' needs a text dataset with a vocabulary, not "
                             f"{dataset.name!r} (try data.name=latent_topics)")
        return build(build_encoder(cfg, dataset), views_fn, vocab=dataset.vocab,
                     mask_ratio=m.mask_ratio)
    old = _old_classifier(m.compat_run) if m.compat_run else None
    return build(build_encoder(cfg, dataset), views_fn, num_classes=dataset.num_classes,
                 old_classifier=old)  # supervised


def _old_classifier(run_dir: str) -> dict:
    """The classifier of the supervised run in ``run_dir`` (its latest checkpoint), for BCT."""
    from repr_jax.methods.supervised import classifier_params
    from repr_jax.train.loop import load_trained  # loop imports this module
    old_cfg, _, _, state = load_trained(run_dir)  # refuses a directory that holds no run
    if old_cfg.method.name != "supervised":
        raise ConfigError(f"method.compat_run={run_dir!r} is a {old_cfg.method.name} run: BCT needs "
                          f"an old supervised model's classifier")
    return jax.tree.map(np.asarray, classifier_params(jax.device_get(state.params)))


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

