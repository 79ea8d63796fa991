"""The ``concepts`` evaluator (``eval.evaluators=('concepts',)``): known answers on classes
separable along known directions, its rows against direct calls of
:mod:`repr_jax.eval.concepts`' functions, one row set per layer named as layerwise names them,
the options that choose and skip concepts, the warnings, and a run through training."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import config as C
from repr_jax.eval import EVALUATORS, PROTOCOLS, Embedder, Estimate
from repr_jax.eval import concepts as K
from repr_jax.eval.stats import with_ci

RNG = np.random.default_rng(0)
MEAN_ROWS, PROBE_ROWS = K.CONCEPT_ROWS["mean"], K.CONCEPT_ROWS["probe"]


def identity(variables, x):
    del variables
    return x


def separable(n, num_classes=4, dim=8, margin=6.0):
    """Class c sits ``margin`` along the known direction e_c, unit Gaussian noise on every axis:
    one-vs-rest along e_c errs at ``P(noise > margin / 2)`` (0.1% at margin 6)."""
    y = RNG.integers(0, num_classes, n)
    x = RNG.normal(size=(n, dim)) + margin * np.eye(num_classes, dim)[y]
    return x.astype(np.float32), y


def splits_of(x, y, n_train):
    return {"train": {"x": x[:n_train], "label": y[:n_train]},
            "test": {"x": x[n_train:], "label": y[n_train:]}}


def run(embedder, variables=None, **options):
    return dict(EVALUATORS["concepts"](embedder, **options).run(variables))


def _mean_of_all(correct_MxC):
    return jnp.mean(correct_MxC)


def test_separable_concepts_score_one_and_their_shuffled_control_sits_at_its_chance():
    x, y = separable(1200)
    rows = run(Embedder(identity, splits_of(x, y, 800)), bootstrap=200)
    assert set(rows) == {f"embedding/{m}" for m in MEAN_ROWS + PROBE_ROWS}
    mean, probe = rows["embedding/concept_accuracy_mean"], rows["embedding/concept_accuracy_probe"]
    assert isinstance(mean, Estimate) and mean.low <= mean <= mean.high and mean > 0.98
    assert probe > 0.98
    # The midpoint threshold of a direction that knows nothing predicts ~half of the test
    # positive: chance ~0.5; a probe that knows nothing predicts the majority (3 of 4 negative).
    chance, probe_chance = rows["embedding/concept_chance"], rows["embedding/concept_chance_probe"]
    assert type(chance) is float and abs(chance - 0.5) < 0.05 and abs(probe_chance - 0.75) < 0.05
    shuffled = rows["embedding/concept_accuracy_shuffled"]
    assert abs(shuffled - chance) < 0.05 and shuffled.high < mean.low
    assert abs(rows["embedding/concept_accuracy_probe_shuffled"] - probe_chance) < 0.05


def test_rows_are_the_module_functions_on_the_same_features():
    """The wiring by hand: each concept's binary problem through difference_of_means,
    held_out_accuracy, probe_directions and shuffled_accuracy, averaged over concepts; the
    interval is the correctness matrix's, bootstrapped jointly over test examples."""
    x, y = separable(700, num_classes=5, dim=6, margin=1.5)  # overlapping: accuracies below 1
    s = splits_of(x, y, 500)
    rows = run(Embedder(identity, s), seed=3, bootstrap=100)
    (x_tr, y_tr), (x_te, y_te) = ((s[k]["x"], s[k]["label"]) for k in ("train", "test"))
    correct = {m: [] for m in MEAN_ROWS + PROBE_ROWS}
    for c in range(5):
        pos_tr, pos_te = y_tr == c, y_te == c
        d = K.difference_of_means(x_tr, pos_tr.astype(np.int32), num_classes=2)[1]
        correct["concept_accuracy_mean"].append(
            K.held_out_accuracy(d, x_tr, pos_tr, x_te, pos_te, bootstrap=0)["correct"])
        correct["concept_accuracy_probe"].append(K.probe_directions(
            x_tr, pos_tr.astype(np.int32), x_te, pos_te.astype(np.int32), num_classes=2, seed=3,
            bootstrap=0)["correct_CxM"][1])
        for method in ("mean", "probe"):
            _, shuffled, chance = K.CONCEPT_ROWS[method]
            out = K.shuffled_accuracy(x_tr, pos_tr, x_te, pos_te, method=method, seed=3,
                                      bootstrap=0)
            correct[shuffled].append(out["correct"])
            correct[chance].append(out["chance"])
    assert 0.6 < float(rows["embedding/concept_accuracy_mean"]) < 0.97
    for metric, values in correct.items():
        value = rows[f"embedding/{metric}"]
        assert float(value) == pytest.approx(float(np.mean(values)), abs=1e-6), metric
        if "chance" not in metric:
            e = with_ci(np.stack(values, 1), _mean_of_all, bootstrap=100)
            assert (value.low, value.high) == pytest.approx((e.low, e.high), abs=1e-6), metric


