"""``repr-jax concepts`` on a tiny Llama GGUF whose vocabulary holds each sampled word as one
token (`` word``): the directions written are the unit differences of means of the layer states
read off by hand (the word's last token), the accuracy rows are the maths called directly on those
states, the files load in ``steer``, the unembedding-space numbers are the maths on the output
embedding, a bidirectional model's word is the mean over its own tokens, the bad inputs are one
line each, and the command line writes hierarchy and simplex entries with intervals. With
``--sae``: a latent planted to fire on one category is chosen with balanced accuracy 1, the choice
is the brute-force best on train, the command's rows are the choice called on the SAE's own
encoding of the word vectors, and an SAE of another model or layer, or a run that is no SAE on a
store, is one line."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tiny_llm
from repr_jax.data.builders import WORDNET_DIR
from repr_jax.eval import concepts as E
from repr_jax.train import concepts as K

from conftest import needs_minilm

pytestmark = pytest.mark.skipif(not (Path(WORDNET_DIR) / "data.noun").is_file(),
                                reason="WordNet 3.0 absent: apt-get install wordnet-base")

SYNSETS = "animal.n.01,mammal.n.01,bird.n.01,fish.n.01"
MAX_WORDS = 8
TEMPLATE = "a {}"
BOOT = 30


def _word_vocab(words):
    """tiny_llm's byte-level vocabulary and merges with each word's first piece `` word`` made
    one token (a chain of merges ``Ġprefix + char``, ranked before the others)."""
    from tokenizers import pre_tokenizers
    tokens, merges = tiny_llm.byte_vocab()
    alphabet, specials = tokens[:259], tokens[-2:]  # 256 bytes, Ġt, he, Ġthe
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    new, chain = [], []
    for w in words:
        piece = pre.pre_tokenize_str(" " + w)[0][0]
        for k in range(2, len(piece) + 1):
            merge = f"{piece[:k - 1]} {piece[k - 1]}"
            if merge not in chain:
                chain.append(merge)
            if piece[:k] not in alphabet and piece[:k] not in new:
                new.append(piece[:k])
    return alphabet + new + specials, chain + [m for m in merges if m not in chain]


def word_gguf(path, cats) -> None:
    """tiny_llm's decoder written to ``path`` with a vocabulary holding each sampled word of
    ``cats`` whole."""
    tokens, merges = _word_vocab(sorted({w for ws in cats.words for w in ws}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(tiny_llm.TINY, "vocab_size", len(tokens))
        mp.setattr(tiny_llm, "byte_vocab", lambda: (tokens, merges))
        tiny_llm.write_gguf(path, tiny_llm.tiny_params())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from repr_jax.train.activations import load_model
    root = tmp_path_factory.mktemp("concepts")
    cats = K.concept_words(SYNSETS, max_words=MAX_WORDS, seed=0)
    gguf = root / "tiny.gguf"
    word_gguf(gguf, cats)
    out = root / "out"
    result = K.concepts(out=out, init_from=str(gguf), categories=SYNSETS, template=TEMPLATE,
                        max_words=MAX_WORDS, bootstrap=BOOT, progress=False)
    model, _ = load_model(init_from=str(gguf), skip_first=0)
    return dict(root=root, gguf=gguf, out=out, result=result, model=model, cats=cats)


def _labelled(result):
    words, labels = [], []
    for k, c in enumerate(result["categories"]):
        words += c["labelled"]
        labels += [k] * len(c["labelled"])
    return words, np.asarray(labels)


def _decoder_states(model, words, layer):
    """Each word's state at its text's last token, by hand: one batch, no jit."""
    ids = np.asarray(model.sides.encode(model.tokenizer, [TEMPLATE.replace("{}", w)
                                                          for w in words], "doc"))
    n = (ids != -1).sum(axis=1)
    ids = ids[:, :n.max()]
    h = np.asarray(model.layers(model.variables, ids)[layer], np.float64)
    return h[np.arange(len(words)), n - 1].astype(np.float32)


def test_the_written_directions_are_unit_differences_of_means_of_the_states(tiny):
    result, model = tiny["result"], tiny["model"]
    words, labels = _labelled(result)
    assert result["layers"] == [0, 1] and result["width"] == tiny_llm.TINY["width"]
    assert words == tiny["cats"].labelled
    for layer in result["layers"]:
        x = _decoder_states(model, words, layer)
        d = E.difference_of_means(x, labels, num_classes=len(result["categories"]))
        d = d / np.linalg.norm(d, axis=1, keepdims=True)
        for k, c in enumerate(result["categories"]):
            got = np.load(tiny["out"] / "directions" / f"layer_{layer}" / c["file"])
            assert got.dtype == np.float32 and got.shape == (tiny_llm.TINY["width"],)
            np.testing.assert_allclose(got, d[k], atol=1e-5)


def test_the_accuracy_rows_are_the_maths_called_on_the_states(tiny):
    result, model = tiny["result"], tiny["model"]
    words, labels = _labelled(result)
    train, test = K.split_words(labels, 0)
    assert [c["test"] for c in result["categories"]] == np.bincount(labels[test]).tolist()
    c = len(result["categories"])

    def same(row, estimate):
        assert row["value"] == pytest.approx(float(estimate), abs=1e-6)
        assert row["low"] == pytest.approx(estimate.low, abs=1e-6)
        assert row["high"] == pytest.approx(estimate.high, abs=1e-6)

    # the command's own features, checked against the states read by hand: the probe (L2 down
    # to 1e-6, fewer words than dimensions) can flip a test word on a 1e-7 change of them
    ids, weights = K.word_positions(model, words, TEMPLATE)
    features = K.word_features(model, ids, weights, result["layers"])
    for k, entry in enumerate(result["per_layer"]):
        x = features[k]
        np.testing.assert_allclose(x, _decoder_states(model, words, entry["layer"]), atol=1e-5)
        means = E.difference_of_means(x[train], labels[train], num_classes=c)
        probe = E.probe_directions(x[train], labels[train], x[test], labels[test],
                                   num_classes=c, seed=0, bootstrap=BOOT, balanced=True)
        for j, cat in enumerate(result["categories"]):
            row = entry["categories"][cat["name"]]
            y_train, y_test = labels[train] == j, labels[test] == j
            mean = E.held_out_accuracy(means[j], x[train], y_train, x[test], y_test,
                                       bootstrap=BOOT)
            same(row["mean"]["accuracy"], mean["accuracy"])
            assert row["mean"]["threshold"] == pytest.approx(mean["threshold"], rel=1e-4,
                                                             abs=1e-5)
            same(row["probe"]["accuracy"], probe["accuracy"][j])
            control = E.shuffled_accuracy(x[train], y_train, x[test], y_test, method="mean",
                                          seed=0, bootstrap=BOOT)
            same(row["control"]["accuracy"], control["accuracy"])
            assert row["control"]["chance"] == pytest.approx(control["chance"])
            shuffled = control["labels"]
            predicted = np.where(control["correct"] > 0, shuffled, ~shuffled)
            recalls = [np.mean(predicted[shuffled]), np.mean(~predicted[~shuffled])]
            assert row["control"]["balanced_accuracy"] == pytest.approx(np.mean(recalls))
        means_of = [entry["categories"][c["name"]]["mean"]["accuracy"]["value"]
                    for c in result["categories"]]
        assert entry["summary"]["accuracy"] == pytest.approx(np.mean(means_of))


def test_the_directions_load_in_steer(tiny):
    from repr_jax.train.steer import read_direction
    result = tiny["result"]
    for layer in result["layers"]:
        for c in result["categories"]:
            path = tiny["out"] / "directions" / f"layer_{layer}" / c["file"]
            got = read_direction(str(path), tiny_llm.TINY["width"], layer=layer,
                                 model_name=result["model"])
            np.testing.assert_allclose(got, np.load(path), atol=1e-6)


def test_the_unembedding_numbers_are_the_maths_on_the_output_embedding(tiny):
    result, model = tiny["result"], tiny["model"]
    u = result["unembedding"]
    names = [c["name"] for c in result["categories"]]
    assert u["head"] == "tied"
    gamma = np.asarray(model.variables["params"]["embed_tokens"]["embedding"], np.float32)
    assert u["vocab"] == len(gamma)
    mean, a = E.causal_transform(gamma)
    g = E.causal_coordinates(gamma, mean, a)
    first = {}  # each category's distinct single-token words of its whole set, in order
    for c, everything in zip(result["categories"], tiny["cats"].everything):
        ids = [model.tokenizer.tokenize(" " + w) for w in everything]
        first[c["name"]] = list(dict.fromkeys(t[0] for t in ids if len(t) == 1))
    for c in result["categories"]:  # the sampled words are whole tokens of this vocabulary
        assert all(len(model.tokenizer.tokenize(" " + w)) == 1 for w in c["words"]
                   if w.isalpha())
        assert u["categories"][c["name"]]["words"] == c["size"]
    siblings = names[1:]  # mammal, bird, fish: none contains another
    own = {s: list(first[s]) for s in siblings}
    for s in siblings:
        shared = {t for o in siblings if o != s for t in own[o]}
        first[s] = [t for t in own[s] if t not in shared]
    assert {n: u["categories"][n]["tokens"] for n in names} == {n: len(first[n]) for n in names}
    assert [(h["parent"], h["child"]) for h in u["hierarchy"]] == [
        ("animal.n.01", s) for s in siblings]
    for h in u["hierarchy"]:
        r = E.hierarchy_cosine(g[first[h["parent"]]], g[first[h["child"]]], g, bootstrap=BOOT,
                               seed=0)
        assert h["cosine"]["value"] == pytest.approx(float(r["cosine"]), abs=1e-4)
        assert h["control"]["value"] == pytest.approx(float(r["control"]), abs=1e-4)
        assert h["cosine"]["low"] <= h["cosine"]["high"]
    (simplex,) = u["simplex"]
    assert simplex["under"] == ["animal.n.01"] and simplex["categories"] == siblings
    r = E.simplex_test([g[first[s]] for s in siblings], bootstrap=BOOT, seed=0)
    for key in ("ratio", "spread", "control_ratio", "control_spread"):
        assert simplex[key]["value"] == pytest.approx(float(r[key]), abs=1e-4)


def test_nested_synsets_label_each_word_with_its_most_specific_category():
    from repr_jax.data.wordnet_hierarchy import category_words, noun_hierarchy
    cats = K.concept_words(SYNSETS, max_words=MAX_WORDS, seed=0)
    h = noun_hierarchy()
    assert cats.below[0] == {1, 2, 3} and not any(cats.below[1:])
    mammals = category_words(h, "mammal.n.01")
    for word, label in zip(cats.labelled, cats.labels):
        assert word in cats.words[label]
        if label == 0:
            assert word not in mammals
    assert K.concept_words(SYNSETS, max_words=MAX_WORDS, seed=0).words == cats.words
    lexfile = K.concept_words("lexfile", max_words=3, seed=1)
    assert len(lexfile.names) == 26 and "animal" in lexfile.names
    assert all(len(w) == 3 for w in lexfile.words) and not any(lexfile.below)
    assert len(lexfile.labelled) == 78


@needs_minilm
def test_a_bidirectional_models_word_is_the_mean_over_its_own_tokens():
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    tok = make_tokenizer("minilm")

    class Fake:
        family, tokenizer, sides = "text_transformer", tok, Sides(32, 32)

        @staticmethod
        def valid(ids):
            return ids != tok.pad_id

    words = ["dog", "aardvark", "hippopotamus"]
    for template in ("{}", "a picture of a {}", "the {}, here"):
        prefix = template.partition("{}")[0].rstrip()
        ids, weights = K.word_positions(Fake, words, template)
        for i, w in enumerate(words):
            n = len(tok.tokenize(w))
            start = 1 + len(tok.tokenize(prefix))
            np.testing.assert_array_equal(np.flatnonzero(weights[i]), np.arange(start, start + n))
            np.testing.assert_allclose(weights[i, start:start + n], 1 / n)
            assert ids[i, 0] == tok.cls_id
    Fake.family = "decoder_lm"
    ids, weights = K.word_positions(Fake, words, "the {}, here")
    for i, w in enumerate(words):
        assert np.flatnonzero(weights[i]).tolist() == [len(tok.tokenize("the " + w))]


@pytest.mark.parametrize("change, message", [
    (dict(layers="5"), r"^--layers 5: the decoder_lm has 2 block\(s\); choose a block 0 to 1 "
                       r"\(counted from 0\)$"),
    (dict(layers="embedding"), "--layers embedding: concepts reads the blocks' token states"),
    (dict(layers="x"), "--layers 'x': give blocks counted from 0"),
    (dict(categories="animal.n.01,zzqxv.n.01"),
     "--categories 'zzqxv.n.01': 'zzqxv' has no noun sense in WordNet; name a synset as "
     r"LEMMA\.n\.NN"),
    (dict(categories="animal.n.01,dalmatian.n.02"),
     r"dalmatian\.n\.02 has 1 single-word lemma\(s\) \(dalmatian\); a concept needs at least 2"),
    (dict(categories="dog,dog.n.01"), "dog and dog.n.01 name the same synset"),
    (dict(categories="animal.n.01"), "give at least 2 categories"),
    (dict(template="a picture"), "--template 'a picture': put {} once where the word goes"),
    (dict(template="{} and {}"), "put {} once"),
    (dict(max_words=1), "--max-words must be at least 2"),
    (dict(init_from=None), "give one of --workdir RUN or --init-from MODEL"),
])
def test_bad_inputs_are_one_line(tiny, tmp_path, change, message):
    import re
    kw = dict(out=tmp_path / "out", init_from=str(tiny["gguf"]), categories=SYNSETS,
              max_words=MAX_WORDS, bootstrap=0, progress=False)
    kw.update(change)
    with pytest.raises(ValueError, match=message) as e:
        K.concepts(**kw)
    assert "\n" not in str(e.value)
    assert re.search(message, str(e.value))
    assert not (tmp_path / "out" / "concepts.json").exists()


def test_an_output_folder_of_other_files_is_refused(tiny, tmp_path):
    (tmp_path / "mine.txt").write_text("x")
    with pytest.raises(ValueError, match="holds other files \\(mine.txt\\)"):
        K.concepts(out=tmp_path, init_from=str(tiny["gguf"]), categories=SYNSETS,
                   max_words=MAX_WORDS, bootstrap=0, progress=False)


@pytest.mark.slow
def test_the_command_line_writes_hierarchy_and_simplex_with_intervals(tiny, tmp_path):
    out = tmp_path / "cli"
    cmd = [sys.executable, "-m", "repr_jax.cli", "concepts", "--init-from", str(tiny["gguf"]),
           "--out", str(out), "--categories", SYNSETS, "--max-words", str(MAX_WORDS),
           "--template", TEMPLATE, "--bootstrap", "50", "--layers", "1", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "concepts.json").read_text())
    assert result["format"] == "repr_jax.concepts" and result["layers"] == [1]
    assert sorted((out / "directions" / "layer_1").iterdir()) == sorted(
        out / "directions" / "layer_1" / c["file"] for c in result["categories"])
    u = result["unembedding"]
    assert [h["child"] for h in u["hierarchy"]] == ["mammal.n.01", "bird.n.01", "fish.n.01"]
    for h in u["hierarchy"]:
        for key in ("cosine", "control"):
            assert h[key]["low"] is not None and h[key]["low"] <= h[key]["high"]
    (simplex,) = u["simplex"]
    for key in ("ratio", "spread", "control_ratio", "control_spread"):
        assert simplex[key]["low"] is not None and simplex[key]["high"] is not None
    assert "| layer | difference of means |" in done.stdout
    assert "hierarchical orthogonality" in done.stdout and "simplex" in done.stdout
    # a rerun with fewer categories replaces the old output, its stale files removed
    cmd2 = cmd[:cmd.index("--categories") + 1] + ["animal.n.01,plant.n.02"] + \
        cmd[cmd.index("--categories") + 2:]
    done = subprocess.run(cmd2, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "directions" / "layer_1").iterdir()) == [
        "animal.n.01.npy", "plant.n.02.npy"]
    bad = subprocess.run(cmd[:-3] + ["--layers", "7", "--no-progress"], capture_output=True,
                         text=True, timeout=600)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert lines[-1] == ("repr-jax: error: --layers 7: the decoder_lm has 2 block(s); choose a "
                         "block 0 to 1 (counted from 0)")
    assert sum("error" in line for line in lines) == 1


@pytest.mark.slow
@needs_minilm
def test_minilm_directions_are_mean_pooled_word_states(tmp_path):
    from repr_jax.train.activations import load_model
    template = "a picture of a {}"
    result = K.concepts(out=tmp_path / "m", init_from="minilm",
                        categories="animal.n.01,plant.n.02,artifact.n.01", layers="0,5",
                        template=template, max_words=6, bootstrap=0, progress=False)
    assert result["unembedding"] is None and result["family"] == "text_transformer"
    model, _ = load_model(init_from="minilm")
    tok = model.tokenizer
    words, labels = _labelled(result)
    ids = np.asarray(model.sides.encode(tok, [template.replace("{}", w) for w in words],
                                        "doc"))[:, :32]
    start = 1 + len(tok.tokenize("a picture of a"))
    for layer in (0, 5):
        h = np.asarray(model.layers(model.variables, ids)[layer], np.float64)
        x = np.stack([h[i, start:start + len(tok.tokenize(w))].mean(0)
                      for i, w in enumerate(words)]).astype(np.float32)
        d = E.difference_of_means(x, labels, num_classes=3)
        d = d / np.linalg.norm(d, axis=1, keepdims=True)
        for k, c in enumerate(result["categories"]):
            got = np.load(tmp_path / "m" / "directions" / f"layer_{layer}" / c["file"])
            np.testing.assert_allclose(got, d[k], atol=1e-5)


@pytest.mark.slow
def test_a_simplex_of_many_categories_finishes_on_a_cpu():
    """XLA's CPU runtime deadlocked on the bootstrap of a 26-category simplex (the default
    lexfile categories') when the resamples were vectorised: they now run one at a time."""
    script = ("import numpy as np\n"
              "from repr_jax.eval.concepts import simplex_test\n"
              "rng = np.random.default_rng(0)\n"
              "g = [rng.standard_normal((15, 32)).astype(np.float32) + rng.standard_normal(32)"
              " for _ in range(26)]\n"
              "r = simplex_test(g, bootstrap=100)\n"
              "print('ratio', float(r['ratio']), r['ratio'].high >= r['ratio'].low)\n")
    import os
    # as the command line runs: the tests' fake devices and disabled optimisations hide the hang
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "True"


