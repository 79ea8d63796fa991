"""The mixed-precision policy's matrix products: bfloat16 inputs, float32 results, both ways.

Under :func:`mixed` every dense and attention GEMM of a family that reads the policy takes
bfloat16 copies of its operands and returns float32 (``preferred_element_type``), and its
backward pass casts the cotangent to bfloat16 so that both gradient GEMMs are bfloat16 GEMMs with
float32 results too (:func:`mixed_dot_general`'s ``custom_vjp``). Parameters, optimizer state,
LayerNorm, softmax, GELU and everything elementwise stay float32; each input gradient is returned
in its primal's dtype (float32 for float32 parameters). On XLA:CPU with AVX512-BF16/AMX this is
the fast path: a 2,048³ matmul runs at ~1,400 GFLOP/s with bfloat16 inputs and float32 results
against ~290 in float32 and ~250 with bfloat16 results (issue 53).

How it reaches the layers: a policy read at trace time. :func:`dot_general` (same signature as
``jax.lax.dot_general``, so it goes to ``flax.linen.Dense(dot_general=...)`` or
``jnp.einsum(..., _dot_general=...)``), :func:`matmul` and :func:`einsum` ask :func:`active`
when they are traced; with the policy off they are exactly ``lax.dot_general``, ``a @ b`` and
``jnp.einsum`` (the float32 program is unchanged, bit for bit). Configs and module fields are
untouched; the one switch is the ``with mixed():`` block, which must be entered *inside* the
traced function (the train step's loss, an embedder's apply): a ``jax.jit`` cache does not key on
it, so wrapping a call of an already-compiled function changes nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import string

import jax
import jax.numpy as jnp
from jax import lax

from repr_jax.backend import cpu_has_bf16_dots

_MIXED = contextvars.ContextVar("repr_jax_mixed_precision", default=False)
POLICIES = ("float32", "bfloat16", "auto")


@contextlib.contextmanager
def mixed(on: bool = True):
    """Within the block, products traced through this module use bfloat16 inputs and float32
    results (``on=False``: the plain float32 products, e.g. to switch it off in a nested call)."""
    token = _MIXED.set(bool(on))
    try:
        yield
    finally:
        _MIXED.reset(token)


def active() -> bool:
    """Whether the mixed-precision policy is on where this is traced."""
    return _MIXED.get()


def bfloat16_is_fast() -> bool:
    """Whether the default backend has fast bfloat16 dot products: a TPU or GPU, or a CPU with
    AVX512-BF16 or AMX (:func:`repr_jax.backend.cpu_has_bf16_dots`, the search's probe too)."""
    if jax.default_backend() in ("tpu", "gpu", "cuda", "rocm"):
        return True
    return cpu_has_bf16_dots()


def resolve(policy: str) -> str:
    """``"float32"`` or ``"bfloat16"`` for a policy name; ``"auto"`` takes bfloat16 where
    :func:`bfloat16_is_fast`."""
    if policy not in POLICIES:
        raise ValueError(f"unknown precision policy {policy!r}; choose from {POLICIES}")
    if policy == "auto":
        return "bfloat16" if bfloat16_is_fast() else "float32"
    return policy


def _letters(dimension_numbers, lhs_ndim: int, rhs_ndim: int) -> tuple[str, str, str]:
    """einsum specs ``(lhs, rhs, out)`` of a ``dot_general``: batch and contracting dimensions
    share letters; the output is batch, lhs free, rhs free (``lax.dot_general``'s order)."""
    (lc, rc), (lb, rb) = dimension_numbers
    names = iter(string.ascii_letters)
    lhs, rhs = [None] * lhs_ndim, [None] * rhs_ndim
    for i, j in (*zip(lb, rb), *zip(lc, rc)):
        lhs[i] = rhs[j] = next(names)
    lhs = [c or next(names) for c in lhs]
    rhs = [c or next(names) for c in rhs]
    out = ([lhs[i] for i in lb] + [c for i, c in enumerate(lhs) if i not in lb and i not in lc]
           + [c for j, c in enumerate(rhs) if j not in rb and j not in rc])
    return "".join(lhs), "".join(rhs), "".join(out)


def _leading(x, batch: tuple[int, ...]):
    """``x`` with its ``batch`` dimensions first (in that order), the rest in their order; and
    where each old dimension went."""
    order = (*batch, *(i for i in range(x.ndim) if i not in batch))
    where = {old: new for new, old in enumerate(order)}
    return (x if order == tuple(range(x.ndim)) else x.transpose(order)), where


def _bf16_dot(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **_):
    """``lax.dot_general`` of bfloat16 copies with float32 results, its batch dimensions moved in
    front on both sides first: XLA:CPU runs a bfloat16 x bfloat16 = float32 dot whose batch
    dimensions do not lead on its generic thunk, which refuses the types ("Unsupported element
    type for DotThunk"), where its bfloat16 kernels take the leading form. Same result layout as
    ``lax.dot_general`` (batch, lhs free, rhs free, each in order). Cost: the one GEMM,
    ``O(K M N)`` for K contracted, M and N free elements, plus bfloat16 copies of both sides
    (and a zero row for an odd row count) in ``O(K (M + N))``."""
    del precision, preferred_element_type
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs = lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16)
    if not lb and tuple(lc) == tuple(rc) == (0,):
        # ``a^T b`` over rows (a dense layer's weight gradient on [tokens, ...] activations):
        # XLA:CPU folds the transpose into a slow bfloat16 kernel, or, where a side has more
        # than two dimensions, into its generic thunk, which refuses the types. Flattened to
        # matrices and split in two row blocks (a zero row added to an odd count), it contracts
        # two dimensions, transposes once and runs its fast GEMM (bench/README.md).
        k, free = lhs.shape[0], (*lhs.shape[1:], *rhs.shape[1:])
        a, b = lhs.reshape(k, -1), rhs.reshape(k, -1)
        if k % 2:
            a, b = jnp.pad(a, ((0, 1), (0, 0))), jnp.pad(b, ((0, 1), (0, 0)))
        half = a.shape[0] // 2
        out = lax.dot_general(a.reshape(2, half, -1), b.reshape(2, half, -1),
                              (((0, 1), (0, 1)), ((), ())), preferred_element_type=jnp.float32)
        return out.reshape(free)
    lhs, lw = _leading(lhs, tuple(lb))
    rhs, rw = _leading(rhs, tuple(rb))
    n = len(lb)
    dn = ((tuple(lw[i] for i in lc), tuple(rw[j] for j in rc)), (tuple(range(n)), tuple(range(n))))
    return lax.dot_general(lhs, rhs, dn, preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _mixed(lhs, rhs, dimension_numbers, lhs_dtype, rhs_dtype):
    return _bf16_dot(lhs, rhs, dimension_numbers)


def _mixed_fwd(lhs, rhs, dimension_numbers, lhs_dtype, rhs_dtype):
    lhs16, rhs16 = lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16)
    return _bf16_dot(lhs16, rhs16, dimension_numbers), (lhs16, rhs16)  # bfloat16 residuals


