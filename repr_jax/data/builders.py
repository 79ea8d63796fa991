"""TFDS builders for the datasets that work offline (array_record format: no TensorFlow needed).

Every built-in dataset is a real ``tfds.core.GeneratorBasedBuilder``: it is prepared once into a TFDS
data dir and then read back through ``builder.as_data_source(split)`` — the same path that reads a
user's own TFDS dataset from a data dir (see :func:`repr_jax.data.load`).

* ``digits``: scikit-learn's bundled 8×8 handwritten digits (1,797 real images), fixed 60/20/20 split.
* ``mnist1d``: MNIST-1D (Greydanus 2020) *generated* locally with ``mnist1d.data.make_dataset`` — never
  its ``get_dataset``, which downloads. 1-D signals of length 40, 10 classes.
* ``latent_classes``: synthetic data with known latent structure (Arora et al. 2019): each example is
  drawn from one of C latent classes, and ``x_pos`` is an independent draw from the same class, so a
  positive pair shares its class by construction.
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from repr_jax.config import ArrayData, DataConfig, config, static
from repr_jax.data.tokenizer import TextData

VAL_FRACTION = 0.1  # of the generated training examples, held out for model selection in probes


# Each built-in dataset's config section (its ``SECTION``): the ``data.*`` keys it takes, 0 or ''
# meaning the dataset's own default.

@config
class FixedData(ArrayData):
    """A dataset with nothing to choose (``digits``: the 1,797 images, one fixed split)."""


@config
class GeneratedData(ArrayData):
    """A generated dataset (``mnist1d``): how many examples it has."""
    num_examples: int = static(0, ">=0", "examples in total (0 = the dataset's default)")


@config
class ShapesData(GeneratedData):
    """``shapes``: how many images, and their side."""
    image_size: int = static(0, ">=0", "image side in pixels (0 = 32)")


@config
class LatentData(GeneratedData):
    """``latent_classes`` / ``latent_modalities``: examples and latent classes."""
    num_classes: int = static(0, ">=0", "latent classes (0 = 10)")


@config
class LatentTopicsData(DataConfig):
    """``latent_topics``: sentences of token ids drawn from latent topics (no views)."""
    num_examples: int = static(0, ">=0", "sentences in total (0 = 6,000)")
    num_classes: int = static(0, ">=0", "latent topics (0 = 10)")
    max_len: int = static(0, ">=0", "tokens per sentence (0 = 32)")


@config
class WordNetData(TextData):
    """``wordnet``: which pairs of a synset, tokenised as text."""
    pairs: str = static("", doc="definition_lemmas | example_definition | synonyms "
                                "('' = definition_lemmas)")


def _features(shapes: dict[str, tuple[int, ...]], num_classes: int, dtype=np.float32):
    """``x`` (and the other arrays named in ``shapes``) plus an integer ``label``."""
    feats = {k: tfds.features.Tensor(shape=v, dtype=dtype) for k, v in shapes.items()}
    feats["label"] = tfds.features.ClassLabel(num_classes=num_classes)
    return tfds.features.FeaturesDict(feats)


def _split_indices(n: int, fractions: tuple[float, ...], seed: int) -> list[np.ndarray]:
    """A fixed permutation of ``range(n)`` cut into consecutive parts of the given fractions."""
    perm = np.random.default_rng(seed).permutation(n)
    cuts = np.cumsum([int(round(f * n)) for f in fractions[:-1]])
    return np.split(perm, cuts)


class _ArraysBuilder(tfds.core.GeneratorBasedBuilder):
    """Writes in-memory arrays (made by ``_make_arrays``) as array_record splits."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First release."}
    _SHAPE: tuple[int, ...] = ()

    def __init__(self, **kwargs):
        kwargs.setdefault("file_format", "array_record")
        super().__init__(**kwargs)

    def _num_classes(self) -> int:
        return 10

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        return {"x": self._SHAPE}

    _DTYPE = np.float32

    def _metadata(self) -> dict | None:
        return None

    def _info(self) -> tfds.core.DatasetInfo:
        meta = self._metadata()
        return tfds.core.DatasetInfo(
            builder=self, description=self.__doc__,
            features=_features(self._shapes(), self._num_classes(), self._DTYPE),
            supervised_keys=("x", "label"),
            metadata=tfds.core.MetadataDict(meta) if meta else None)

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing is downloaded
        splits = self._make_arrays()
        return {name: self._generate_examples(arrays) for name, arrays in splits.items()}

    def _generate_examples(self, arrays):
        for i in range(len(arrays["label"])):
            yield i, {k: v[i] for k, v in arrays.items()}

    def _make_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        raise NotImplementedError


