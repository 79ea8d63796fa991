"""The data formats a user points ``data.name`` at, ``PREFIX:PATH``: one line each. A format's
file declares its config section, its TFDS builder and how it is prepared, ending with a
:class:`~repr_jax.data.prepare.Format`; adding a format is that file plus one line here."""

from __future__ import annotations

from repr_jax.data import activations, image_folder, text_pairs
from repr_jax.data.prepare import Format

FORMATS: dict[str, Format] = {
    "imagefolder:": image_folder.FORMAT,
    "pairs:": text_pairs.PAIRS_FORMAT,
    "beir:": text_pairs.BEIR_FORMAT,
    "activations:": activations.FORMAT,
}


def format_of(name: str) -> tuple[str, Format] | None:
    """``(prefix, format)`` of a ``data.name`` in a registered format, else None."""
    return next(((p, f) for p, f in FORMATS.items() if str(name).startswith(p)), None)
