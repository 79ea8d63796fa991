"""What a run costs, for scaling tables: parameter counts and the FLOPs of one train step."""

from __future__ import annotations

from typing import Any

import jax

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