class Digits(_ArraysBuilder):
    """scikit-learn's 8×8 handwritten digits (UCI), pixel values scaled to [0, 1]."""

    SECTION = FixedData

    _SHAPE = (8, 8, 1)

    def _make_arrays(self):
        from sklearn.datasets import load_digits  # bundled with scikit-learn: no download
        d = load_digits()
        x = (d.images[..., None] / 16.0).astype(np.float32)
        y = d.target.astype(np.int64)
        parts = _split_indices(len(y), (0.6, 0.2, 0.2), seed=0)
        return {name: {"x": x[idx], "label": y[idx]}
                for name, idx in zip(("train", "validation", "test"), parts)}


class Mnist1dConfig(tfds.core.BuilderConfig):
    def __init__(self, *, num_examples: int = 5000, seed: int = 42, **kwargs):
        super().__init__(name=f"n{num_examples}_seed{seed}", **kwargs)
        self.num_examples = num_examples
        self.seed = seed


class Mnist1d(_ArraysBuilder):
    """MNIST-1D (Greydanus 2020), generated locally; 80/20 train/test as the reference, 10% of train
    held out as validation."""

    SECTION = GeneratedData

    _SHAPE = (40,)
    BUILDER_CONFIGS = [Mnist1dConfig()]

    def _make_arrays(self):
        # reseeds the global RNGs: the caller restores them
        d = _mnist1d(self.builder_config.num_examples, self.builder_config.seed)
        x, y = d["x"].astype(np.float32), d["y"].astype(np.int64)
        n_val = int(round(VAL_FRACTION * len(y)))
        return {"train": {"x": x[n_val:], "label": y[n_val:]},
                "validation": {"x": x[:n_val], "label": y[:n_val]},
                "test": {"x": d["x_test"].astype(np.float32), "label": d["y_test"].astype(np.int64)}}


MNIST1D_SHIFT = dict(corr_noise_scale=0.4, iid_noise_scale=0.06, shear_scale=1.0)


def _mnist1d(num_examples: int, seed: int, **generator_args) -> dict[str, np.ndarray]:
    """``mnist1d.data.make_dataset`` with its default arguments, ``generator_args`` changed
    (unknown names refused). It reseeds numpy's and Python's global RNGs."""
    from mnist1d.data import get_dataset_args, make_dataset
    args = get_dataset_args()
    for k, v in generator_args.items():
        if not hasattr(args, k):
            raise ValueError(f"mnist1d has no generator argument {k!r}; choose from "
                             f"{', '.join(sorted(vars(args)))}")
        setattr(args, k, v)
    args.num_samples, args.seed = num_examples, seed
    return make_dataset(args)


def mnist1d_shifted(num_examples: int = 2000, *, seed: int = 1, **generator_args
                    ) -> dict[str, np.ndarray]:
    """A distribution-shifted MNIST-1D set ``{"x" [N, 40], "label" [N]}``: the same ten digit
    templates drawn through the generator with different arguments (default
    :data:`MNIST1D_SHIFT`: 1.6x the correlated noise, 3x the i.i.d. noise, 1.33x the shear);
    ``seed`` differs from the training data's. The global RNGs are left as they were."""
    import random
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = _mnist1d(num_examples, seed, **(generator_args or MNIST1D_SHIFT))
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return {"x": np.concatenate([d["x"], d["x_test"]]).astype(np.float32),
            "label": np.concatenate([d["y"], d["y_test"]]).astype(np.int64)}