# --------------------------------------------------------------------------------------------------
# --sae: SAE latents matched to concepts
# --------------------------------------------------------------------------------------------------

def _planted_latents(rng, labels, latents=8, planted=3, category=0):
    """``[W, latents]`` TopK-like activations: latent ``planted`` fires (2 + noise) exactly on
    ``category``'s words; every other latent fires at random on 30% of all words."""
    z = np.where(rng.random((len(labels), latents)) < 0.3,
                 rng.random((len(labels), latents)) + 0.1, 0.0).astype(np.float32)
    z[:, planted] = np.where(labels == category, 2 + rng.random(len(labels)), 0.0)
    return z


@pytest.mark.parametrize("rule", ["fires", "threshold"])
def test_a_latent_firing_exactly_on_a_category_is_chosen_with_balanced_accuracy_one(rule):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), [30, 20, 25, 25])
    train, test = K.split_words(labels, 0)
    z = _planted_latents(rng, labels)
    r = E.best_latent(z[train], labels[train] == 0, z[test], labels[test] == 0, rule=rule,
                      bootstrap=BOOT)
    assert r["latent"] == 3 and r["train_balanced_accuracy"] == 1.0
    assert float(r["balanced_accuracy"]) == 1.0 and r["balanced_accuracy"].low == 1.0
    assert r["rates"] == (1.0, 0.0)
    assert r["threshold"] == 0.0 if rule == "fires" else 0.0 < r["threshold"] < 2.0
    rows = K.sae_analysis(z, labels, train, test, ["a", "b", "c", "d"],
                          dict(a=0.9, b=0.8, c=0.7, d=0.6), rule=rule, bootstrap=BOOT)
    a = rows["categories"]["a"]
    assert a["latent"] == 3 and a["balanced_accuracy"]["value"] == 1.0
    assert a["fires"] == dict(category=1.0, rest=0.0) and a["probe_balanced_accuracy"] == 0.9
    assert a["control"]["balanced_accuracy"]["value"] < 0.8  # the labels shuffled: no latent
    assert rows["summary"]["probe_balanced_accuracy"] == pytest.approx(0.75)


