"""Offline datasets through TFDS, deterministic step-indexed batches, in-step views."""

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from repr_jax import data
from repr_jax.data import BatchStream
from repr_jax.data.views import augment


def test_digits_real_data_fixed_split():
    ds = data.load("digits")
    sizes = {k: len(v["label"]) for k, v in ds.splits.items()}
    assert sizes == {"train": 1078, "validation": 359, "test": 360}
    assert ds.input_shape == (8, 8, 1) and ds.num_classes == 10
    x = ds.splits["train"]["x"]
    assert x.dtype == np.float32 and 0.0 <= x.min() and x.max() <= 1.0
    again = data.load("digits")
    np.testing.assert_array_equal(again.splits["test"]["x"], ds.splits["test"]["x"])


def test_mnist1d_generated_cached_and_rng_contained(mnist1d_small):
    np.random.seed(123)
    random.seed(123)
    expect_np, expect_py = np.random.rand(), random.random()
    np.random.seed(123)
    random.seed(123)
    ds = data.load("mnist1d", num_examples=500)  # generates: make_dataset reseeds global RNGs
    assert (np.random.rand(), random.random()) == (expect_np, expect_py)
    assert ds.input_shape == (40,) and {k: len(v["label"]) for k, v in ds.splits.items()} == {
        "train": 360, "validation": 40, "test": 100}
    assert mnist1d_small.splits["train"]["x"].shape == (720, 40)
    assert set(np.unique(mnist1d_small.splits["train"]["label"])) == set(range(10))


def test_preparing_a_built_in_dataset_says_one_true_line_and_loading_it_again_nothing(
        tmp_path, capfd):
    """No absl "Using custom data configuration" warning and no TFDS "Downloading ... downloaded"
    (nothing is downloaded): one line naming what is generated where, then silence."""
    import logging
    data.load("mnist1d", num_examples=120, data_dir=str(tmp_path))
    first = capfd.readouterr()
    assert first.out == ""
    assert first.err.splitlines() == [
        f"preparing mnist1d (n120_seed42) in {tmp_path}/mnist1d/n120_seed42/1.0.0 (generated here,"
        f" nothing downloaded)"]
    data.load("mnist1d", num_examples=120, data_dir=str(tmp_path))
    assert capfd.readouterr() == ("", "")
    assert logging.getLogger("absl").level != logging.ERROR  # restored after preparing


def test_latent_classes_positive_pairs_share_class():
    ds = data.load("latent_classes", num_examples=600)
    tr = ds.splits["train"]
    assert set(tr) == {"x", "x_pos", "label"} and tr["x"].shape == tr["x_pos"].shape == (420, 32)
    # Positives are closer to each other than to a random example of another class.
    d_pos = np.linalg.norm(tr["x"] - tr["x_pos"], axis=1).mean()
    other = np.roll(np.arange(420), 1)
    mask = tr["label"] != tr["label"][other]
    d_neg = np.linalg.norm(tr["x"][mask] - tr["x_pos"][other][mask], axis=1).mean()
    assert d_pos < 0.8 * d_neg


def test_user_tfds_dataset_from_data_dir(tmp_path):
    """A user's own TFDS dataset (array_record) is read through the same path, by name or by dir."""

    class MyImages(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                "image": tfds.features.Tensor(shape=(4, 4, 1), dtype=np.uint8),
                "label": tfds.features.ClassLabel(num_classes=3)}),
                supervised_keys=("image", "label"))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(60), "test": self._generate_examples(15)}

        def _generate_examples(self, n):
            for i in range(n):
                yield i, {"image": np.full((4, 4, 1), 17 * (i % 3), np.uint8), "label": i % 3}

    from repr_jax.data.prepare import no_gcs_metadata
    with no_gcs_metadata():  # the user's own preparation, without TFDS's empty tmp*tfds folder
        MyImages(data_dir=str(tmp_path), file_format="array_record").download_and_prepare()
    ds = data.load("my_images", data_dir=str(tmp_path))
    assert ds.num_classes == 3 and ds.input_shape == (4, 4, 1)
    assert len(ds.splits["train"]["label"]) + len(ds.splits["validation"]["label"]) == 60
    assert ds.splits["train"]["x"].max() <= 1.0  # uint8 scaled to [0, 1]
    by_dir = data.load(str(tmp_path / "my_images" / "1.0.0"))
    assert len(by_dir.splits["test"]["label"]) == 15
    with pytest.raises(ValueError, match="unknown dataset 'nope'.*built-in"):
        data.load("nope", data_dir=str(tmp_path))
    # A TFDS catalogue name never prepared here says how to prepare it (nothing is downloaded).
    with pytest.raises(ValueError, match=r"TFDS dataset 'mnist' is not prepared in data_dir=.*"
                                         r"tfds build mnist --data_dir DIR"):
        data.load("mnist", data_dir=str(tmp_path))
    # A damaged dataset_info.json is named in one line.
    info = tmp_path / "my_images" / "1.0.0" / "dataset_info.json"
    info.write_text("garbage{")
    with pytest.raises(ValueError, match=r"dataset_info.json \(or the files it lists\) cannot be "
                                         r"read as a prepared TFDS dataset") as e:
        data.load(str(info.parent))
    assert "\n" not in str(e.value)


