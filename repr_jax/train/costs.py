"""What a run costs, for scaling tables: parameter counts and the FLOPs of one train step."""

from __future__ import annotations

import os
from typing import Any

import jax

from repr_jax.config import ConfigError

# Lookup tables, not matrix multiplies: nn.Embed's table and learned position embeddings. Kaplan et
# al. (2020) count N without them; patch embeddings (a convolution) stay in.
EMBEDDING_LEAVES = ("embedding", "position_embeddings", "pos_embedding")


def param_counts(params: Any) -> dict[str, int]:
    """``{"params": total, "non_embedding_params": total minus embedding tables}`` of a param tree
    (every trained parameter: encoder and heads)."""
    total = embedding = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        total += leaf.size
        if getattr(path[-1], "key", None) in EMBEDDING_LEAVES:
            embedding += leaf.size
    return {"params": int(total), "non_embedding_params": int(total - embedding)}


def flops(stage: Any) -> float:
    """XLA's FLOP count of a ``jax.jit(...).lower(...)`` (the whole program, before it is split
    across devices: the same number on one device or many) or of its ``.compile()`` (one device's
    share, after optimisation, including work every device repeats); NaN when the backend reports
    none."""
    return float((stage.cost_analysis() or {}).get("flops", float("nan")))


def device_memory(devices: int = 0) -> tuple[int, str]:
    """``(bytes, what)``: the memory one device can use (an accelerator's limit; on CPU the
    host's physical memory, shared by the ``devices`` the run uses: 0 = all local ones)."""
    device = jax.local_devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"one {device.device_kind}"
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    n = min(devices or jax.local_device_count(), jax.local_device_count())
    return total // max(n, 1), (f"this host's memory shared by {n} devices" if n > 1
                                else "this host's memory")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def nbytes(tree: Any) -> int:
    """The bytes of a tree's arrays (concrete or abstract, ``jax.eval_shape``'s)."""
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def check_state_fits(abstract_state: Any, shards: int = 1, devices: int = 0) -> None:
    """Refuses, before anything is allocated, a state (``jax.eval_shape``'s) whose arrays
    (parameters, optimizer moments) and gradients alone exceed one device's memory; ``shards``:
    the fsdp axis size; ``devices``: the local devices the run uses (0 = all)."""
    limit, what = device_memory(devices)
    n = param_counts(abstract_state.params)["params"]
    need = (nbytes(abstract_state) + nbytes(abstract_state.params)) / shards
    if need > limit:
        raise ConfigError(f"the model has {n:,} parameters: its state and gradients need about "
                          f"{_gib(need)} per device, and {what} is {_gib(limit)}; make the encoder "
                          f"smaller" + (" or shard it (train.fsdp)" if shards == 1 else ""))


def check_step_fits(compiled: Any, devices: int = 0) -> None:
    """Refuses a compiled step whose peak memory (XLA's estimate: arguments, outputs, temporaries)
    exceeds one device's (of the ``devices`` the run uses on this host), before it runs."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - backends without memory analysis
        return
    if m is None:
        return
    temp = getattr(m, "temp_size_in_bytes", 0)
    need = (getattr(m, "argument_size_in_bytes", 0) + getattr(m, "output_size_in_bytes", 0)
            - getattr(m, "alias_size_in_bytes", 0) + temp)
    limit, what = device_memory(devices)
    if need > limit:
        raise ConfigError(f"one train step needs about {_gib(need)} per device ({_gib(temp)} of "
                          f"activations and temporaries), and {what} is {_gib(limit)}; lower "
                          f"train.batch_size, or use train.grad_accum or encoder.remat")