class LatentClassesConfig(tfds.core.BuilderConfig):
    def __init__(self, *, num_examples: int = 6000, num_classes: int = 10, dim: int = 32,
                 latent_dim: int = 8, noise: float = 1.0, seed: int = 0, **kwargs):
        super().__init__(name=f"n{num_examples}_c{num_classes}_d{dim}_k{latent_dim}"
                              f"_noise{noise:g}_seed{seed}", **kwargs)
        self.num_examples, self.num_classes, self.dim = num_examples, num_classes, dim
        self.latent_dim, self.noise, self.seed = latent_dim, noise, seed


def latent_class_arrays(*, num_examples: int, num_classes: int, dim: int, latent_dim: int,
                        noise: float, seed: int, second_dim: int | None = None
                        ) -> dict[str, np.ndarray]:
    """Examples from C latent classes, ``x = tanh(W z)`` with ``z = mu_c + noise * eps``.

    Class means ``mu_c ~ N(0, I_k)``, ``W`` a fixed random ``dim × k`` map with unit-variance rows, and
    the class ``c`` is the ground truth (the Bayes accuracy falls as ``noise`` grows).

    ``second_dim=None`` (class pairing): ``x_pos`` is an independent draw from the same class (Arora et
    al. 2019's positive pairs). ``second_dim=d2`` (instance pairing, two modalities): ``x_pos =
    tanh(W2 z) + 0.05 eps`` sees the *same* latent ``z`` through a second map ``W2`` (``d2 × k``), and
    ``teacher = teacher_pos = z`` is an oracle teacher's embedding for distillation.
    """
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(num_classes, latent_dim))
    w = rng.normal(size=(dim, latent_dim)) / np.sqrt(latent_dim)
    y = rng.integers(0, num_classes, size=num_examples)

    def draw_z():
        return mu[y] + noise * rng.normal(size=(num_examples, latent_dim))

    z = draw_z()
    out = {"x": np.tanh(z @ w.T).astype(np.float32), "label": y.astype(np.int64)}
    if second_dim is None:
        out["x_pos"] = np.tanh(draw_z() @ w.T).astype(np.float32)
    else:
        w2 = rng.normal(size=(second_dim, latent_dim)) / np.sqrt(latent_dim)
        out["x_pos"] = (np.tanh(z @ w2.T) + 0.05 * rng.normal(size=(num_examples, second_dim))
                        ).astype(np.float32)
        out["teacher"] = out["teacher_pos"] = z.astype(np.float32)
    return out


class LatentClasses(_ArraysBuilder):
    """Synthetic examples from latent classes with positive pairs drawn from the same class."""

    SECTION = LatentData

    BUILDER_CONFIGS = [LatentClassesConfig()]

    def _shapes(self):
        return {"x": (self.builder_config.dim,), "x_pos": (self.builder_config.dim,)}

    def _num_classes(self) -> int:
        return self.builder_config.num_classes

    def _arrays(self):
        c = self.builder_config
        return latent_class_arrays(num_examples=c.num_examples, num_classes=c.num_classes,
                                   dim=c.dim, latent_dim=c.latent_dim, noise=c.noise, seed=c.seed)

    def _make_arrays(self):
        c = self.builder_config
        arrays = self._arrays()
        parts = _split_indices(c.num_examples, (0.7, 0.1, 0.2), seed=c.seed + 1)
        return {name: {k: v[idx] for k, v in arrays.items()}
                for name, idx in zip(("train", "validation", "test"), parts)}


class LatentModalities(LatentClasses):
    """Two modalities of one latent instance: ``x`` (32-d) and ``x_pos`` (24-d) see the same latent
    through different maps; ``teacher``/``teacher_pos`` hold the latent (an oracle teacher)."""

    SECOND_DIM = 24

    def _shapes(self):
        k = self.builder_config.latent_dim
        return {"x": (self.builder_config.dim,), "x_pos": (self.SECOND_DIM,), "teacher": (k,),
                "teacher_pos": (k,)}

    def _arrays(self):
        c = self.builder_config
        return latent_class_arrays(num_examples=c.num_examples, num_classes=c.num_classes,
                                   dim=c.dim, latent_dim=c.latent_dim, noise=c.noise, seed=c.seed,
                                   second_dim=self.SECOND_DIM)


SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4, BERT's names


