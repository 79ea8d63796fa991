"""Offline datasets (TFDS builders), deterministic global batches, and in-step views.

Each dataset and format declares its own config section beside its reader: the built-in datasets'
in :mod:`~repr_jax.data.builders` (each builder's ``SECTION``), the formats a user points
``data.name`` at (``imagefolder:``, ``pairs:``, ``beir:``) in their files, registered in
:data:`~repr_jax.data.formats.FORMATS`, and a user's TFDS dataset's in
:mod:`~repr_jax.data.pipeline`. :func:`data_config` is the hook ``repr_jax.config.DataConfig``
chooses them by.
"""

from repr_jax.data.pipeline import BatchStream, Dataset, default_data_dir, load
from repr_jax.data.views import make_views_fn


def data_config(name: str | None):
    """The config section class of ``data.name=name`` (what ``DataConfig(name=...)`` builds);
    ``None``: every dataset's and format's, by name."""
    from repr_jax.data import builders, formats, pipeline
    if name is None:
        return {**{n: b.SECTION for n, b in builders.BUILDERS.items()},
                **{f"{p}{f.path}": f.section for p, f in formats.FORMATS.items()},
                "a TFDS dataset": pipeline.TfdsData}
    found = formats.format_of(name)
    if found is not None:
        return found[1].section
    if name in builders.BUILDERS:
        return builders.BUILDERS[name].SECTION
    return pipeline.TfdsData


__all__ = ["BatchStream", "Dataset", "data_config", "default_data_dir", "load", "make_views_fn"]