def _brute_best(z, y, rule):
    """(train balanced accuracy, latent, threshold) by trying every latent and threshold."""
    best = (-1.0, None, None)
    for latent in range(z.shape[1]):
        values = np.unique(z[:, latent].astype(np.float64))
        cuts = [0.0] if rule == "fires" else [values[-1], *((values[1:] + values[:-1]) / 2)[::-1]]
        for t in cuts:
            p = z[:, latent] > t
            ba = (p[y].mean() + (~p[~y]).mean()) / 2
            if ba > best[0] + 1e-12:
                best = (ba, latent, t)
    return best


@pytest.mark.parametrize("rule", ["fires", "threshold"])
def test_the_chosen_latent_is_the_brute_force_best_on_train(rule):
    rng = np.random.default_rng(1)
    for _ in range(40):
        n, latents = int(rng.choice([9, 30])), int(rng.integers(1, 10))  # two compilations
        z = np.round(np.maximum(rng.normal(size=(n, latents)), 0), 1).astype(np.float32)
        y = rng.random(n) < 0.3
        y[:2] = True, False
        r = E.best_latent(z, y, z, y, rule=rule, bootstrap=0)
        ba, latent, threshold = _brute_best(z, y, rule)
        assert (r["latent"], r["train_balanced_accuracy"]) == (latent, pytest.approx(ba))
        if rule == "threshold" and ba > 0.5:
            assert r["threshold"] == pytest.approx(threshold)
        # scored on its own train set, the held-out number is the train one (or chance)
        assert float(r["balanced_accuracy"]) == pytest.approx(max(ba, 0.5) if rule ==
                                                              "threshold" else ba)


