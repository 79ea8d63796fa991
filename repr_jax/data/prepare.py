"""Preparing a TFDS dataset once, quietly, while other processes wait: what every reader of a
built-in, generated or user's dataset calls (:func:`prepared`); and what a data format a user
points ``data.name`` at is (:class:`Format`)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from repr_jax import files


def default_data_dir() -> str:
    return os.environ.get("REPR_JAX_DATA_DIR") or str(Path.home() / ".cache" / "repr_jax" / "tfds")


class _LocalFiles:
    """What TFDS's example shuffler needs of TensorFlow, on local files. A split of more than 1 GB
    spills to bucket files through ``tf.io.gfile``; without TensorFlow installed that import fails,
    so while preparing, the shuffler gets this instead."""

    class io:  # noqa: N801 - mirrors tf.io.gfile
        class gfile:  # noqa: N801
            GFile = staticmethod(open)
            exists = staticmethod(os.path.exists)
            remove = staticmethod(os.remove)

    class errors:
        class ResourceExhaustedError(OSError):
            pass


@contextlib.contextmanager
def no_gcs_metadata():
    """TFDS builders made inside leave no empty ``tmp*tfds`` folder in the system's temporary
    folder: TFDS makes one per builder whose dataset is not prepared yet, to copy its GCS
    metadata into, and never removes it. GCS is off here, so the folder is never used."""
    from tensorflow_datasets.core import dataset_info
    from_bucket = dataset_info.DatasetInfo.initialize_from_bucket
    dataset_info.DatasetInfo.initialize_from_bucket = lambda self: None
    try:
        yield
    finally:
        dataset_info.DatasetInfo.initialize_from_bucket = from_bucket


@contextlib.contextmanager
def _preparing():
    """Quiet, side-effect-free preparation: no TFDS progress bars or absl warnings, numpy's and
    Python's global RNGs restored afterwards (``mnist1d.make_dataset`` reseeds both; TFDS draws
    from ``random``), splits larger than TFDS's in-memory shuffle buffer written without
    TensorFlow, and no empty ``tmp*tfds`` folder left behind (:func:`no_gcs_metadata`)."""
    import importlib.util

    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import shuffle
    from tensorflow_datasets.core.utils import tqdm_utils
    was_active = tqdm_utils._active  # noqa: SLF001 - TFDS exposes only a setter
    np_state, py_state = np.random.get_state(), random.getstate()
    absl_logger = logging.getLogger("absl")  # "Using custom data configuration" per config
    absl_level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    tf = shuffle.tf
    if importlib.util.find_spec("tensorflow") is None:
        shuffle.tf = _LocalFiles
    tfds.display_progress_bar(False)
    try:
        with no_gcs_metadata():
            yield
    finally:
        shuffle.tf = tf
        tfds.display_progress_bar(was_active)
        np.random.set_state(np_state)
        random.setstate(py_state)
        absl_logger.setLevel(absl_level)


def prepared(lock_name: str, make_builder, data_dir: str):
    """``make_builder()``, prepared. One preparer at a time (concurrent runs on one data dir): the
    others wait on the lock, then read what it prepared (a builder made before that would see no
    splits)."""
    with files.exclusive(Path(data_dir) / f".{lock_name}.prepare.lock"), _preparing():
        builder = make_builder()
        if not builder.is_prepared():
            # TFDS prepares into incomplete.<random>_<version>/ beside it: a killed one's stays
            version = Path(builder.data_dir)
            files.remove_stale(version.parent, r"incomplete\.[A-Z0-9]+_" + version.name.replace(
                ".", r"\."), f"an unfinished preparation of {builder.name}")
            # TFDS would announce "Downloading and preparing ... downloaded": nothing is downloaded
            config = f" ({builder.builder_config.name})" if builder.builder_config else ""
            print(f"preparing {builder.name}{config} in {builder.data_dir} (generated here, "
                  f"nothing downloaded)", file=sys.stderr, flush=True)
        builder._log_download_bytes = builder._log_download_done = lambda: None  # noqa: SLF001
        try:
            builder.download_and_prepare()
        except BaseException:
            _remove_unprepared(Path(builder.data_dir), Path(data_dir))
            raise
    return builder


def _remove_unprepared(version_dir: Path, data_dir: Path) -> None:
    """After a failed preparation: the dataset's folder if it holds no finished dataset (no
    ``dataset_info.json``), then its parents up to ``data_dir`` while they are empty, so a later
    run does not meet an empty prepared folder."""
    import shutil
    if version_dir.is_dir() and not (version_dir / "dataset_info.json").exists():
        shutil.rmtree(version_dir, ignore_errors=True)
    parent = version_dir.parent
    while parent != data_dir and data_dir in parent.parents:
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break
        parent = parent.parent


@dataclasses.dataclass(frozen=True)
class Format:
    """A data format a user points ``data.name`` at, ``PREFIX:PATH``: its config section (the
    ``data.*`` keys it takes beside the shared ones) and ``prepare(name, data_dir, **settings)``,
    which returns its TFDS builder, prepared (with :func:`prepared`); ``settings`` are the
    section's own fields that are set. ``path``: what follows the prefix, for messages
    (``DIR``, ``FILE.jsonl``); ``text``: it is tokenised at preparation (it then takes the
    run's ``negatives`` per example too)."""
    section: type
    prepare: Callable[..., Any]
    path: str = "PATH"
    text: bool = False