def test_one_row_set_per_layer_named_as_layerwise_names_them():
    x, y = separable(900)
    noise = RNG.normal(size=x.shape).astype(np.float32)
    feats = np.concatenate([x, noise], 1)

    def layers(variables, f):
        del variables
        return (f[:, 8:], f[:, :8], f)  # layer_0 noise, layer_1 the concepts, then the embedding

    emb = Embedder(identity, splits_of(feats, y, 600), layers_fn=layers)
    rows = run(emb, probe=False, bootstrap=0)
    layerwise = dict(EVALUATORS["layerwise"](emb, protocol="knn", bootstrap=0).run(None))
    wheres = [m.split("/")[0] for m in layerwise]
    assert wheres == ["layer_0", "layer_1", "embedding"]
    assert list(rows) == [f"{w}/{m}" for w in wheres for m in MEAN_ROWS]
    assert min(rows[f"{w}/concept_accuracy_mean"] for w in ("layer_1", "embedding")) > 0.98
    assert rows["layer_0/concept_accuracy_mean"] < 0.7  # noise: a random direction's ~0.5


def test_a_tiny_encoders_layers_on_latent_classes(tmp_path):
    """A real encoder (a random-init two-block MLP on latent_classes) through its
    ``embed_layers``: its blocks and its embedding, each a row set; raw inputs, the embedding's
    alone."""
    from conftest import tiny_config

    from repr_jax import data
    from repr_jax.train.evaluation import Representation
    from repr_jax.train.run import build_method, sample_batch
    cfg = tiny_config(data=C.DataConfig(name="latent_classes", num_examples=600),
                      encoder=C.EncoderConfig(name="mlp", widths=(16, 16)))
    dataset = data.load("latent_classes", num_examples=600)
    method = build_method(cfg, dataset)
    rep = Representation.of(method, method.init(jax.random.PRNGKey(0), sample_batch(dataset)))
    emb = Embedder(rep.embed, dataset.splits, layers_fn=rep.embed_layers)
    rows = run(emb, rep.variables, probe=False, bootstrap=0)
    assert list(rows) == [f"{w}/{m}" for w in ("layer_0", "layer_1", "embedding")
                          for m in MEAN_ROWS]
    assert all(0.5 < rows[f"{w}/concept_accuracy_mean"] <= 1 for w in ("layer_0", "embedding"))
    raw = run(Embedder(identity, dataset.splits), probe=False, bootstrap=0, max_concepts=3)
    assert list(raw) == [f"embedding/{m}" for m in MEAN_ROWS]