class LatentTopicsConfig(tfds.core.BuilderConfig):
    def __init__(self, *, num_examples: int = 6000, num_classes: int = 10, vocab_words: int = 200,
                 max_len: int = 32, seed: int = 0, **kwargs):
        super().__init__(name=f"n{num_examples}_c{num_classes}_v{vocab_words}_t{max_len}"
                              f"_seed{seed}", **kwargs)
        self.num_examples, self.num_classes, self.vocab_words = num_examples, num_classes, vocab_words
        self.max_len, self.seed = max_len, seed


def latent_topic_arrays(*, num_examples: int, num_classes: int, vocab_words: int, max_len: int,
                        seed: int) -> dict[str, np.ndarray]:
    """Token sequences from latent topics: ``[CLS] w ... w [SEP] [PAD] ...`` of length ``max_len``.

    Each topic owns ``vocab_words // num_classes`` topical words; a sentence of ``U[6, max_len - 2]``
    words draws each word from its topic's words with probability 0.4, else from a Zipfian
    background over the whole vocabulary. ``x_pos`` is another sentence of the same topic (a
    paraphrase in topic), ``label`` the topic.
    """
    rng = np.random.default_rng(seed)
    n_special = len(SPECIAL_TOKENS)
    words = np.arange(vocab_words) + n_special
    per_topic = vocab_words // num_classes
    topical = rng.permutation(words)[: per_topic * num_classes].reshape(num_classes, per_topic)
    zipf = 1.0 / np.arange(1, vocab_words + 1)
    background = zipf / zipf.sum()
    y = rng.integers(0, num_classes, size=num_examples)

    def sentences():
        out = np.zeros((num_examples, max_len), np.int32)
        lengths = rng.integers(6, max_len - 1, size=num_examples)
        for i, (topic, n) in enumerate(zip(y, lengths)):
            from_topic = rng.random(n) < 0.4
            toks = np.where(from_topic, rng.choice(topical[topic], size=n),
                            rng.choice(words, size=n, p=background))
            out[i, 0], out[i, 1:n + 1], out[i, n + 1] = 2, toks, 3
        return out

    return {"x": sentences(), "x_pos": sentences(), "label": y.astype(np.int64)}


class LatentTopics(_ArraysBuilder):
    """Synthetic sentences (token ids) from latent topics, with same-topic positive pairs; the
    vocabulary (BERT-style special tokens, then w0, w1, ...) is in the dataset's metadata."""

    SECTION = LatentTopicsData

    BUILDER_CONFIGS = [LatentTopicsConfig()]
    _DTYPE = np.int32

    def _shapes(self):
        t = self.builder_config.max_len
        return {"x": (t,), "x_pos": (t,)}

    def _num_classes(self) -> int:
        return self.builder_config.num_classes

    def _metadata(self):
        return {"vocab": list(SPECIAL_TOKENS)
                + [f"w{i}" for i in range(self.builder_config.vocab_words)]}

    def _make_arrays(self):
        c = self.builder_config
        arrays = latent_topic_arrays(num_examples=c.num_examples, num_classes=c.num_classes,
                                     vocab_words=c.vocab_words, max_len=c.max_len, seed=c.seed)
        parts = _split_indices(c.num_examples, (0.7, 0.1, 0.2), seed=c.seed + 1)
        return {name: {k: v[idx] for k, v in arrays.items()}
                for name, idx in zip(("train", "validation", "test"), parts)}


WORDNET_DIR = "/usr/share/wordnet"
WORDNET_PAIRS = ("definition_lemmas", "example_definition", "synonyms")
WORDNET_LEXFILES = 45  # lexicographer files (noun.animal, verb.motion, ...): the class label


