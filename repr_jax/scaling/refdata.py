"""Published scaling data for verifying fits, read from a local copy (never shipped or downloaded).

``chinchilla_points()`` reads Epoch AI's digitisation of Hoffmann et al. 2022 Fig. 4
(``chinchilla_epoch/svg_extracted_data.csv``) as Besiroglu et al. 2024 prepare it: the 5 highest-loss
points dropped, ``D = C / (6 N)``. The folder is ``$REPR_JAX_REFDATA``, else a ``shared/refdata``
beside any parent of this checkout.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np


def find_refdata(name: str) -> Path | None:
    """``<refdata>/<name>`` if a refdata folder holds it, else None."""
    root = os.environ.get("REPR_JAX_REFDATA")
    bases = [Path(root)] if root else [p / "shared" / "refdata"
                                       for p in Path(__file__).resolve().parents]
    return next((b / name for b in bases if (b / name).exists()), None)


def chinchilla_points() -> dict[str, np.ndarray] | None:
    """``{"N", "D", "loss"}`` for the 240 points of Besiroglu et al.'s refit, or None if absent."""
    path = find_refdata("chinchilla_epoch/svg_extracted_data.csv")
    if path is None:
        return None
    rows = list(csv.DictReader(path.open()))
    n = np.array([float(r["Model Size"]) for r in rows])
    c = np.array([float(r["Training FLOP"]) for r in rows])
    loss = np.array([float(r["loss"]) for r in rows])
    keep = loss < np.sort(loss)[-5]
    return {"N": n[keep], "D": c[keep] / (6 * n[keep]), "loss": loss[keep]}