def test_balanced_accuracy_averages_the_classes_a_resample_holds():
    assert float(E.balanced_accuracy(np.array([1, 0, 1]), np.array([1, 1, 0]))) == 0.25
    assert float(E.balanced_accuracy(np.array([1, 0]), np.array([1, 1]))) == 0.5
    assert float(E.balanced_accuracy(np.array([0, 0]), np.array([0, 0]))) == 1.0
    with pytest.raises(ValueError, match="both classes in y_train"):
        E.best_latent(np.ones((3, 2)), [1, 1, 1], np.ones((3, 2)), [1, 0, 0])
    with pytest.raises(ValueError, match="rule='top'"):
        E.best_latent(np.ones((3, 2)), [1, 0, 1], np.ones((3, 2)), [1, 0, 0], rule="top")


def _fake_sae(root, *, model, layer, method="sae", data=None):
    """A run folder holding only an SAE config on a store folder holding only its meta.json:
    what ``--sae`` checks before it reads a checkpoint."""
    from conftest import sae_config

    from repr_jax import config as C
    store = root / "store"
    store.mkdir(parents=True)
    (store / "meta.json").write_text(json.dumps(dict(format="repr_jax.activations", version=1,
                                                     model=model, layer=layer)))
    cfg = sae_config(f"data.name={data or f'activations:{store}'}")
    if method != "sae":
        cfg = C.Config(seed=0, data=C.DataConfig(name=f"activations:{store}"),
                       method=C.MethodConfig(name=method))
    (root / "run").mkdir()
    C.save_json(cfg, root / "run" / "config.json")
    return root / "run"