def read_wordnet(wordnet_dir: str = WORDNET_DIR) -> list[dict]:
    """Parses WordNet 3.0's ``data.{noun,verb,adj,adv}`` into synsets: ``offset``, ``pos``,
    ``lexfile`` (0-44), ``lemmas``, ``definition`` and quoted ``examples``."""
    import re
    from pathlib import Path
    root = Path(wordnet_dir)
    files = [root / f"data.{pos}" for pos in ("noun", "verb", "adj", "adv")]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(
            f"WordNet 3.0 database not found ({', '.join(missing)}): install Debian's "
            f"wordnet-base (apt-get install wordnet-base) or point wordnet_dir at its files")
    synsets = []
    for f in files:
        for line in f.read_text(encoding="latin-1").splitlines():
            if not line or line.startswith("  "):
                continue  # license header
            head, _, gloss = line.partition(" | ")
            fields = head.split()
            n_words = int(fields[3], 16)
            lemmas = [re.sub(r"\(.*\)$", "", w).replace("_", " ")
                      for w in fields[4:4 + 2 * n_words:2]]
            definition = gloss.split('; "')[0].strip().rstrip(";").strip()
            synsets.append(dict(offset=f"{fields[0]}{fields[2]}", pos=fields[2],
                                lexfile=int(fields[1]), lemmas=lemmas, definition=definition,
                                examples=re.findall(r'"([^"]+)"', gloss)))
    return synsets


class WordNetConfig(tfds.core.BuilderConfig):
    def __init__(self, *, pairs: str = "definition_lemmas", wordnet_dir: str = WORDNET_DIR,
                 **kwargs):
        if pairs not in WORDNET_PAIRS:
            raise ValueError(f"wordnet pairs {pairs!r}; choose from: {', '.join(WORDNET_PAIRS)}")
        super().__init__(name=pairs, **kwargs)
        self.pairs, self.wordnet_dir = pairs, wordnet_dir


class WordNet(tfds.core.GeneratorBasedBuilder):
    """WordNet 3.0 text pairs, split by synset (80/10/10, by a hash of the synset id):
    ``definition_lemmas`` (definition ↔ its lemmas), ``example_definition`` (a usage example ↔ the
    definition) or ``synonyms`` (two lemmas of one synset). ``x``/``x_pos`` are strings, ``label``
    the synset's lexicographer file (45 classes, e.g. noun.animal)."""

    SECTION = WordNetData

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [WordNetConfig(pairs=p) for p in WORDNET_PAIRS]

    def __init__(self, **kwargs):
        kwargs.setdefault("file_format", "array_record")
        super().__init__(**kwargs)

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self, description=self.__doc__,
            features=tfds.features.FeaturesDict({
                "x": tfds.features.Text(), "x_pos": tfds.features.Text(),
                "label": tfds.features.ClassLabel(num_classes=WORDNET_LEXFILES)}),
            supervised_keys=("x", "label"))

    def _split_generators(self, dl_manager):
        del dl_manager
        import zlib
        synsets = read_wordnet(self.builder_config.wordnet_dir)
        splits = {"train": [], "validation": [], "test": []}
        for s in synsets:
            bucket = zlib.crc32(s["offset"].encode()) % 10
            splits["test" if bucket == 0 else "validation" if bucket == 1 else "train"].append(s)
        return {k: self._generate_examples(v) for k, v in splits.items()}

    def _generate_examples(self, synsets):
        pairs = self.builder_config.pairs
        for s in synsets:
            label = s["lexfile"]
            if pairs == "definition_lemmas":
                yield s["offset"], {"x": s["definition"], "x_pos": ", ".join(s["lemmas"]),
                                    "label": label}
            elif pairs == "example_definition":
                for i, ex in enumerate(s["examples"]):
                    yield f"{s['offset']}_{i}", {"x": ex, "x_pos": s["definition"],
                                                 "label": label}
            elif len(s["lemmas"]) >= 2:
                yield s["offset"], {"x": s["lemmas"][0], "x_pos": s["lemmas"][1], "label": label}


SHAPES = ("disk", "square", "triangle", "cross", "ring", "diamond", "bar", "two_dots")


