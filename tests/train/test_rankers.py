"""A colbert, splade or cross_encoder run ranks raw texts (what mteb's search protocol hands
it) exactly as its own evaluators rank the tokenised set: the same token ids, the same top k and
scores, the same pair scores."""

import numpy as np
import pytest

from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.train import train_and_evaluate


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rankers")
    root = beir.synthetic_collection(tmp / "coll", num_docs=60, num_queries=12, num_train=32,
                                     seed=3)
    coll = f"beir:{root}"
    out = {}
    for method in ("colbert", "splade", "cross_encoder"):
        cfg = C.Config(
            seed=0, data=C.DataConfig(name=coll, max_len=16, data_dir=str(tmp / "tfds")),
            encoder=C.EncoderConfig(name="text_transformer", width=16, depth=1, num_heads=2,
                                    mlp_dim=32),
            method=C.MethodConfig(name=method), optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
            train=C.TrainConfig(batch_size=8, steps=2, ckpt_every=0, num_devices=1),
            eval=C.EvalConfig(evaluators=(), sets=(coll,), bootstrap=0, reference_rows=False))
        train_and_evaluate(cfg, tmp / method, progress=False, verbose=False)
        out[method] = str(tmp / method)
    return coll, out


def _set(run: str, coll: str):
    from repr_jax.train.compare import run_embedder
    embedder, variables, cfg = run_embedder(run, [coll])
    (s,) = embedder.sets("retrieval")
    return embedder, variables, s


@pytest.mark.slow
def test_rankers_read_texts_as_their_runs_evaluators_read_the_set(runs):
    from repr_jax.eval import late_interaction as li
    from repr_jax.eval.rerank import score_candidates
    from repr_jax.eval.sparse_retrieval import build_index, search
    from repr_jax.train.rankers import ranker_of
    from repr_jax.train.run import load_trained
    coll, paths = runs
    for method, path in paths.items():
        embedder, variables, s = _set(path, coll)
        queries, corpus = (list(t) for t in s.texts)
        ranker = ranker_of(path, progress=False)
        assert ranker.method == method and ranker.parameters > 0 and ranker.max_tokens == 16
        _, _, m, _ = load_trained(path, text_only=True)
        cand = np.stack([np.roll(np.arange(len(corpus)), -i)[:7] for i in range(len(queries))])
        q_of = np.repeat(np.arange(len(queries)), 7)
        got = ranker.pairs(queries, corpus, q_of, cand.reshape(-1)).reshape(cand.shape)
        if method == "splade":
            q = embedder.embed(variables, s.queries, "query", sparse=True)
            c = embedder.embed(variables, s.corpus, "pos", sparse=True)
            want = search(build_index(c), q, 10)
            scores, ids = ranker.search(queries, corpus, 10)
            np.testing.assert_array_equal(ids, want.ids)
            np.testing.assert_allclose(scores, want.scores, rtol=1e-6)
            dense = (q @ c.T).toarray()
            np.testing.assert_allclose(got, np.take_along_axis(dense, cand, 1), rtol=1e-5,
                                       atol=1e-6)
            continue
        want_pairs = score_candidates(m.score, variables, s.queries, s.corpus, cand,
                                      pad_id=embedder.pad_id)
        np.testing.assert_allclose(got, want_pairs, rtol=1e-5, atol=1e-6)
        if method == "cross_encoder":
            assert ranker.search is None
            continue
        with __import__("tempfile").TemporaryDirectory() as tmp:
            index = li.build_index(m.token_vectors("doc"), variables, s.corpus, f"{tmp}/i",
                                   pad_id=embedder.pad_id)
            q, qm = li.embed_tokens(m.token_vectors("query"), variables, s.queries)
            want_s, want_i = li.search(index, q, qm, k=10)
        scores, ids = ranker.search(queries, corpus, 10)
        np.testing.assert_array_equal(ids, want_i)
        np.testing.assert_allclose(scores, want_s, rtol=1e-6)


def test_a_run_that_embeds_one_vector_is_no_ranker(tmp_path):
    from repr_jax.train.rankers import ranker_of
    cfg = C.Config(data=C.DataConfig(name="wordnet"),
                   encoder=C.EncoderConfig(name="text_transformer"),
                   method=C.MethodConfig(name="biencoder"))
    C.save_json(cfg, tmp_path / "config.json")
    with pytest.raises(ValueError, match="a biencoder run embeds each text as one vector; a "
                                         "ranker is a colbert, splade, cross_encoder run"):
        ranker_of(tmp_path)
