"""An SAE spliced into the model its activations came from (``repr_jax.train.splice``): the block's
output is replaced where the store kept tokens and every later block reads the replacement
(checked where the result is known by hand: an ablated last block, an ablated first block under
mean pooling); the sae evaluator's downstream rows are the model's own nDCG@10 and next-token
cross-entropy, computed here without the splicing code; the retrieval task keeps every relevant
document."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.train import activations as acts
from repr_jax.train import splice
from repr_jax.train import train_and_evaluate

from tiny_llm import tiny_params, write_gguf


def _identity(variables, x):
    del variables
    return x


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A two-block text_transformer bi-encoder (mean pooling, no head) trained 2 steps on a
    pairs file, and stores of both its blocks."""
    root = tmp_path_factory.mktemp("splice")
    pairs = root / "pairs.jsonl"
    rows = [{"query": f"what is item {i}?" + " really" * (i % 5),
             "positive": f"item {i} is a thing of kind {i % 7}"} for i in range(60)]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=f"pairs:{pairs}", max_len=24),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=2, pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", proj_dim=0),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), bootstrap=0, reference_rows=False))
    train_and_evaluate(cfg, root / "run", progress=False, verbose=False)
    stores = {}
    for layer in (0, 1):
        stores[layer] = root / f"layer{layer}"
        acts.activations(out=stores[layer], layer=layer, data=f"pairs:{pairs}",
                         workdir=str(root / "run"), progress=False)
    return dict(root=root, pairs=pairs, run=root / "run", stores=stores)


def _passes(host):
    model = host.model()
    x = model.sides.encode(model.tokenizer, acts.texts_of(host.meta["data"])[:12], "doc")
    return model, x, {mode: host._embed(model, host._pass(model, mode, _identity), None, x)
                      for mode in splice.MODES}


def test_an_ablated_last_block_is_what_mean_pooling_reads(text_run):
    """Layer 1 is the last block and the model mean-pools its kept tokens: zero-ablated, every
    embedding is 0; mean-ablated, every embedding is the store's mean; an identity SAE changes
    nothing."""
    host = splice.Host(text_run["stores"][1])
    model, x, out = _passes(host)
    np.testing.assert_allclose(out["clean"], np.asarray(model.embed(model.embed_variables, x)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["spliced"], out["clean"])
    np.testing.assert_array_equal(out["zero_ablation"], 0.0)
    np.testing.assert_allclose(out["mean_ablation"], np.broadcast_to(host.mean_D, (len(x), 32)),
                               rtol=1e-6)
    store = np.load(text_run["stores"][1] / "vectors.npy")
    index = np.load(text_run["stores"][1] / "index.npy")
    np.testing.assert_allclose(host.mean_D, store[index[:, 0] % 10 >= 2].mean(axis=0),
                               rtol=1e-5, atol=1e-6)


def test_an_ablated_first_block_reaches_the_later_one(text_run):
    """Zero-ablating block 0 at every kept token leaves block 1 reading the same token at every
    kept position (padding is masked out of attention): every text's embedding is then the same
    vector, which is not zero and not the clean one — block 1 ran on the replacement."""
    host = splice.Host(text_run["stores"][0])
    _, x, out = _passes(host)
    zero = out["zero_ablation"]
    np.testing.assert_allclose(zero, np.broadcast_to(zero[0], zero.shape), rtol=1e-4, atol=1e-5)
    assert np.abs(zero[0]).max() > 1e-3 and not np.allclose(zero, out["clean"], atol=1e-3)
    np.testing.assert_array_equal(out["spliced"], out["clean"])


def test_the_retrieval_task_keeps_every_relevant_document(text_run):
    queries, corpus, qrels = splice.retrieval_task(f"pairs:{text_run['pairs']}", max_queries=7,
                                                   max_corpus=20)
    assert len(queries) == 7 and len(corpus) == 20 and qrels.shape == (7, 20)
    for q, row in zip(queries, qrels):
        i = int(q.split("item ")[1].split("?")[0])
        assert [corpus[j] for j in np.flatnonzero(row)] == [f"item {i} is a thing of kind {i % 7}"]
    _, small, qrels = splice.retrieval_task(f"pairs:{text_run['pairs']}", max_queries=7,
                                            max_corpus=3)
    assert len(small) == 7 and (qrels.sum(axis=1) == 1).all()  # never fewer than the relevant


def test_the_sae_evaluators_downstream_rows_are_the_models_own_ndcg(text_run, tmp_path):
    """An SAE trained on layer 0 through the one loop: rows for every mode with intervals; the
    clean row is the host's nDCG@10 computed here from its embeddings and a full score matrix."""
    from repr_jax.eval.retrieval import retrieval_metrics
    from repr_jax.train.run import load_trained
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=f"activations:{text_run['stores'][0]}"),
        method=C.MethodConfig(name="sae"),
        optim=C.OptimConfig(lr=3e-3, warmup_steps=0, weight_decay=0.0),
        train=C.TrainConfig(batch_size=64, steps=20, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("sae",), reference_rows=False, bootstrap=50))
    cfg = C.override(cfg, ["method.latents=64", "method.k=8", "eval.sae.max_queries=30",
                           "eval.sae.max_corpus=40"])
    out = train_and_evaluate(cfg, tmp_path / "sae", progress=False, verbose=False)
    rows = {r["metric"]: r for r in out["eval_rows"] if r["evaluator"] == "sae"}
    for mode in (*splice.MODES, "recovered"):
        row = rows[f"ndcg@10_{mode}"]
        assert row["ci_low"] <= row["value"] <= row["ci_high"], row
    assert 0 <= rows["ndcg@10_spliced"]["value"] <= 1

    queries, corpus, qrels = splice.retrieval_task(f"pairs:{text_run['pairs']}", max_queries=30,
                                                   max_corpus=40)
    run_cfg, _, method, state = load_trained(text_run["run"], text_only=True)
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    sides, tok = Sides.of_section(run_cfg.data), make_tokenizer(run_cfg.data.tokenizer)
    q = np.asarray(method.embed(state.variables, sides.encode(tok, queries, "query")))
    d = np.asarray(method.embed(state.variables, sides.encode(tok, corpus, "doc")))
    q, d = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in (q, d))
    expected = retrieval_metrics(q @ d.T, qrels, ks=(10,))["ndcg@10"]
    assert rows["ndcg@10_clean"]["value"] == pytest.approx(expected, abs=1e-5)

    no_rows = C.override(cfg, ["eval.sae.downstream=False", "train.steps=1"])
    out = train_and_evaluate(no_rows, tmp_path / "plain", progress=False, verbose=False)
    assert not any("ndcg" in r["metric"] for r in out["eval_rows"])


