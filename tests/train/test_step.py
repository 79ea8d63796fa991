"""The jitted train step: finite, one compilation, mixed precision, gradient accumulation."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import setup_step, tiny_config

from repr_jax import data
from repr_jax.config import ConfigError
from repr_jax.train import (build_method, global_batch, hyperparams, init_state, make_mesh,
                            make_step_fn, sample_batch)


def test_one_step_is_finite_and_lowers_loss_on_repeat(mnist1d_small):
    cfg = tiny_config()
    mesh, state, step_fn = setup_step(cfg, 1, mnist1d_small)
    stream = data.BatchStream(mnist1d_small.splits["train"], batch_size=32, seed=0)
    batch = global_batch(stream.batch(0), mesh)
    hp = hyperparams(cfg)
    losses = []
    for _ in range(4):  # the same batch: the loss must drop (step 0 has lr 0 during warmup)
        state, m = step_fn(state, batch, hp)
        losses.append(float(m["loss"]))
        chex.assert_tree_all_finite(state.params)
    assert int(state.step) == 4 and losses[-1] < losses[1]
    assert step_fn._cache_size() == 1  # one compilation for all steps


def test_bfloat16_mixed_precision_keeps_float32_state(mnist1d_small):
    """train.compute_dtype=bfloat16: the step's convolutions and matmuls run in bfloat16, while
    parameters, optimizer state and batch statistics stay float32; its loss tracks float32's."""
    from repr_jax.config import override
    losses, texts = {}, {}
    for dtype in ("float32", "bfloat16"):
        cfg = override(tiny_config(), [f"train.compute_dtype={dtype}"])
        method = build_method(cfg, mnist1d_small)
        mesh = make_mesh(1)
        state = init_state(cfg, method, sample_batch(mnist1d_small), mesh)
        step = make_step_fn(cfg, method, mesh, state)
        batch = global_batch({k: v[:32] for k, v in mnist1d_small.splits["train"].items()}, mesh)
        texts[dtype] = step.lower(state, batch, hyperparams(cfg)).as_text()
        out = []
        for _ in range(3):
            state, metrics = step(state, batch, hyperparams(cfg))
            out.append(float(metrics["loss"]))
        losses[dtype] = out
        for tree in (state.params, state.opt_state, state.batch_stats):
            assert {x.dtype for x in jax.tree.leaves(tree)
                    if jnp.issubdtype(x.dtype, jnp.floating)} == {jnp.dtype("float32")}
    assert "bf16" in texts["bfloat16"] and "bf16" not in texts["float32"]
    np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=0.02)


def test_gradient_accumulation_equals_the_full_batch(mnist1d_small):
    """A per-example objective (supervised cross-entropy, LayerNorm, no augmentation): 4
    micro-batches per step give the full-batch update; a batch that does not split is refused."""
    from repr_jax.config import override
    cfg = override(tiny_config(), ["method.name=supervised", "encoder.norm=layer",
                                   "data.views.shift=0", "data.views.scale=0.0",
                                   "data.views.noise=0.0", "data.views.mask=0.0"])
    stream = data.BatchStream(mnist1d_small.splits["train"], batch_size=32, seed=0)
    results = {}
    for accum in (1, 4):
        c = override(cfg, [f"train.grad_accum={accum}"])
        mesh, state, step_fn = setup_step(c, 1, mnist1d_small)
        for step in range(3):
            state, metrics = step_fn(state, global_batch(stream.batch(step), mesh),
                                     hyperparams(c))
        results[accum] = jax.device_get((state.params, metrics["loss"]))
    chex.assert_trees_all_close(results[1], results[4], atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match="does not split into train.grad_accum=3"):
        override(cfg, ["train.grad_accum=3"]).check_devices(1)
