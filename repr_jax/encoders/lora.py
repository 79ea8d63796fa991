"""Low-rank adapters (LoRA, Hu et al. 2021) on an encoder's dense layers.

A targeted layer computes ``x W + b + (alpha / r) (x A) B`` with ``A [in, r]`` drawn like
PEFT's (Kaiming-uniform) and ``B [r, out]`` zero, so training starts from the pretrained
function. ``W`` and ``b`` keep their names and paths (pretrained weights load into them as
before); ``lora_a``/``lora_b`` sit beside them. What trains is chosen by the optimizer
(:func:`repr_jax.train.optim.trainable_filter`: the adapters and everything outside the
encoder); :func:`merged` folds the adapters into ``W`` for export, after which the plain encoder
(no adapters) computes the same embeddings.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from repr_jax.encoders import precision

ADAPTERS = ("lora_a", "lora_b")


@dataclasses.dataclass(frozen=True)
class LoRA:
    """Adapter settings an encoder is built with: ``rank`` 0 = none; ``targets``: the names of
    the dense layers that get adapters (the family's attention projections when empty)."""
    rank: int = 0
    alpha: float = 0.0
    targets: tuple[str, ...] = ()

    @property
    def scale(self) -> float:
        return (self.alpha or self.rank) / max(self.rank, 1)


class LoRADense(nn.Module):
    """``nn.Dense`` (same parameter names and initialisers) plus a rank-``rank`` adapter."""
    features: int
    use_bias: bool = True
    rank: int = 8
    scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (x.shape[-1], self.features))
        bound = 1.0 / math.sqrt(x.shape[-1])  # kaiming_uniform(a=sqrt(5)), PEFT's lora_A
        a = self.param("lora_a", lambda key, shape, dtype=jnp.float32: jax.random.uniform(
            key, shape, dtype, -bound, bound), (x.shape[-1], self.rank))
        b = self.param("lora_b", nn.initializers.zeros, (self.rank, self.features))
        x, kernel, a, b = nn.dtypes.promote_dtype(x, kernel, a, b)
        mm = precision.matmul  # ``x @ w``, or bfloat16 in / float32 out under precision.mixed()
        y = mm(x, kernel) + mm(mm(x, a), b) * jnp.asarray(self.scale, x.dtype)
        if self.use_bias:
            bias = self.param("bias", nn.initializers.zeros, (self.features,)).astype(y.dtype)
            y = y + bias.reshape((1,) * (y.ndim - 1) + (-1,))  # as nn.Dense (explicit rank)
        return y


def dense_factory(lora: LoRA | None, default_targets: tuple[str, ...]):
    """``dense(features, name, use_bias=True)``: a LoRADense for targeted names, else nn.Dense;
    both follow the mixed-precision policy (:mod:`repr_jax.encoders.precision`)."""
    targets = (lora.targets or default_targets) if lora and lora.rank else ()

    def dense(features: int, name: str, use_bias: bool = True) -> nn.Module:
        if name in targets:
            return LoRADense(features, use_bias, lora.rank, lora.scale, name=name)
        return nn.Dense(features, use_bias=use_bias, name=name, **precision.dense_kwargs())
    return dense


def merged(params: Any, scale: float) -> Any:
    """``params`` with every adapter folded into its kernel (``W + scale * A B``) and removed:
    the weights of the same encoder without adapters."""
    if not isinstance(params, Mapping):
        return params
    if "lora_a" in params and "lora_b" in params:
        rest = {k: v for k, v in params.items() if k not in ADAPTERS}
        rest["kernel"] = params["kernel"] + scale * (params["lora_a"] @ params["lora_b"])
        return rest
    return {k: merged(v, scale) for k, v in params.items()}


def is_adapter(path: str) -> bool:
    return path.rsplit("/", 1)[-1] in ADAPTERS