def test_a_decoders_cross_entropy_rows(tmp_path):
    """A tiny decoder run on a BEIR corpus, layer 0 stored: with an identity SAE spliced, the
    cross-entropy is the clean one; the clean one is the model's own next-token loss over the
    store's test texts, computed here from its logits."""
    from repr_jax.encoders.decoder_lm import next_token_logits
    coll = beir.synthetic_collection(tmp_path / "coll", num_docs=60, num_queries=8, num_train=40,
                                     seed=1)
    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{coll}", max_len=24, data_dir=str(tmp_path / "tfds")),
        encoder=C.EncoderConfig(name="decoder_lm", init_from=str(gguf), pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=1, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False, bootstrap=0))
    train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    acts.activations(out=tmp_path / "store", layer=0, data=f"beir:{coll}",
                     workdir=str(tmp_path / "run"), progress=False)
    host = splice.Host(tmp_path / "store", max_texts=5, max_queries=8, max_corpus=30,
                       bootstrap=20)
    rows = dict(host.rows(_identity, None))
    assert rows["ce_spliced"] == pytest.approx(rows["ce_clean"], rel=1e-6)
    assert {f"ndcg@10_{m}" for m in splice.MODES} <= set(rows)

    model = host.model()
    texts = acts.texts_of(f"beir:{coll}")
    ids = model.sides.encode(model.tokenizer, [texts[i] for i in range(0, 50, 10)], "doc")
    tokens = model.module.apply(model.variables, jnp.asarray(ids))[1]["tokens"]
    logp = jax.nn.log_softmax(next_token_logits(model.variables["params"], tokens), axis=-1)
    assert model.skip_first == 1  # a decoder's default: its first token is not spliced
    kept = np.asarray(model.text(ids))  # but it is predicted, and predicts the second
    total, count = 0.0, 0
    for b in range(len(ids)):
        for t in range(ids.shape[1] - 1):
            if kept[b, t] and kept[b, t + 1]:
                total -= float(logp[b, t, ids[b, t + 1]])
                count += 1
    assert rows["ce_clean"] == pytest.approx(total / count, rel=1e-5)


