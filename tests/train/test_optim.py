"""The optimizer, built once: optax's numbers and state, with traceable hyperparameters."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from repr_jax.config import OptimConfig
from repr_jax.train.optim import learning_rate, make_optimizer, warmup_cosine


def test_schedule_equals_optax():
    ref = optax.warmup_cosine_decay_schedule(0.0, 2e-3, 10, 100, end_value=2e-4)
    steps = jnp.arange(0, 120)
    ours = warmup_cosine(steps, peak=2e-3, warmup_steps=10.0, total_steps=100, min_lr_ratio=0.1)
    np.testing.assert_allclose(ours, jax.vmap(ref)(steps), rtol=1e-5, atol=1e-9)


def test_a_warmup_fraction_keeps_its_share_of_any_run_length():
    """``warmup_fraction`` is a share of the steps; ``warmup_steps`` a count (a quarter of a 60-step
    run when the experiment's 150 steps gave it 15)."""
    for total in (60, 150, 1000):
        by_fraction = OptimConfig(lr=1e-3, warmup_fraction=0.1)
        by_steps = OptimConfig(lr=1e-3, warmup_steps=total / 10)
        steps = jnp.arange(total + 5)
        np.testing.assert_allclose(learning_rate(steps, by_fraction, total_steps=total),
                                   learning_rate(steps, by_steps, total_steps=total), rtol=1e-6)
    late = learning_rate(20, OptimConfig(lr=1e-3, warmup_steps=15.0), total_steps=60)
    assert float(learning_rate(20, OptimConfig(lr=1e-3, warmup_steps=15.0,
                                               warmup_fraction=0.1), total_steps=60)) != late


def _params():
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    return {"kernel": jax.random.normal(keys[0], (4, 3)), "bias": jax.random.normal(keys[1], (3,))}


def test_updates_and_state_equal_optax_adamw_with_its_schedule():
    """The same updates as optax.adamw(schedule, mask=ndim>1) (and after clipping), and a state of
    the same structure (so checkpoints of either restore into the other)."""
    hp = OptimConfig(lr=1e-2, weight_decay=0.1, warmup_steps=3.0, min_lr_ratio=0.1)
    total = 10
    for clip in (0.0, 0.5):
        schedule = lambda c: learning_rate(c, hp, total_steps=total)  # noqa: E731
        ref = optax.adamw(schedule, weight_decay=hp.weight_decay,
                          mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p))
        ref = optax.chain(optax.clip_by_global_norm(clip), ref) if clip else ref
        ours = make_optimizer(clip_norm=clip)
        params_a = params_b = _params()
        state_a, state_b = ref.init(params_a), ours.init(params_b)
        chex.assert_trees_all_equal_structs(state_a, state_b)
        for step in range(5):
            grads = jax.tree.map(lambda p: jnp.sin(p * (step + 1)), params_a)
            up_a, state_a = ref.update(grads, state_a, params_a)
            up_b, state_b = ours.update(grads, state_b, params_b,
                                        learning_rate=learning_rate(step, hp, total_steps=total),
                                        weight_decay=hp.weight_decay)
            params_a, params_b = optax.apply_updates(params_a, up_a), optax.apply_updates(params_b,
                                                                                          up_b)
        chex.assert_trees_all_close(params_a, params_b, rtol=1e-6, atol=1e-7)


def test_a_run_builds_its_optimizer_once():
    from conftest import tiny_config

    from repr_jax.train.optim import optimizer_for
    cfg = tiny_config()
    assert optimizer_for(cfg.optim) is optimizer_for(cfg.optim)