def _mixed_bwd(dimension_numbers, lhs_dtype, rhs_dtype, residuals, g):
    lhs16, rhs16 = residuals
    a, b, out = _letters(dimension_numbers, lhs16.ndim, rhs16.ndim)
    g16 = g.astype(jnp.bfloat16)
    d_lhs = jnp.einsum(f"{out},{b}->{a}", g16, rhs16, preferred_element_type=jnp.float32,
                       _dot_general=_bf16_dot)
    d_rhs = jnp.einsum(f"{a},{out}->{b}", lhs16, g16, preferred_element_type=jnp.float32,
                       _dot_general=_bf16_dot)
    return d_lhs.astype(lhs_dtype), d_rhs.astype(rhs_dtype)


_mixed.defvjp(_mixed_fwd, _mixed_bwd)


def _normalise(dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    return (tuple(lc), tuple(rc)), (tuple(lb), tuple(rb))


def mixed_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                      **_):
    """``lax.dot_general`` on bfloat16 copies of ``lhs`` and ``rhs`` with float32 accumulation and
    result, whose gradients are bfloat16 GEMMs of the bfloat16 cotangent with float32 results,
    each returned in its primal's dtype. The result is float32 unless ``preferred_element_type``
    or the inputs' common dtype says otherwise (bfloat16 inputs: cast after the float32 GEMM).
    ``precision`` is moot for bfloat16 inputs."""
    del precision
    dn = _normalise(dimension_numbers)
    out = _mixed(lhs, rhs, dn, jnp.dtype(lhs.dtype), jnp.dtype(rhs.dtype))
    dtype = preferred_element_type or jnp.result_type(lhs, rhs)
    return out if out.dtype == dtype else out.astype(dtype)


def _floating(*xs) -> bool:
    return all(jnp.issubdtype(x.dtype, jnp.floating) for x in xs)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                **kwargs):
    """``lax.dot_general`` that follows the policy: :func:`mixed_dot_general` under
    :func:`mixed` (floating operands), else ``lax.dot_general`` with the same arguments."""
    if active() and _floating(lhs, rhs):
        return mixed_dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type)
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type, **kwargs)


def matmul(a, b):
    """``a @ b`` for ``b`` a matrix ``[K, N]`` (a dense kernel) that follows the policy."""
    if active() and _floating(a, b):
        return mixed_dot_general(a, b, (((a.ndim - 1,), (0,)), ((), ())))
    return a @ b


def einsum(spec: str, a, b):
    """``jnp.einsum(spec, a, b)`` whose products follow the policy. (``mixed_dot_general`` goes in
    directly, not :func:`dot_general`: ``jnp.einsum`` compiles its body keyed on ``_dot_general``,
    not on the policy.)"""
    if active() and _floating(a, b):
        return jnp.einsum(spec, a, b, _dot_general=mixed_dot_general)
    return jnp.einsum(spec, a, b)


def dense_kwargs() -> dict:
    """``nn.Dense``/``DenseGeneral`` keyword arguments that make it follow the policy."""
    return {"dot_general": dot_general}
