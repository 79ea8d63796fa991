"""ColBERT: MaxSim equals a direct loop, the on-disk exact search equals brute force (float16 and
int8 storage), the contrastive loss equals its formula, and it trains and searches a beir: set."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import collection_vocab

from repr_jax.eval import late_interaction
from repr_jax.eval.late_interaction import (build_index, maxsim, open_index, paired_maxsim,
                                            score_pairs, search)
from repr_jax.methods.colbert import ColBERT, colbert


def _direct(q, qm, d, dm):
    out = np.zeros((len(q), len(d)))
    for i in range(len(q)):
        for j in range(len(d)):
            for a in range(q.shape[1]):
                if qm[i, a]:
                    sims = [q[i, a] @ d[j, b] for b in range(d.shape[1]) if dm[j, b]]
                    out[i, j] += max(sims) if sims else 0.0
    return out


def _unit(rng, *shape):
    x = rng.normal(size=shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_maxsim_equals_a_direct_loop():
    rng = np.random.default_rng(0)
    q, d = _unit(rng, 3, 5, 8), _unit(rng, 4, 7, 8)
    qm = rng.random((3, 5)) < 0.7
    dm = rng.random((4, 7)) < 0.6
    dm[2] = False  # a document with no token left scores 0
    want = _direct(q, qm, d, dm)
    np.testing.assert_allclose(maxsim(q, qm, d, dm), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(paired_maxsim(q[:3], qm, d[:3], dm[:3]), np.diag(want[:, :3]),
                               rtol=1e-5, atol=1e-6)


def _token_fn(table):
    """Token vectors of ids from a fixed table (a real lookup, mask = not padding)."""
    def fn(variables, ids):
        del variables
        return jnp.asarray(table)[ids], ids != 0
    return fn


@pytest.mark.parametrize("storage, tol", [("float16", 2e-3), ("int8", 3e-2)])
def test_on_disk_search_equals_brute_force(tmp_path, storage, tol):
    rng = np.random.default_rng(1)
    table = _unit(rng, 60, 16)
    corpus = np.zeros((500, 24), np.int32)
    for row in corpus:
        n = rng.integers(1, 24)
        row[:n] = rng.integers(1, 60, n)
    queries = rng.integers(1, 60, (9, 6)).astype(np.int32)
    index = build_index(_token_fn(table), None, corpus, tmp_path / "idx", storage=storage,
                        batch_size=64)
    tokens = int((corpus != 0).sum())
    per_vector = 16 * 2 if storage == "float16" else 16 + 4
    assert index.nbytes == tokens * per_vector + 8 * 501
    scores, idx = search(index, table[queries], queries != 0, k=5, tile=64)
    full = _direct(table[queries], queries != 0, table[corpus], corpus != 0)
    np.testing.assert_allclose(scores, np.take_along_axis(full, idx, 1), atol=tol)
    np.testing.assert_allclose(scores[:, 0], full.max(1), atol=tol)  # nothing better missed
    again = open_index(tmp_path / "idx")
    np.testing.assert_array_equal(again.offsets, index.offsets)
    assert not (tmp_path / "idx.partial").exists()
    (tmp_path / "idx" / "offsets.npy").unlink()
    with pytest.raises(ValueError, match="not a complete token index") as e:
        open_index(tmp_path / "idx")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("docs, pairs, chunk", [(5, 7, 1024), (300, 2000, 64)])
def test_pairs_embed_each_text_once_and_equal_the_direct_loop(monkeypatch, docs, pairs, chunk):
    monkeypatch.setattr(late_interaction, "PAIR_DOCS", chunk)  # several chunks at the large size
    rng = np.random.default_rng(2)
    table = _unit(rng, 60, 8)
    corpus = np.zeros((docs, 20), np.int32)
    for row in corpus:
        n = rng.integers(1, 20)
        row[:n] = rng.integers(1, 60, n)
    queries = rng.integers(0, 60, (11, 6)).astype(np.int32)
    queries[:, 0] = 1 + queries[:, 0] % 59  # at least one token a query
    q_of, d_of = rng.integers(0, 11, pairs), rng.integers(0, docs, pairs)
    seen, embed = [], late_interaction.embed_tokens

    def counted(fn, variables, ids, **kw):
        seen.append(len(ids))
        return embed(fn, variables, ids, **kw)

    monkeypatch.setattr(late_interaction, "embed_tokens", counted)
    fn = _token_fn(table)
    got = score_pairs(fn, fn, None, queries, corpus, q_of, d_of, pad_id=0, batch_size=32)
    full = _direct(table[queries], queries != 0, table[corpus], corpus != 0)
    np.testing.assert_allclose(got, full[q_of, d_of], rtol=1e-5, atol=1e-6)
    assert sum(seen) == len(np.unique(q_of)) + len(np.unique(d_of))  # no text read twice
    assert len(score_pairs(fn, fn, None, queries, corpus, [], [], pad_id=0)) == 0


def test_loss_is_a_softmax_over_maxsim_of_the_batch():
    from repr_jax.config import MethodConfig
    from repr_jax.encoders.text_transformer import TextTransformer
    enc = TextTransformer(vocab_size=40, width=16, depth=1, num_heads=2, mlp_dim=32, max_len=16)
    method = colbert(enc, dim=8, pad_id=0, negatives=0)
    rng = np.random.default_rng(2)
    batch = {"x": jnp.asarray(rng.integers(1, 40, (4, 6)), jnp.int32),
             "x_pos": jnp.asarray(rng.integers(1, 40, (4, 9)), jnp.int32)}
    variables = method.init(jax.random.PRNGKey(0), batch)
    hp = MethodConfig(name="colbert", temperature=0.5)
    value, _ = method.loss(variables["params"], {}, {}, batch, jax.random.PRNGKey(1), hp)
    q, qm = method.model.apply(variables, batch["x"], method=ColBERT.embed_tokens_query)
    d, dm = method.model.apply(variables, batch["x_pos"], method=ColBERT.embed_tokens_doc)
    s = _direct(np.asarray(q), np.asarray(qm), np.asarray(d), np.asarray(dm)) / 0.5
    want = np.mean(np.log(np.exp(s).sum(1)) - np.diag(s))
    np.testing.assert_allclose(float(value), want, rtol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(q), axis=-1), 1.0, rtol=1e-5)
    pair = method.score(variables, batch["x"], batch["x_pos"])
    np.testing.assert_allclose(pair, np.diag(s) * 0.5, rtol=1e-4)


def test_token_functions_compile_once_across_calls():
    # a new function object a call compiled every shape again (each chunk of score_pairs)
    from repr_jax.encoders.text_transformer import TextTransformer
    enc = TextTransformer(vocab_size=40, width=16, depth=1, num_heads=2, mlp_dim=32, max_len=16)
    method = colbert(enc, dim=8, pad_id=0, negatives=0)
    ids = np.random.default_rng(3).integers(1, 40, (6, 9)).astype(np.int32)
    variables = method.init(jax.random.PRNGKey(0), {"x": jnp.asarray(ids),
                                                    "x_pos": jnp.asarray(ids)})
    fn = method.token_vectors("doc")
    assert method.token_vectors("doc") is fn and method.token_vectors("query") is not fn
    first = late_interaction.embed_tokens(fn, variables, ids, batch_size=4, pad_id=0)
    again = late_interaction.embed_tokens(method.token_vectors("doc"), variables, ids,
                                          batch_size=4, pad_id=0)
    assert late_interaction.jitted(fn)._cache_size() == 1  # two calls, one shape, one compile
    np.testing.assert_array_equal(first[0], again[0])
    want = method.model.apply(variables, jnp.asarray(ids), method=ColBERT.embed_tokens_doc)
    np.testing.assert_allclose(first[0], np.asarray(want[0]), rtol=1e-5, atol=1e-6)


def test_query_expansion_pads_with_mask_tokens_and_punctuation_is_left_out():
    from repr_jax.encoders.text_transformer import TextTransformer
    enc = TextTransformer(vocab_size=40, width=16, depth=1, num_heads=2, mlp_dim=32, max_len=16)
    model = ColBERT(enc, dim=8, pad_id=0, mask_id=3, query_len=8, punctuation=(5,))
    ids = jnp.asarray([[2, 7, 0, 0], [2, 5, 9, 5]], jnp.int32)
    variables = model.init(jax.random.PRNGKey(0), {"x": ids, "x_pos": ids})
    q, qm = model.apply(variables, ids, method=ColBERT.embed_tokens_query)
    assert q.shape[:2] == (2, 8) and bool(qm.all())  # every query token, [MASK]s too, scores
    _, dm = model.apply(variables, ids, method=ColBERT.embed_tokens_doc)
    assert dm.tolist() == [[True, True, False, False], [True, False, True, False]]


@pytest.mark.parametrize("name", ["colbert", "cross_encoder"])
def test_pair_readers_on_data_without_text_are_one_line(name):
    from repr_jax import config as C
    from repr_jax.config import ConfigError
    from repr_jax.train import build_method
    from repr_jax.train.run import load_dataset
    cfg = C.Config(data=C.DataConfig(name="latent_modalities", num_examples=100),
                   encoder=C.EncoderConfig(name="mlp", widths=(8,)),
                   method=C.MethodConfig(name=name))
    with pytest.raises(ConfigError, match=f"'{name}' reads query/document text pairs") as e:
        build_method(cfg, load_dataset(cfg))
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_colbert_trains_and_searches_a_beir_set(tmp_path):
    from repr_jax import config as C
    from repr_jax.data import beir
    from repr_jax.train import train_and_evaluate
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=300, num_queries=30,
                                     num_train=300, seed=5)
    vocab = collection_vocab(tmp_path)
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=24, data_dir=str(tmp_path / "tfds"),
                          tokenizer=str(vocab)),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(name="colbert", dim=16, temperature=0.1, query_expansion=True),
        optim=C.OptimConfig(lr=2e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=30, ckpt_every=0, num_devices=1, log_every=5),
        eval=C.EvalConfig(evaluators=("late_interaction", "rerank"), bootstrap=50,
                          sets=(f"beir:{root}",)))
    rows = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)["eval_rows"]
    ours = {r["metric"]: r["value"] for r in rows if r["representation"] == "colbert encoder"}
    random = {r["metric"]: r["value"] for r in rows
              if r["representation"] == "random-init encoder"}
    assert ours["beir_coll/ndcg@10"] > random["beir_coll/ndcg@10"]
    assert ours["beir_coll/bytes_per_doc"] > 0 and "ndcg@10" in ours  # the test pairs too
    assert "beir_coll/reranked/ndcg@10" in ours  # MaxSim reranks BM25's candidates
    losses = [json.loads(line)["loss"] for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert np.mean(losses[-2:]) < np.mean(losses[:2])