def test_hyperparameters_are_traced_and_vmapped_by_one_optimizer():
    """One optimizer serves a population: per-member learning rates and weight decays, vmapped."""
    tx = make_optimizer()
    params = _params()
    grads = jax.tree.map(jnp.ones_like, params)
    hps = [OptimConfig(lr=lr, weight_decay=wd) for lr, wd in ((1e-3, 0.0), (1e-2, 0.5))]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *hps)

    def update(hp):
        up, _ = tx.update(grads, tx.init(params), params,
                          learning_rate=learning_rate(50, hp, total_steps=100),
                          weight_decay=hp.weight_decay)
        return up
    together = jax.jit(jax.vmap(update))(stacked)
    for i, hp in enumerate(hps):
        chex.assert_trees_all_close(jax.tree.map(lambda x: x[i], together), update(hp),
                                    rtol=1e-6)


def test_lr_scales_freeze_decay_layers_and_give_heads_their_own_rate():
    import pytest

    from repr_jax.config import ConfigError
    from repr_jax.train.optim import lr_scales
    z = jnp.zeros(2)
    params = {"tower": {"encoder": {"word_embeddings": {"embedding": z}, "embeddings_ln": {"scale": z},
                                    "layer_0": {"query": {"kernel": z}},
                                    "layer_1": {"query": {"kernel": z}}, "final_ln": {"scale": z}},
                        "projector": {"kernel": z}}, "logit_scale": z}
    s = lr_scales(params, freeze=("embeddings_ln/*",), layer_decay=0.5, head_lr_mult=10.0)
    enc = s["tower"]["encoder"]
    # L = 2 layers: embeddings decay^3, layer i decay^(2 - i), the rest of the encoder 1.
    assert float(enc["word_embeddings"]["embedding"]) == 0.125
    assert float(enc["embeddings_ln"]["scale"]) == 0.0  # frozen
    assert float(enc["layer_0"]["query"]["kernel"]) == 0.25
    assert float(enc["layer_1"]["query"]["kernel"]) == 0.5
    assert float(enc["final_ln"]["scale"]) == 1.0
    assert float(s["tower"]["projector"]["kernel"]) == float(s["logit_scale"]) == 10.0
    assert all(float(v) == 1.0 for v in jax.tree.leaves(lr_scales(params)))
    with pytest.raises(ConfigError, match=r"optim.freeze patterns \['decoder/\*'\] match no "
                                          r"parameter \(paths look like: "):
        lr_scales(params, freeze=("decoder/*",))
    # Traced (a population varies them): one function for every decay.
    decayed = jax.vmap(lambda d: lr_scales(params, layer_decay=d)["tower"]["encoder"]["layer_0"]
                       ["query"]["kernel"])(jnp.asarray([1.0, 0.5]))
    np.testing.assert_allclose(decayed, [1.0, 0.25])


def test_frozen_parameters_do_not_move_and_the_rest_train():
    from repr_jax import config as config_lib
    from repr_jax.train.run import build_run, compile_step
    from repr_jax.train.step import hyperparams

    from conftest import tiny_config
    from repr_jax.data import BatchStream
    from repr_jax.train import sharding
    cfg = config_lib.override(tiny_config(), ["optim.freeze=('encoder/conv0/*',)",
                                              "optim.head_lr_mult=0.0"])
    mesh, dataset, method, state = build_run(cfg)
    before = jax.device_get(state.params)
    batch = sharding.global_batch(BatchStream(dataset.splits["train"], batch_size=32,
                                              seed=0).batch(0), mesh)
    step, _ = compile_step(cfg, method, mesh, state, batch)
    for _ in range(3):
        state, _ = step(state, batch, hyperparams(cfg))
    after = jax.device_get(state.params)
    enc_b, enc_a = before["tower"]["encoder"], after["tower"]["encoder"]
    frozen = [k for k in enc_b if k == "conv0"]
    assert frozen
    for k in enc_b:
        moved = not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(enc_a[k]),
                                                             jax.tree.leaves(enc_b[k])))
        assert moved == (k not in frozen), k
    jax.tree.map(np.testing.assert_array_equal, after["tower"]["projector"],
                 before["tower"]["projector"])  # head_lr_mult=0
