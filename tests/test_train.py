"""Training: one step, exact resume, NaN stop, 8-device == 1-device, workdir safety."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import Crash, FaultyStream, tiny_config

from repr_jax import config as C
from repr_jax import data
from repr_jax.config import ConfigError
from repr_jax.train import (Checkpointer, TrainingDiverged, build_method, global_batch, hyperparams,
                            init_state, make_mesh, make_step_fn, sample_batch,
                            train_and_evaluate, warmup_cosine)


def test_schedule_equals_optax():
    ref = optax.warmup_cosine_decay_schedule(0.0, 2e-3, 10, 100, end_value=2e-4)
    steps = jnp.arange(0, 120)
    ours = warmup_cosine(steps, peak=2e-3, warmup_steps=10.0, total_steps=100, min_lr_ratio=0.1)
    np.testing.assert_allclose(ours, jax.vmap(ref)(steps), rtol=1e-5, atol=1e-9)


def _setup(cfg, num_devices, dataset, fsdp=1):
    mesh = make_mesh(num_devices, fsdp)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, sample_batch(dataset), mesh)
    return mesh, state, make_step_fn(cfg, method, mesh, state)


def test_one_step_is_finite_and_lowers_loss_on_repeat(mnist1d_small):
    cfg = tiny_config()
    mesh, state, step_fn = _setup(cfg, 1, mnist1d_small)
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


def test_eight_devices_equal_one_device(mnist1d_small):
    """The data-parallel step on 8 (fake CPU) devices equals the single-device step."""
    assert len(jax.devices()) == 8
    cfg = tiny_config()
    stream = data.BatchStream(mnist1d_small.splits["train"], batch_size=32, seed=0)
    results = {}
    for n in (1, 8):
        mesh, state, step_fn = _setup(cfg, n, mnist1d_small)
        for step in range(3):
            state, metrics = step_fn(state, global_batch(stream.batch(step), mesh),
                                     hyperparams(cfg))
        assert all(len(x.sharding.device_set) == n for x in jax.tree.leaves(state.params))
        results[n] = jax.device_get((state.params, state.batch_stats, metrics))
    chex.assert_trees_all_close(results[1], results[8], atol=1e-5, rtol=1e-5)


def test_batchnorm_statistics_are_global_under_sharding(mnist1d_small):
    """With the batch split over 8 devices, BatchNorm still averages over the whole batch."""
    cfg = tiny_config()
    stream = data.BatchStream(mnist1d_small.splits["train"], batch_size=32, seed=0)
    stats = []
    for n in (1, 8):
        mesh, state, step_fn = _setup(cfg, n, mnist1d_small)
        state, _ = step_fn(state, global_batch(stream.batch(0), mesh), hyperparams(cfg))
        stats.append(jax.device_get(state.batch_stats))
    chex.assert_trees_all_close(stats[0], stats[1], atol=1e-6)


def test_uneven_batch_fails_before_compiling(tmp_path):
    cfg = tiny_config(train=C.TrainConfig(batch_size=30, steps=2, num_devices=8))
    with pytest.raises(ConfigError, match="batch_size=30 is not divisible by the 8 devices"):
        train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    assert not (tmp_path / "run").exists()


def test_resume_is_bitwise_identical(tmp_path, mnist1d_small):
    cfg = tiny_config()
    full = train_and_evaluate(cfg, tmp_path / "full", progress=False, verbose=False,
                              dataset=mnist1d_small)
    crashy = FaultyStream(mnist1d_small.splits["train"], batch_size=32, seed=0, fault="crash",
                          at_step=4)
    with pytest.raises(Crash):  # dies after the checkpoint at step 3
        train_and_evaluate(cfg, tmp_path / "resumed", progress=False, verbose=False,
                           dataset=mnist1d_small, stream=crashy)
    resumed = train_and_evaluate(cfg, tmp_path / "resumed", progress=False, verbose=False,
                                 dataset=mnist1d_small)
    a, b = jax.device_get(full["state"]), jax.device_get(resumed["state"])
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)  # bitwise
    # metrics.jsonl holds each step once, and the same numbers as the uninterrupted run.
    rows = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").open()]
    full_rows = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert [r["loss"] for r in rows] == [r["loss"] for r in full_rows]
    assert (tmp_path / "resumed" / "plots" / "loss.png").exists()
    assert {r["representation"] for r in resumed["eval_rows"]} == {
        "raw inputs", "random-init encoder", "simclr encoder"}


def test_nan_stops_with_step_and_keeps_last_good_checkpoint(tmp_path, mnist1d_small):
    cfg = tiny_config(train=C.TrainConfig(batch_size=32, steps=8, ckpt_every=2, log_every=1,
                                          num_devices=1))
    poisoned = FaultyStream(mnist1d_small.splits["train"], batch_size=32, seed=0, fault="nan",
                            at_step=5)
    with pytest.raises(TrainingDiverged, match=r"at step 5.*checkpoint \(step 4\).*intact"):
        train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False,
                           dataset=mnist1d_small, stream=poisoned)
    mesh = make_mesh(1)
    method = build_method(cfg, mnist1d_small)
    like = init_state(cfg, method, sample_batch(mnist1d_small), mesh)
    ckpt = Checkpointer(tmp_path / "run" / "checkpoints")
    assert ckpt.latest_step() == 4
    restored = ckpt.restore(like)
    ckpt.close()
    assert int(restored.step) == 4
    chex.assert_tree_all_finite(restored.params)


def test_workdir_with_other_config_is_refused(tmp_path, mnist1d_small):
    cfg = tiny_config(train=C.TrainConfig(batch_size=32, steps=2, num_devices=1))
    train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False, dataset=mnist1d_small)
    with pytest.raises(ConfigError, match=r"different config \(optim.lr: 0.001 -> 0.01\)"):
        train_and_evaluate(C.override(cfg, ["optim.lr=0.01"]), tmp_path / "run",
                           progress=False, verbose=False, dataset=mnist1d_small)


def test_supervised_method_trains_on_digits(tmp_path):
    cfg = C.override(tiny_config(), [
        "data.name=digits", "data.num_examples=0", "data.views.shift=0", "data.views.mask=0.0",
        "data.views.crop_pad=1", "method.name=supervised", "optim.lr=0.01", "train.steps=30",
        "train.ckpt_every=0", "train.log_every=10"])
    out = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    acc = {(r["representation"], r["evaluator"]): r["value"] for r in out["eval_rows"]}
    assert acc["supervised encoder", "linear_probe"] > 0.8


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


@pytest.mark.parametrize("fsdp", [8, 4])
def test_fsdp_step_equals_one_device(mnist1d_small, fsdp):
    """8 devices as data x fsdp (1 x 8, 2 x 4): the large arrays of the state are split over fsdp
    (and stay split after the step), and three steps equal the single-device ones to 1e-5."""
    from repr_jax.config import override
    from repr_jax.train.sharding import FSDP
    cfg = override(tiny_config(), ["encoder.widths=(32,64)", "method.proj_hidden=64",
                                   f"train.fsdp={fsdp}", "train.num_devices=0"])
    stream = data.BatchStream(mnist1d_small.splits["train"], batch_size=32, seed=0)
    results = {}
    for n, f in ((1, 1), (8, fsdp)):
        mesh, state, step_fn = _setup(cfg, n, mnist1d_small, f)
        for step in range(3):
            state, metrics = step_fn(state, global_batch(stream.batch(step), mesh),
                                     hyperparams(cfg))
        split = [x for x in jax.tree.leaves((state.params, state.opt_state))
                 if FSDP in jax.tree.leaves(tuple(x.sharding.spec))]
        assert bool(split) == (f > 1)
        results[n] = jax.device_get((state.params, state.batch_stats, metrics))
    chex.assert_trees_all_close(results[1], results[8], atol=1e-5, rtol=1e-5)


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
        mesh, state, step_fn = _setup(c, 1, mnist1d_small)
        for step in range(3):
            state, metrics = step_fn(state, global_batch(stream.batch(step), mesh),
                                     hyperparams(c))
        results[accum] = jax.device_get((state.params, metrics["loss"]))
    chex.assert_trees_all_close(results[1], results[4], atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match="does not split into train.grad_accum=3"):
        override(cfg, ["train.grad_accum=3"]).check_devices(1)