def test_batches_are_a_pure_function_of_seed_and_step():
    arrays = {"x": np.arange(100, dtype=np.float32)[:, None], "label": np.arange(100)}
    a = BatchStream(arrays, batch_size=32, seed=7)
    b = BatchStream(arrays, batch_size=32, seed=7)
    for step in (5, 0, 3, 5):  # any order, fresh instance: same content
        np.testing.assert_array_equal(a.batch(step)["label"], b.batch(step)["label"])
    assert not np.array_equal(a.batch(0)["label"], BatchStream(arrays, batch_size=32,
                                                               seed=8).batch(0)["label"])
    # The stream is epoch-wise permutations: 100 consecutive positions cover each example once.
    stream = np.concatenate([a.indices(s) for s in range(25)])  # 800 = 8 epochs
    for e in range(8):
        assert sorted(stream[e * 100:(e + 1) * 100]) == list(range(100))


def test_process_slices_tile_the_global_batch():
    arrays = {"x": np.arange(50, dtype=np.float32), "label": np.arange(50)}
    s = BatchStream(arrays, batch_size=16, seed=0)
    parts = [s.batch(9, process_index=p, process_count=4)["label"] for p in range(4)]
    np.testing.assert_array_equal(np.concatenate(parts), s.batch(9)["label"])


def test_views_deterministic_shapes_and_identity():
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 40))
    k = jax.random.PRNGKey(1)
    opts = dict(shift=4, scale=0.2, noise=0.1, mask=0.25)
    v1, v2 = augment(k, x, **opts), augment(k, x, **opts)
    np.testing.assert_array_equal(v1, v2)
    assert v1.shape == x.shape and not np.allclose(v1, x)
    np.testing.assert_array_equal(augment(k, x), x)  # no options: identity
    masked = augment(k, jnp.ones((8, 40)), mask=0.25)
    assert np.all((masked == 0).sum(1) == 10)  # exactly one segment of round(0.25 * 40)
    shifted = augment(k, jnp.ones((8, 40)), shift=4)
    assert np.all((shifted == 0).sum(1) <= 4)
    img = jax.random.uniform(jax.random.PRNGKey(2), (4, 8, 8, 1))
    out = augment(k, img, crop_pad=2, flip=True)
    assert out.shape == img.shape
    with pytest.raises(ValueError, match="shift/mask need inputs"):
        augment(k, img, shift=2)


def test_explicit_default_size_reuses_the_predefined_config():
    a = data.load("latent_classes", num_examples=6000)  # the predefined config's size
    b = data.load("latent_classes")
    np.testing.assert_array_equal(a.splits["test"]["x"], b.splits["test"]["x"])
    m = data.load("latent_modalities", num_examples=600)
    assert m.splits["train"]["x_pos"].shape[1:] == (24,) and "teacher" in m.splits["train"]


def test_latent_topics_token_data():
    ds = data.load("latent_topics", num_examples=600, max_len=16)
    x = ds.splits["train"]["x"]
    assert x.dtype == np.int32 and x.shape[1] == 16 and ds.vocab[:5] == (
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    assert (x[:, 0] == 2).all() and ((x == 3).sum(1) == 1).all()  # [CLS] ... [SEP] [PAD]...
    assert ds.splits["train"]["x_pos"].shape == x.shape


WORDNET = "/usr/share/wordnet/data.noun"


@pytest.mark.skipif(not __import__("os").path.exists(WORDNET),
                    reason="WordNet 3.0 absent: apt-get install wordnet-base")
def test_wordnet_pairs_split_by_synset():
    from repr_jax.data.builders import read_wordnet
    synsets = read_wordnet()
    assert len(synsets) == 117_659 and sum(len(s["lemmas"]) >= 2 for s in synsets) == 53_811
    ds = data.load("wordnet", pairs="synonyms", max_len=24)
    sizes = {k: len(v["label"]) for k, v in ds.splits.items()}
    assert sum(sizes.values()) == 53_811 and ds.num_classes == 45 and len(ds.vocab) == 261
    assert 0.08 < sizes["test"] / 53_811 < 0.12  # about 10% of synsets held out


def test_wordnet_missing_names_the_package(tmp_path):
    from repr_jax.data.builders import read_wordnet
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        read_wordnet(str(tmp_path))


@pytest.mark.slow
def test_processes_preparing_one_dataset_at_once_all_read_it(tmp_path):
    """Concurrent runs (or test workers) on one data dir: one prepares, the others wait for it."""
    import subprocess
    import sys
    code = ("import sys; from repr_jax import data; "
            "d = data.load('mnist1d', num_examples=600, data_dir=sys.argv[1]); "
            "print(len(d.splits['train']['label']))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
             for _ in range(3)]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len({o[-1] for o in outs}) == 1


def test_shapes_are_made_from_their_index_and_their_colour_says_nothing(tmp_path):
    from repr_jax.data.builders import SHAPES, shapes_example
    a, la = shapes_example(7, seed=3, size=24)
    b, lb = shapes_example(7, seed=3, size=24)
    assert a.dtype == np.uint8 and a.shape == (24, 24, 3) and np.array_equal(a, b) and la == lb
    assert not np.array_equal(a, shapes_example(8, seed=3, size=24)[0])
    ds = data.load("shapes", data_dir=str(tmp_path), num_examples=600, image_size=16)
    assert ds.input_shape == (16, 16, 3) and ds.num_classes == len(SHAPES)
    assert len(ds.splits["test"]["label"]) == 100
    y = np.concatenate([s["label"] for s in ds.splits.values()])
    assert len(np.bincount(y)) == 8 and np.bincount(y).min() > 40  # every shape, balanced
    # A nearest-centroid classifier on the mean colour is near chance: colour is a nuisance.
    train, test = ds.splits["train"], ds.splits["test"]
    colour = {k: v["x"].mean(axis=(1, 2)) for k, v in (("train", train), ("test", test))}
    centroids = np.stack([colour["train"][train["label"] == c].mean(0) for c in range(8)])
    pred = np.argmin(((colour["test"][:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (pred == test["label"]).mean() < 0.3