def test_a_vits_probe_rows_on_its_labelled_images(tmp_path):
    """A tiny ViT trained 2 steps on digits, block 0 stored over its train split: the probe rows
    come back with intervals; with an identity SAE the spliced accuracy is the clean one, and the
    clean one is a logistic probe on the run's own embeddings of the store's examples."""
    from repr_jax.eval.linear_probe import linear_probe
    from repr_jax.train.run import load_trained
    cfg = C.override(C.load("simclr_digits:quick"), [
        "encoder.name=vit", "encoder.patch_size=4", "encoder.width=32", "encoder.depth=2",
        "encoder.num_heads=2", "encoder.mlp_dim=64", "train.steps=2", "train.batch_size=32",
        "train.ckpt_every=0", "train.num_devices=1", "eval.evaluators=('knn',)",
        "eval.reference_rows=False"])
    train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    acts.activations(out=tmp_path / "store", layer=0, data="digits", workdir=str(tmp_path / "run"),
                     progress=False)
    host = splice.Host(tmp_path / "store", max_texts=200, bootstrap=20)
    rows = dict(host.rows(_identity, None))
    for mode in splice.MODES:
        row = rows[f"probe_accuracy_{mode}"]
        assert row.low <= row <= row.high and 0 <= row <= 1
    assert rows["probe_accuracy_spliced"] == rows["probe_accuracy_clean"]

    _, dataset, method, state = load_trained(tmp_path / "run")
    split = dataset.splits["train"]
    train, test = splice._split_rows(len(split["label"]), 200)
    emb = np.asarray(method.embed(state.variables, np.asarray(split["x"])[np.r_[train, test]]))
    y = np.asarray(split["label"])[np.r_[train, test]]
    n = len(train)
    expected = linear_probe(emb[:n], y[:n], emb[n:], y[n:], kind="logistic")["accuracy"]
    # the host embeds in batches, this all at once: XLA's programs for the two shapes round
    # differently (~1e-6), which may move one borderline test example, never more
    assert float(rows["probe_accuracy_clean"]) == pytest.approx(expected, abs=1 / len(test) + 1e-6)


def test_a_decoder_read_from_its_weights_writes_and_splices(tmp_path):
    """``--init-from`` a GGUF: the store holds the decoder's own block outputs at the text
    tokens (its layers computed here by the module), and the host splices into it with the
    tied head (an identity SAE gives the clean cross-entropy)."""
    from repr_jax.encoders.decoder_lm_weights import load_decoder_lm
    coll = beir.synthetic_collection(tmp_path / "coll", num_docs=40, num_queries=6, num_train=20,
                                     seed=2)
    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    meta = acts.activations(out=tmp_path / "store", layer=1, data=f"beir:{coll}",
                            init_from=str(gguf), max_len=32, progress=False)
    assert (meta["encoder"], meta["step"], meta["width"]) == ("decoder_lm", None, 32)
    loaded = load_decoder_lm(gguf)
    texts = acts.texts_of(f"beir:{coll}")
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    x = Sides(32, 32).encode(make_tokenizer(str(gguf)), texts[:3], "doc")
    layer1 = np.asarray(loaded.module().apply({"params": loaded.params}, jnp.asarray(x))[1]
                        ["layers"][1])
    store = np.load(tmp_path / "store" / "vectors.npy")
    index = np.load(tmp_path / "store" / "index.npy")
    for e in range(3):
        rows = index[:, 0] == e
        np.testing.assert_allclose(store[rows], layer1[e][index[rows, 1]], rtol=1e-5, atol=1e-5)
        # the first token (the attention sink) is left out by default: every other text token
        np.testing.assert_array_equal(index[rows, 1], np.arange(1, int((x[e] >= 0).sum())))
    assert meta["skip_first"] == 1 and meta["max_norm_ratio"] == acts.DECODER_MAX_NORM
    host = splice.Host(tmp_path / "store", max_texts=4, max_queries=6, max_corpus=20,
                       bootstrap=0)
    rows = dict(host.rows(_identity, None))
    assert rows["ce_spliced"] == pytest.approx(rows["ce_clean"], rel=1e-6)
    assert rows["ce_zero_ablation"] != pytest.approx(rows["ce_clean"], rel=1e-3)
    # zero-ablating the stored tokens leaves the first token's states as they are (causal: it
    # reads only itself) and changes every later one's
    model = host.model()
    kept = np.asarray(model.kept(x))
    clean, zero = (np.asarray(host._pass(model, mode, _identity, "tokens")(None, x, kept))
                   for mode in ("clean", "zero_ablation"))
    np.testing.assert_allclose(zero[:, 0], clean[:, 0], rtol=1e-6, atol=1e-6)
    assert np.all(np.abs(zero[:, 1] - clean[:, 1]).max(axis=-1) > 1e-3)

    whole = acts.activations(out=tmp_path / "whole", layer=1, data=f"beir:{coll}",
                             init_from=str(gguf), max_len=32, progress=False, skip_first=0)
    assert whole["vectors"] == meta["vectors"] + len(texts) and whole["skip_first"] == 0
    with pytest.raises(ValueError, match="--skip-first 2: .*one vector per example"):
        acts.activations(out=tmp_path / "emb", layer="embedding", data=f"beir:{coll}",
                         init_from=str(gguf), max_len=32, progress=False, skip_first=2)