def test_an_sae_of_another_model_or_layer_or_not_an_sae_is_one_line(tiny, tmp_path):
    name = tiny["model"].describe["model"]
    kw = dict(out=tmp_path / "out", init_from=str(tiny["gguf"]), categories=SYNSETS,
              max_words=MAX_WORDS, bootstrap=0, progress=False, layers="0")
    cases = [
        (_fake_sae(tmp_path / "a", model=name, layer=1),
         r"^--sae .*/a/run: the SAE read layer 1 of .*tiny\.gguf; --layers are 0$"),
        (_fake_sae(tmp_path / "b", model="/elsewhere/other.gguf", layer=0),
         r"^--sae .*/b/run: the SAE read layer 0 of /elsewhere/other\.gguf; this is .*tiny\.gguf$"),
        (_fake_sae(tmp_path / "c", model=name, layer=0, data="latent_classes"),
         r"^--sae .*: an SAE trained on latent_classes, not a sparse autoencoder on an activation "
         r"store \(method.name=sae, data.name=activations:DIR\)$"),
        (_fake_sae(tmp_path / "d", model=name, layer=0, method="biencoder"),
         r"^--sae .*: a biencoder run, not a sparse autoencoder"),
        (tmp_path / "a" / "store", r"^--sae .*/a/store: .*has no config.json"),
        (tmp_path / "nowhere", r"^--sae .*nowhere: no such folder"),
    ]
    for run, message in cases:
        with pytest.raises(ValueError, match=message) as e:
            K.concepts(**kw, sae=[str(run)])
        assert "\n" not in str(e.value)
    run = tmp_path / "a" / "run"
    with pytest.raises(ValueError, match="given twice"):
        K.concepts(**kw, sae=[str(run), str(run)])
    with pytest.raises(ValueError, match="--sae-rule 'top'; choose from fires, threshold"):
        K.concepts(**kw, sae_rule="top")
    assert not (tmp_path / "out" / "concepts.json").exists()


