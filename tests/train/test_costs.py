"""What a run costs: parameter counts without embedding tables, and XLA's FLOPs of a program."""

import jax
import jax.numpy as jnp
import pytest

from repr_jax.train import costs


def test_param_counts_leave_out_embedding_tables():
    params = {"embed": {"embedding": jnp.zeros((100, 8))}, "pos": {"pos_embedding": jnp.zeros((16, 8))},
              "dense": {"kernel": jnp.zeros((8, 4)), "bias": jnp.zeros(4)}}
    assert costs.param_counts(params) == {"params": 800 + 128 + 36, "non_embedding_params": 36}


def test_flops_of_a_matmul_are_two_m_n_k():
    a, b = jnp.zeros((32, 64)), jnp.zeros((64, 16))
    lowered = jax.jit(jnp.matmul).lower(a, b)
    assert costs.flops(lowered) == pytest.approx(2 * 32 * 64 * 16)
    assert costs.flops(lowered.compile()) == pytest.approx(2 * 32 * 64 * 16, rel=0.1)


def test_a_state_or_step_too_big_for_the_device_is_refused_before_it_runs(monkeypatch,
                                                                        mnist1d_small):
    from conftest import tiny_config

    from repr_jax.config import ConfigError
    from repr_jax.train import build_method, init_state, make_mesh, sample_batch
    from repr_jax.train.run import compile_step
    cfg, mesh = tiny_config(), make_mesh(1)
    method = build_method(cfg, mnist1d_small)
    state = init_state(cfg, method, sample_batch(mnist1d_small), mesh)
    batch = {k: v[:32] for k, v in mnist1d_small.splits["train"].items()}
    compile_step(cfg, method, mesh, state, batch)  # fits the host
    monkeypatch.setattr(costs, "device_memory", lambda devices=0: (200_000, "a 200 kB device"))
    with pytest.raises(ConfigError, match=r"one train step needs about .* GiB per device \(.* of "
                                          r"activations and temporaries\), and a 200 kB device"):
        compile_step(cfg, method, mesh, state, batch)
    monkeypatch.setattr(costs, "device_memory", lambda devices=0: (2_000, "a 2 kB device"))
    with pytest.raises(ConfigError, match=r"the model has [\d,]+ parameters: its state and "
                                          r"gradients need about"):
        init_state(cfg, method, sample_batch(mnist1d_small), mesh)
