"""The jitted train step: loss → grad → optax update, with the state donated."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

from repr_jax.encoders import precision
from repr_jax.methods import Method
from repr_jax.train.optim import (join_trainable, learning_rate, lr_scales, optimizer_for,
                                  split_trainable, trainable_filter)
from repr_jax.train.state import TrainState


def _cast(tree: Any, dtype) -> Any:
    """Floating leaves of ``tree`` as ``dtype`` (integer token ids and keys untouched)."""
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                        tree)


def _like(new: Any, old: Any) -> Any:
    """``new`` with ``old``'s dtypes (state written in the compute dtype, kept in float32)."""
    return jax.tree.map(lambda n, o: n.astype(o.dtype), new, old)


def train_step(state: TrainState, batch: dict, hp: Any, *, method: Method,
               tx: optax.GradientTransformationExtraArgs, total_steps: int,
               compute_dtype: str = "float32", grad_accum: int = 1, trainable=None,
               mixed_policy: bool = False) -> tuple[TrainState, dict]:
    """One update. ``hp`` is ``{"optim": OptimConfig, "method": MethodConfig}`` (numeric leaves);
    ``tx`` is the run's optimizer (:func:`repr_jax.train.optim.make_optimizer`), which takes the
    learning rate and weight decay from ``hp`` as arguments.

    All randomness is ``fold_in(state.rng, state.step)``, so the step is a pure function of
    (state, batch, hp): a resumed run replays the uninterrupted one exactly.

    ``compute_dtype="bfloat16"``: mixed precision. With ``mixed_policy`` (encoders whose
    ``Family.mixed_precision`` is set, e.g. text_transformer) the loss is traced under
    :func:`repr_jax.encoders.precision.mixed`: parameters and activations stay float32 and every
    dense and attention GEMM takes bfloat16 inputs with float32 results, forward and backward (on
    CPUs with AVX512-BF16/AMX XLA's fast path; bfloat16 *results* are slower than float32 there).
    Without it (families not yet on the policy) the forward and backward pass run on bfloat16
    copies of the parameters and inputs (the objectives compute their logits in float32). Either
    way the gradients, parameters, optimizer state and batch statistics stay float32.
    ``"float32"`` traces exactly the float32 program.

    ``grad_accum=A``: the batch is split into A interleaved micro-batches (row ``j`` goes to
    micro-batch ``j % A``, so each draws evenly from every device's rows) whose gradients are
    averaged (a ``lax.scan``: activation memory of one micro-batch). For objectives that are a mean
    over examples this is the full-batch gradient; in-batch-negative objectives see only their
    micro-batch's negatives.

    ``trainable`` (:func:`repr_jax.train.optim.trainable_filter`'s, e.g. LoRA's): only those
    parameters are differentiated and updated; the rest enter the loss as constants.
    """
    key = jax.random.fold_in(state.rng, state.step)
    if trainable is None:
        train_params, frozen = state.params, None
    else:
        train_params, frozen = split_trainable(state.params, trainable)

    def whole(params):
        return params if frozen is None else join_trainable(params, frozen)
    dtype = jnp.dtype(compute_dtype)
    mixed = dtype != jnp.float32
    model_state = {"batch_stats": state.batch_stats} if state.batch_stats else {}

    def loss_fn(params, model_state, extra, batch, key):
        params = whole(params)
        if not mixed:
            return method.loss(params, model_state, extra, batch, key, hp["method"])
        if mixed_policy:  # read by the layers' products while this is traced
            with precision.mixed():
                loss, (new_state, new_extra, metrics) = method.loss(
                    params, model_state, extra, batch, key, hp["method"])
            return loss.astype(jnp.float32), (_like(new_state, model_state),
                                              _like(new_extra, extra), _cast(metrics, jnp.float32))
        loss, (new_state, new_extra, metrics) = method.loss(
            _cast(params, dtype), _cast(model_state, dtype), _cast(extra, dtype),
            _cast(batch, dtype), key, hp["method"])
        return loss.astype(jnp.float32), (_like(new_state, model_state), _like(new_extra, extra),
                                          _cast(metrics, jnp.float32))

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if grad_accum == 1:
        (loss, (model_state, extra, metrics)), grads = grad_fn(
            train_params, model_state, state.extra, batch, key)
    else:
        micro = jax.tree.map(lambda x: x.reshape(x.shape[0] // grad_accum, grad_accum,
                                                 *x.shape[1:]).swapaxes(0, 1), batch)

        def accumulate(carry, inputs):
            model_state, extra, total = carry
            mb, i = inputs
            (loss, (model_state, extra, metrics)), grads = grad_fn(
                train_params, model_state, extra, mb, jax.random.fold_in(key, i))
            return (model_state, extra, jax.tree.map(jnp.add, total, grads)), (loss, metrics)

        zeros = jax.tree.map(jnp.zeros_like, train_params)
        (model_state, extra, grads), (losses, metrics) = jax.lax.scan(
            accumulate, (model_state, state.extra, zeros), (micro, jnp.arange(grad_accum)))
        grads = jax.tree.map(lambda g: g / grad_accum, grads)
        loss, metrics = losses.mean(), jax.tree.map(lambda m: m.mean(axis=0), metrics)
    lr = learning_rate(state.step, hp["optim"], total_steps=total_steps)
    o = hp["optim"]
    scales = lr_scales(train_params, freeze=o.freeze, layer_decay=o.layer_decay,
                       head_lr_mult=o.head_lr_mult)
    updates, opt_state = tx.update(grads, state.opt_state, train_params,
                                   learning_rate=jax.tree.map(lambda s: lr * s, scales),
                                   weight_decay=o.weight_decay)
    params = whole(optax.apply_updates(train_params, updates))
    if method.project_params is not None:  # back onto the method's constraint set
        params = method.project_params(params, hp["method"])
    if method.after_update is not None:
        extra = method.after_update(extra, params, hp["method"])
    metrics = dict(metrics, loss=loss, grad_norm=optax.global_norm(grads), lr=lr)
    new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state,
                              batch_stats=model_state.get("batch_stats", state.batch_stats),
                              extra=jax.lax.stop_gradient(extra))
    return new_state, metrics


