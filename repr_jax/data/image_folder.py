"""A user's folder of images as a TFDS dataset: ``data.name=imagefolder:/path/to/root``.

The root holds one subfolder per class (``root/<class>/<image>``), or ``train/`` (and optionally
``validation/``, ``test/``) folders that each hold the class subfolders. Any image PIL reads is
taken; each becomes RGB, its shorter side resized to ``image_size`` and centre-cropped to a square
(torchvision's ``Resize`` + ``CenterCrop``). It is prepared once, with a progress bar, into
array_record files under the data dir (one prepared copy per root and size); files PIL cannot read
are skipped and listed in one warning. Without a ``test/`` folder, a fixed 20% of each class (by a
hash of the file's path) is the test split.
"""

from __future__ import annotations

import hashlib
import re
import warnings
import zlib
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from repr_jax.config import ArrayData, config, static
from repr_jax.data.prepare import Format, prepared

DEFAULT_SIZE = 64
TEST_FRACTION = 0.2
_SPLIT_DIRS = ("train", "validation", "test")


class ImageFolderConfig(tfds.core.BuilderConfig):
    def __init__(self, *, root: str = "", image_size: int = DEFAULT_SIZE, **kwargs):
        super().__init__(**kwargs)
        self.root, self.image_size = root, image_size


def _layout(root: str | Path) -> tuple[Path, dict[str, Path], list[str]]:
    """``(root, {split: its folder}, classes)``, from the folder names alone (cheap: no file is
    listed); a missing folder, or one without class subfolders, is a one-line ValueError."""
    if not str(root).strip():
        raise ValueError("data.name=imagefolder: needs a folder after the colon, e.g. "
                         "imagefolder:/path/to/images")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ValueError(f"data.name=imagefolder:{root}: no such folder")
    split_roots = {s: root / s for s in _SPLIT_DIRS if (root / s).is_dir()}
    if split_roots and "train" not in split_roots:
        raise ValueError(f"imagefolder {root} has {sorted(split_roots)} but no train/ folder")
    class_root = split_roots.get("train", root)
    classes = sorted(p.name for p in class_root.iterdir() if p.is_dir()
                     and not p.name.startswith("."))
    if not classes:
        raise ValueError(f"imagefolder {class_root} has no class subfolders (expected "
                         f"{class_root}/<class>/<image files>)")
    if len(classes) < 2:
        raise ValueError(f"imagefolder {class_root} has one class folder ({classes[0]}/): the "
                         f"probes, kNN and clustering need at least two classes")
    return root, split_roots, classes


@config
class ImageFolderData(ArrayData):
    """``data.name=imagefolder:DIR``: a user's class-per-subfolder images, at one size."""
    image_size: int = static(0, ">=0", "images resized (shorter side) and centre-cropped to this "
                                       "square size (0 = 64)")


def prepare(name: str, data_dir: str, *, image_size: int = 0):
    """The prepared TFDS builder of ``imagefolder:DIR`` (:class:`ImageFolder`)."""
    root = name[len("imagefolder:"):]
    check_layout(root)  # a missing or empty folder: one line, before any lock
    config = config_for(root, image_size)
    return prepared(f"imagefolder.{config.name}",
                    lambda: ImageFolder(data_dir=data_dir, config=config), data_dir)


FORMAT = Format(ImageFolderData, prepare, path="DIR")


def check_layout(root: str | Path) -> None:
    """Refuses (one line) a missing folder or one without class subfolders."""
    _layout(root)


def list_images(root: str | Path) -> tuple[list[str], dict[str, list[tuple[Path, str]]]]:
    """``(classes, {split: [(file, class)]})`` of an image folder; a missing folder, one without
    class subfolders, or one without files is a one-line ValueError."""
    root, split_roots, classes = _layout(root)
    files: dict[str, list[tuple[Path, str]]] = {}
    for split, base in (split_roots or {"train": root}).items():
        files[split] = [(f, c) for c in classes if (base / c).is_dir()
                        for f in sorted((base / c).rglob("*"))
                        if f.is_file() and not f.name.startswith(".")]
    if not split_roots or "test" not in split_roots:  # a fixed share of each class is the test
        pool = files.pop("train")
        is_test = [zlib.crc32(str(f.relative_to(root)).encode()) % 1000 < TEST_FRACTION * 1000
                   for f, _ in pool]
        files["train"] = [x for x, t in zip(pool, is_test) if not t]
        files["test"] = [x for x, t in zip(pool, is_test) if t]
    if not files["train"] or not files["test"]:
        total = sum(len(v) for v in files.values())
        raise ValueError(f"imagefolder {root}: {total} image files in {len(classes)} class "
                         f"folders, too few for a train and a test split")
    return classes, files


