"""A data format written the way a contributor adds one: this file (its config section, a TFDS
builder and how it is prepared) plus one line in ``repr_jax.data.formats.FORMATS`` — here the
test's ``monkeypatch.setitem``. ``npz:FILE``: arrays ``x [N, ...]`` and ``label [N]`` saved with
``numpy.savez``; a fixed share of them (by index) is the test split."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from repr_jax import files
from repr_jax.config import DataConfig, config, static
from repr_jax.data.prepare import Format, prepared


@config
class NpzData(DataConfig):
    test_fraction: float = static(0.2, "[0,1)", "share of the rows (every k-th) held out as test")


class NpzConfig(tfds.core.BuilderConfig):
    def __init__(self, *, path: str = "", test_fraction: float = 0.2, **kwargs):
        super().__init__(**kwargs)
        self.path, self.test_fraction = path, test_fraction


class NpzArrays(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [NpzConfig(name="unset")]

    def __init__(self, **kwargs):
        kwargs.setdefault("file_format", "array_record")
        super().__init__(**kwargs)

    def _arrays(self):
        with np.load(self.builder_config.path) as z:
            return np.asarray(z["x"], np.float32), np.asarray(z["label"], np.int64)

    def _info(self):
        x, y = self._arrays()
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "x": tfds.features.Tensor(shape=x.shape[1:], dtype=np.float32),
            "label": tfds.features.ClassLabel(num_classes=int(y.max()) + 1)}),
            supervised_keys=("x", "label"))

    def _split_generators(self, dl_manager):
        del dl_manager
        x, y = self._arrays()
        every = max(2, round(1 / self.builder_config.test_fraction))
        test = np.arange(len(y)) % every == 0
        return {"train": self._generate_examples(x[~test], y[~test]),
                "test": self._generate_examples(x[test], y[test])}

    def _generate_examples(self, x, y):
        for i in range(len(y)):
            yield i, {"x": x[i], "label": int(y[i])}


def prepare(name: str, data_dir: str, *, test_fraction: float = 0.2):
    path = Path(name[len("npz:"):]).absolute()
    if not path.is_file():
        raise ValueError(f"data.name={name}: no such file")
    stamp = files.version_stamp([path])  # an edited file is prepared again
    digest = hashlib.sha1(f"{stamp}|{test_fraction}".encode()).hexdigest()[:10]
    config = NpzConfig(name=f"npz_{digest}", path=str(path), test_fraction=test_fraction)
    return prepared(f"npz.{config.name}", lambda: NpzArrays(data_dir=data_dir, config=config),
                    data_dir)


FORMAT = Format(NpzData, prepare, path="FILE.npz")