def test_the_command_line_passes_the_sae_runs_and_rule(monkeypatch):
    from repr_jax import cli
    seen = {}
    monkeypatch.setattr(K, "concepts", lambda **kw: seen.update(kw))
    args = cli._parser().parse_args(["concepts", "--init-from", "m", "--out", "o", "--sae", "a",
                                     "b", "--sae-rule", "threshold"])
    assert cli._concepts(args) == 0
    assert seen["sae"] == ["a", "b"] and seen["sae_rule"] == "threshold"
    cli._concepts(cli._parser().parse_args(["concepts", "--init-from", "m", "--out", "o"]))
    assert not seen["sae"] and seen["sae_rule"] == "fires"


@pytest.fixture(scope="module")
def sae_run(tiny):
    """The tiny model's layer-1 store over a pairs file, a TopK SAE (48 latents, k 4) trained 3
    steps on it, and the command with it (layers 0 and 1, template ``"{}"``: the warning)."""
    from conftest import sae_config

    from repr_jax.train import activations as acts
    from repr_jax.train import train_and_evaluate
    root = tiny["root"] / "sae"
    pairs = root / "pairs.jsonl"
    root.mkdir()
    pairs.write_text("".join(json.dumps({"query": f"a {w} and the thing",
                                         "positive": f"then {w} there"}) + "\n"
                             for w in tiny["cats"].labelled))
    acts.activations(out=root / "store", layer=1, data=f"pairs:{pairs}",
                     init_from=str(tiny["gguf"]), max_len=16, progress=False)
    cfg = sae_config(f"data.name=activations:{root / 'store'}", "method.latents=48",
                     "eval.evaluators=()", steps=3, warmup=0, bootstrap=0)
    train_and_evaluate(cfg, root / "run", progress=False, verbose=False)
    return dict(root=root, run=root / "run")


