"""Offline datasets (TFDS builders), deterministic global batches, and in-step views."""

from repr_jax.data.pipeline import BatchStream, Dataset, default_data_dir, load
from repr_jax.data.views import make_views_fn

__all__ = ["BatchStream", "Dataset", "default_data_dir", "load", "make_views_fn"]
