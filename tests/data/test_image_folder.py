"""A user's own image folder (data.name=imagefolder:DIR): prepared once through a real TFDS builder,
read back as images, trained on end to end; an empty folder and a corrupt file get one line."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

from repr_jax import data
from repr_jax.data import image_folder

RNG = np.random.default_rng(0)


def _make_folder(root, per_class=40, size=(20, 14), classes=("red", "green", "blue")):
    """PNG images whose class is their dominant colour, of a non-square size."""
    from PIL import Image
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = RNG.integers(0, 90, (size[1], size[0], 3))
            pixels[..., c] += 160
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i:03d}.png")
    return root


def test_an_image_folder_is_prepared_and_read_as_images(tmp_path):
    root = _make_folder(tmp_path / "photos")
    (root / "red" / "broken.png").write_bytes(b"not an image at all")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = data.load(f"imagefolder:{root}", data_dir=str(tmp_path / "tfds"), image_size=8)
    notes = [str(w.message) for w in caught if "unreadable" in str(w.message)]
    assert len(notes) == 1 and "broken.png (UnidentifiedImageError)" in notes[0]
    assert ds.input_shape == (8, 8, 3) and ds.num_classes == 3
    n = sum(len(s["label"]) for s in ds.splits.values())
    assert n == 120  # every readable image, in exactly one split
    assert 10 <= len(ds.splits["test"]["label"]) <= 40
    x, y = ds.splits["train"]["x"], ds.splits["train"]["label"]
    assert x.dtype == np.float32 and 0.0 <= x.min() and x.max() <= 1.0
    # The class is the dominant channel: the labels came through with their images (class ids
    # follow the sorted folder names: blue, green, red).
    channel_to_label = np.array([2, 1, 0])  # red, green, blue
    assert (channel_to_label[x.mean(axis=(1, 2)).argmax(-1)] == y).all()
    again = data.load(f"imagefolder:{root}", data_dir=str(tmp_path / "tfds"), image_size=8)
    np.testing.assert_array_equal(again.splits["train"]["x"], x)  # read back, not re-made


def test_explicit_split_folders_are_kept(tmp_path):
    root = tmp_path / "ds"
    _make_folder(root / "train", per_class=6)
    _make_folder(root / "test", per_class=2)
    classes, files = image_folder.list_images(root)
    assert classes == ["blue", "green", "red"]
    assert {k: len(v) for k, v in files.items()} == {"train": 18, "test": 6}


@pytest.mark.parametrize("layout, message", [
    ("missing", "no such folder"),
    ("empty", "has no class subfolders"),
    ("no_files", "0 image files in 2 class folders, too few for a train and a test split"),
    ("no_train", "has ['test'] but no train/ folder"),
])
def test_bad_folders_are_one_line(tmp_path, layout, message):
    root = tmp_path / "root"
    if layout != "missing":
        root.mkdir()
    if layout == "no_files":
        (root / "a").mkdir()
        (root / "b").mkdir()
    if layout == "no_train":
        (root / "test" / "a").mkdir(parents=True)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")) as e:
        data.load(f"imagefolder:{root}", data_dir=str(tmp_path / "tfds"))
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_repr_jax_trains_and_evaluates_on_an_image_folder(tmp_path):
    root = _make_folder(tmp_path / "photos", per_class=70)
    r = subprocess.run(
        [sys.executable, "-m", "repr_jax.cli", "train", "--workdir", str(tmp_path / "run"),
         "--no-progress", "--set", f"data.name=imagefolder:{root}", "--set", "data.image_size=16",
         "--set", f"data.data_dir={tmp_path / 'tfds'}", "--set", "encoder.name=resnet",
         "--set", "data.views.preset=simclr", "--set", "data.views.shift=0",
         "--set", "data.views.mask=0.0", "--set", "train.steps=6", "--set", "train.batch_size=32",
         "--set", "eval.evaluators=('knn',)"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "knn/accuracy" in r.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([sys.executable, "-m", "repr_jax.cli", "train", "--workdir",
                        str(tmp_path / "run2"), "--set", f"data.name=imagefolder:{empty}"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "has no class subfolders" in r.stderr
    assert "Traceback" not in r.stderr


def test_folders_that_cannot_make_a_dataset_are_one_line_and_leave_nothing(tmp_path,
                                                                          monkeypatch):
    """No path, one class, no readable image, a class whose images are all unreadable: each a
    one-line error before training, and no half-prepared dataset left in the data dir."""
    data_dir = tmp_path / "tfds"
    monkeypatch.setenv("REPR_JAX_DATA_DIR", str(data_dir))
    with pytest.raises(ValueError, match="imagefolder: needs a folder after the colon"):
        data.load("imagefolder:")
    one = _make_folder(tmp_path / "one", per_class=10, classes=("red",))
    with pytest.raises(ValueError, match=r"has one class folder \(red/\)"):
        data.load(f"imagefolder:{one}")
    junk = tmp_path / "junk"
    for name in ("a", "b"):
        (junk / name).mkdir(parents=True)
        for i in range(12):
            (junk / name / f"{i}.png").write_bytes(b"not an image")
    with pytest.raises(ValueError, match="none of the .* files of split .* is an image PIL can "
                                         "read"):
        data.load(f"imagefolder:{junk}")
    half = _make_folder(tmp_path / "half", per_class=15, classes=("red", "green"))
    for f in (half / "green").iterdir():
        f.write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"no readable image in class folder\(s\) green"):
        data.load(f"imagefolder:{half}")
    left = [p for p in (data_dir / "image_folder").iterdir() if not p.name.startswith(".")]
    assert left == [], left
