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