def _assert_close(a, b, where="entry"):
    """Nested dicts and lists equal, their floats to 1e-6."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _assert_close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            _assert_close(u, v, f"{where}[{i}]")
    elif isinstance(a, float):
        assert b == pytest.approx(a, abs=1e-6), where
    else:
        assert a == b, where


@pytest.mark.slow
def test_the_sae_rows_are_the_choice_called_on_the_encoded_word_vectors(tiny, sae_run, capfd):
    from repr_jax.objectives import sae as sae_lib
    from repr_jax.train.run import load_trained
    result = K.concepts(out=tiny["root"] / "with_sae", init_from=str(tiny["gguf"]),
                        categories=SYNSETS, template="{}", max_words=MAX_WORDS, bootstrap=BOOT,
                        progress=False, sae=[str(sae_run["run"])])
    printed = capfd.readouterr()
    assert "warning: concepts: template '{}' puts each word first" in printed.err
    assert [len(row["sae"]) for row in result["per_layer"]] == [0, 1]
    (entry,) = result["per_layer"][1]["sae"]
    assert entry["run"] == str(sae_run["run"].absolute()) and entry["latents"] == 48
    assert entry["rule"] == "fires" and entry["activation"] == "topk"
    words, labels = _labelled(result)
    names = [c["name"] for c in result["categories"]]
    train, test = K.split_words(labels, 0)
    model = tiny["model"]
    ids, weights = K.word_positions(model, words, "{}")
    x = K.word_features(model, ids, weights, [1])[0]
    # the project's own encode: the scale, x - b_dec, TopK at the run's k
    _, _, method, state = load_trained(sae_run["run"])
    scale = float(state.variables["batch_stats"]["scale"])
    z = np.asarray(sae_lib.encode(state.params["sae"], x * scale, activation="topk", k=4))
    s = K.load_sae(K.check_sae_runs([sae_run["run"]])[0])
    np.testing.assert_allclose(K.sae_latents(s, x, batch_size=7), z, rtol=1e-5, atol=1e-6)
    probe = {n: r["probe"]["balanced_accuracy"]
             for n, r in result["per_layer"][1]["categories"].items()}
    want = K.sae_analysis(z, labels, train, test, names, probe, bootstrap=BOOT, seed=0)
    _assert_close(json.loads(json.dumps(want)), {k: entry[k] for k in ("summary", "categories")})
    for name in names:
        row, k = entry["categories"][name], names.index(name)
        y_test = labels[test] == k
        fires = z[:, row["latent"]] > 0
        assert row["fires"]["category"] == pytest.approx(fires[test][y_test].mean())
        assert row["fires"]["rest"] == pytest.approx(fires[test][~y_test].mean())
        assert row["probe_balanced_accuracy"] == probe[name]
    assert f"SAE {entry['run']} (layer 1, 48 topk latents)" in printed.out
    assert "| category | latent | held-out balanced |" in printed.out