def config_for(root: str | Path, image_size: int = 0) -> ImageFolderConfig:
    """The builder config of ``root`` at ``image_size``: its name tells roots and sizes apart."""
    root = Path(root).expanduser().absolute()
    size = image_size or DEFAULT_SIZE
    slug = re.sub(r"[^a-z0-9]+", "_", root.name.lower()).strip("_") or "images"
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:8]
    return ImageFolderConfig(name=f"{slug}_{digest}_{size}px", root=str(root), image_size=size,
                             description=f"the images under {root}, {size}x{size}")


def load_image(path: Path, size: int) -> np.ndarray:
    """RGB uint8 ``[size, size, 3]``: shorter side resized to ``size`` (bilinear), centre crop."""
    from PIL import Image
    with Image.open(path) as img:
        img = img.convert("RGB")
        w, h = img.size
        scale = size / min(w, h)
        img = img.resize((max(size, round(w * scale)), max(size, round(h * scale))),
                         Image.BILINEAR)
        w, h = img.size
        left, top = (w - size) // 2, (h - size) // 2
        return np.asarray(img.crop((left, top, left + size, top + size)), np.uint8)


class ImageFolder(tfds.core.GeneratorBasedBuilder):
    """A folder of class subfolders of images (see the module docstring)."""

    VERSION = tfds.core.Version("2.0.0")
    RELEASE_NOTES = {"1.0.0": "First release.", "2.0.0": "Images stored as PNG."}
    BUILDER_CONFIGS = [ImageFolderConfig(name="unset")]

    def __init__(self, **kwargs):
        kwargs.setdefault("file_format", "array_record")
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        c = self.builder_config
        classes = _layout(c.root)[2] if c.root else ["none"]
        s = c.image_size
        return tfds.core.DatasetInfo(
            builder=self, description=c.description,
            features=tfds.features.FeaturesDict({
                "x": tfds.features.Image(shape=(s, s, 3), encoding_format="png"),
                "label": tfds.features.ClassLabel(names=classes)}),
            supervised_keys=("x", "label"),
            metadata=tfds.core.MetadataDict(root=c.root))

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing is downloaded
        classes, files = list_images(self.builder_config.root)
        return {split: self._generate_examples(split, items, classes)
                for split, items in files.items()}

    def _generate_examples(self, split: str, items, classes):
        from PIL import Image
        from tqdm.auto import tqdm
        index = {c: i for i, c in enumerate(classes)}
        skipped, unread = [], {c for _, c in items}  # classes with no image read yet
        for n, (path, cls) in enumerate(tqdm(items, desc=f"imagefolder: {split}", unit="image",
                                              leave=False, dynamic_ncols=True)):
            try:
                image = load_image(path, self.builder_config.image_size)
            except Exception as e:  # noqa: BLE001 - PIL raises many kinds for a bad file
                skipped.append(f"{path} ({type(e).__name__})")
                continue
            unread.discard(cls)
            yield n, {"x": Image.fromarray(image), "label": index[cls]}  # PNG-encoded by PIL
        if len(skipped) == len(items):  # else TFDS fails with "No examples were yielded"
            raise ValueError(f"imagefolder: none of the {len(items)} files of split {split} is "
                             f"an image PIL can read (e.g. {skipped[0]})")
        if split == "train" and unread:  # it would train and report on the other classes
            raise ValueError(f"imagefolder: no readable image in class folder(s) "
                             f"{', '.join(sorted(unread))} of split train (e.g. {skipped[0]})")
        if skipped:
            warnings.warn(f"imagefolder: skipped {len(skipped)} unreadable file(s) of split "
                          f"{split}: " + "; ".join(skipped[:10])
                          + (f"; and {len(skipped) - 10} more" if len(skipped) > 10 else ""),
                          stacklevel=2)