def test_max_concepts_takes_the_most_frequent_and_min_examples_skips_the_rare():
    x, y = separable(900, num_classes=3)
    y = y.copy()
    y[[0, 1, 600]] = 7  # class 7: two train examples, one test example
    s = splits_of(x, y, 600)
    evaluator = EVALUATORS["concepts"](Embedder(identity, s))
    counts = np.bincount(y[:600])[:3]
    frequent = sorted(range(3), key=lambda c: (-counts[c], c))
    assert evaluator.concepts(y[:600], y[600:]) == frequent  # 7 has one test example: skipped
    assert EVALUATORS["concepts"](Embedder(identity, s), min_examples=1).concepts(
        y[:600], y[600:]) == frequent + [7]
    assert EVALUATORS["concepts"](Embedder(identity, s), max_concepts=2).concepts(
        y[:600], y[600:]) == frequent[:2]
    rows = run(Embedder(identity, s), probe=False, bootstrap=0)
    direct = K.concept_accuracies(x[:600], y[:600], x[600:], y[600:], frequent, probe=False,
                                  bootstrap=0)
    assert rows == {f"embedding/{m}": v for m, v in direct.items()}
    with pytest.warns(UserWarning) as caught:
        assert run(Embedder(identity, s), min_examples=400) == {}
    message = str(caught[0].message)
    assert "\n" not in message and "min_examples=400" in message
    assert f"{frequent[0]}: {counts[frequent[0]]}/" in message and "7: 2/1" in message


@pytest.mark.parametrize("case, pattern", [("no labels", "has no labels"),
                                           ("one class", "one class")])
def test_no_labels_or_one_class_gives_no_rows_and_one_line(case, pattern):
    x, y = separable(300)
    s = splits_of(x, y, 200)
    if case == "no labels":
        s = {k: {"x": v["x"]} for k, v in s.items()}
    else:
        s = {k: {**v, "label": np.zeros_like(v["label"])} for k, v in s.items()}
    with pytest.warns(UserWarning, match=pattern) as caught:
        assert run(Embedder(identity, s)) == {}
    assert len(caught) == 1 and "\n" not in str(caught[0].message)


def test_its_options_are_a_config_section_and_it_is_no_protocol():
    from repr_jax.train.evaluation import evaluator_options
    cfg = C.override(C.Config(), ["eval.evaluators=('concepts',)", "eval.concepts.probe=False",
                                  "eval.concepts.max_concepts=4"])
    assert evaluator_options(cfg, "concepts") == dict(max_concepts=4, min_examples=2,
                                                      probe=False, seed=0, bootstrap=1000)
    with pytest.raises(C.ConfigError, match="eval.concepts.min_examples must be > 0"):
        C.override(C.Config(), ["eval.concepts.min_examples=0"])
    assert "concepts" in EVALUATORS and "concepts" not in PROTOCOLS


@pytest.mark.slow
def test_through_train_and_evaluate(tmp_path):
    from conftest import tiny_config

    from repr_jax.eval.concepts import ConceptsOptions
    from repr_jax.train import train_and_evaluate
    cfg = tiny_config(
        data=C.DataConfig(name="latent_classes", num_examples=600),
        encoder=C.EncoderConfig(name="mlp", widths=(16, 16)),
        train=C.TrainConfig(batch_size=32, steps=2, ckpt_every=2, log_every=1, num_devices=1),
        eval=C.EvalConfig(evaluators=("concepts",), bootstrap=20,
                          concepts=ConceptsOptions(max_concepts=3)))
    out = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    got = {(r["representation"], r["metric"]) for r in out["eval_rows"]
           if r["evaluator"] == "concepts"}
    wheres = ("layer_0", "layer_1", "embedding")
    for rep in ("random-init encoder", "simclr encoder"):
        assert {(rep, f"{w}/{m}") for w in wheres for m in MEAN_ROWS + PROBE_ROWS} <= got, rep
    assert ("raw inputs", "embedding/concept_accuracy_mean") in got
    saved = [r for r in json.loads((tmp_path / "run" / "eval" / "step_2.json").read_text())
             if r["evaluator"] == "concepts"]
    assert {(r["representation"], r["metric"]) for r in saved} >= {
        ("simclr encoder", f"{w}/{m}") for w in wheres for m in MEAN_ROWS + PROBE_ROWS}
    accuracy = [r for r in saved if "accuracy" in r["metric"]]
    assert accuracy and all(r["ci_low"] <= r["value"] <= r["ci_high"] for r in accuracy)
    assert not [r for r in out["eval_rows"] if r["metric"] == "error"]