def shapes_example(index: int, *, seed: int = 0, size: int = 32) -> tuple[np.ndarray, int]:
    """Example ``index`` of the shapes dataset, generated from ``(seed, index)`` alone: an RGB
    ``[size, size, 3]`` uint8 image of one of :data:`SHAPES` (the class), at a random position,
    scale and rotation, in a random colour on a random textured background under a random
    illumination gradient — so colour says nothing about the class and crops change position and
    scale, what SimCLR's colour and crop augmentations are for."""
    rng = np.random.default_rng([seed, index])
    label = int(rng.integers(len(SHAPES)))
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    cx, cy = rng.uniform(0.3, 0.7, 2) * size
    r = rng.uniform(0.16, 0.32) * size
    theta = rng.uniform(0, 2 * np.pi)
    u = (xx - cx) * np.cos(theta) + (yy - cy) * np.sin(theta)
    v = -(xx - cx) * np.sin(theta) + (yy - cy) * np.cos(theta)
    d = np.hypot(u, v)
    mask = {
        "disk": d < r,
        "square": np.maximum(abs(u), abs(v)) < 0.8 * r,
        "triangle": (v > -0.5 * r) & (np.sqrt(3) * abs(u) + v < r),
        "cross": ((abs(u) < r / 3) & (abs(v) < r)) | ((abs(v) < r / 3) & (abs(u) < r)),
        "ring": (d < r) & (d > 0.55 * r),
        "diamond": abs(u) + abs(v) < r,
        "bar": (abs(u) < r) & (abs(v) < 0.3 * r),
        "two_dots": (np.hypot(u - 0.5 * r, v) < 0.4 * r) | (np.hypot(u + 0.5 * r, v) < 0.4 * r),
    }[SHAPES[label]]
    fg, bg = rng.uniform(0, 1, 3), rng.uniform(0, 1, 3)
    texture = rng.normal(0, 0.08, (size, size, 1))
    image = np.where(mask[..., None], fg, bg) + texture
    angle = rng.uniform(0, 2 * np.pi)
    ramp = ((xx - size / 2) * np.cos(angle) + (yy - size / 2) * np.sin(angle)) / size
    image = image * (rng.uniform(0.6, 1.2) + rng.uniform(0, 0.6) * ramp)[..., None]
    return np.clip(np.round(image * 255), 0, 255).astype(np.uint8), label


class ShapesConfig(tfds.core.BuilderConfig):
    def __init__(self, *, num_examples: int = 12_000, image_size: int = 32, seed: int = 0,
                 **kwargs):
        super().__init__(name=f"n{num_examples}_{image_size}px_seed{seed}", **kwargs)
        self.num_examples, self.image_size, self.seed = num_examples, image_size, seed


class Shapes(tfds.core.GeneratorBasedBuilder):
    """Procedural RGB images of 8 shapes (:func:`shapes_example`), any number and size, each made
    from its index alone; the last sixth of the indices is the test split."""

    SECTION = ShapesData

    VERSION = tfds.core.Version("2.0.0")
    RELEASE_NOTES = {"1.0.0": "First release.", "2.0.0": "Images stored as PNG."}
    BUILDER_CONFIGS = [ShapesConfig()]

    def __init__(self, **kwargs):
        kwargs.setdefault("file_format", "array_record")
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        s = self.builder_config.image_size
        return tfds.core.DatasetInfo(
            builder=self, description=self.__doc__,
            features=tfds.core.features.FeaturesDict({
                "x": tfds.features.Image(shape=(s, s, 3), encoding_format="png"),
                "label": tfds.features.ClassLabel(names=list(SHAPES))}),
            supervised_keys=("x", "label"))

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing is downloaded
        n = self.builder_config.num_examples
        n_test = n // 6
        return {"train": self._generate_examples(range(n - n_test)),
                "test": self._generate_examples(range(n - n_test, n))}

    def _generate_examples(self, indices):
        from PIL import Image
        from tqdm.auto import tqdm
        c = self.builder_config
        for i in tqdm(indices, desc="shapes: generating", unit="image", leave=False,
                      dynamic_ncols=True, disable=len(indices) < 50_000):
            image, label = shapes_example(i, seed=c.seed, size=c.image_size)
            # PNG-encoded by PIL (TFDS encodes numpy images with TensorFlow, which is not installed)
            yield i, {"x": Image.fromarray(image), "label": label}


BUILDERS = {"digits": Digits, "shapes": Shapes, "mnist1d": Mnist1d, "latent_classes": LatentClasses,
            "latent_modalities": LatentModalities, "latent_topics": LatentTopics,
            "wordnet": WordNet}