def compute_dtype(cfg) -> str:
    """``train.compute_dtype`` with ``"auto"`` decided: ``"bfloat16"`` where the backend has fast
    bfloat16 dot products (:func:`repr_jax.encoders.precision.bfloat16_is_fast`) and the
    encoder's family follows the mixed-precision policy, else ``"float32"``."""
    dtype = cfg.train.compute_dtype
    if dtype != "auto":
        return dtype
    from repr_jax.encoders import FAMILIES
    family = FAMILIES.get(cfg.encoder.name)
    policy = bool(family and family.mixed_precision)
    return "bfloat16" if policy and precision.bfloat16_is_fast() else "float32"


def precision_line(cfg) -> str | None:
    """What a run prints first about its precision: None for float32 asked for; for bfloat16,
    which path its encoder takes (:func:`configured_step`) and whether the machine has fast
    bfloat16 dot products (:func:`repr_jax.encoders.precision.bfloat16_is_fast`); for
    ``auto``, what it took and why."""
    if cfg.train.compute_dtype == "float32":
        return None
    from repr_jax.encoders import FAMILIES
    family = FAMILIES.get(cfg.encoder.name)
    fast = ("this machine has fast bfloat16 dot products" if precision.bfloat16_is_fast() else
            "this machine reports no bfloat16 dot products: expect no speed-up")
    if compute_dtype(cfg) == "float32":  # auto, declined
        why = (fast if not precision.bfloat16_is_fast() else
               f"{cfg.encoder.name} is not on the mixed-precision policy")
        return f"precision: float32 (train.compute_dtype=auto: {why})"
    if cfg.train.compute_dtype == "auto":
        fast = f"train.compute_dtype=auto took it: {fast}"
    if family and family.mixed_precision:
        return (f"precision: bfloat16 GEMMs with float32 results ({cfg.encoder.name}; "
                f"parameters, optimizer state and elementwise work float32); {fast}")
    return (f"precision: bfloat16 copies of the parameters and inputs ({cfg.encoder.name} is not "
            f"on the mixed-precision policy yet; parameters and optimizer state float32); {fast}")


def configured_step(cfg, method: Method):
    """``step(state, batch, hp)``: :func:`train_step` with ``cfg``'s structural settings and its
    optimizer bound (what the single-run and population steps jit)."""
    from repr_jax.encoders import FAMILIES
    family = FAMILIES.get(cfg.encoder.name)
    return functools.partial(train_step, method=method, tx=optimizer_for(cfg.optim),
                             total_steps=cfg.train.steps,
                             compute_dtype=compute_dtype(cfg),
                             grad_accum=cfg.train.grad_accum,
                             trainable=trainable_filter(cfg.optim),
                             mixed_policy=bool(family and family.mixed_precision))


def hyperparams(cfg) -> dict:
    """The pytree of numeric hyperparameters the step reads (the config's leaves)."""
    return {"optim": cfg.optim, "method": cfg.method}
