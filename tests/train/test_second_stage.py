"""The second stage end to end: a cross-encoder trains on a pairs: file with negatives and
reranks a beir: set; `repr-jax score` writes its scores; a bi-encoder distils them."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import collection_vocab

from repr_jax import cli
from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.data.tokenizer import Sides, make_tokenizer
from repr_jax.train import train_and_evaluate
from repr_jax.train.run import load_trained


def _config(tmp_path, root, data, vocab, **method):
    return C.Config(
        seed=0,
        data=C.DataConfig(name=data, max_len=24, data_dir=str(tmp_path / "tfds"),
                          tokenizer=str(vocab)),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(**method),
        optim=C.OptimConfig(lr=2e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=30, ckpt_every=0, num_devices=1, log_every=5),
        eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False, bootstrap=50,
                          sets=(f"beir:{root}",)))


@pytest.mark.slow
def test_cross_encoder_reranks_scores_and_a_biencoder_distils(tmp_path):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=400, num_queries=30,
                                     num_train=300, seed=4)
    vocab = collection_vocab(tmp_path)
    mined = tmp_path / "mined.jsonl"
    assert cli.main(["mine", "--bm25", "--data", f"beir:{root}", "--out", str(mined),
                     "--range-min", "1", "--num-negatives", "2", "--no-progress"]) == 0
    ce = _config(tmp_path, root, f"pairs:{mined}", vocab, name="cross_encoder",
                 negatives_per_query=2)
    ce = C.override(ce, ["eval.evaluators=('rerank',)", "eval.rerank.depth=20"])
    rows = train_and_evaluate(ce, tmp_path / "ce", progress=False, verbose=False)["eval_rows"]
    got = {r["metric"]: r["value"] for r in rows if r["evaluator"] == "rerank"}
    for m in ("ndcg@10", "recall@10", "mrr@10"):
        assert {f"beir_coll/{s}/{m}" for s in ("first_stage", "reranked", "gain")} <= set(got)
        np.testing.assert_allclose(got[f"beir_coll/gain/{m}"], got[f"beir_coll/reranked/{m}"]
                                   - got[f"beir_coll/first_stage/{m}"], atol=1e-5)
    losses = [json.loads(line)["loss"] for line in open(tmp_path / "ce" / "metrics.jsonl")]
    assert np.mean(losses[-2:]) < np.mean(losses[:2])

    scored = tmp_path / "scored.jsonl"
    assert cli.main(["score", "--workdir", str(tmp_path / "ce"), "--data", f"pairs:{mined}",
                     "--out", str(scored), "--batch-size", "7", "--no-progress"]) == 0
    before = [json.loads(line) for line in mined.read_text().splitlines()]
    after = [json.loads(line) for line in scored.read_text().splitlines()]
    assert len(after) == len(before)
    cfg, _, method, state = load_trained(tmp_path / "ce", text_only=True)
    tok, sides = make_tokenizer(str(vocab)), Sides.of_section(cfg.data)
    for b, a in zip(before[:5], after[:5]):  # the same lines, the scores recomputed one by one
        assert {k: v for k, v in a.items() if "score" not in k} == \
            {k: v for k, v in b.items() if "score" not in k}
        q = sides.encode(tok, [a["query"]], "query")
        for text, value in zip([a["positive"]] + a["negatives"],
                               [a["positive_score"]] + a["negative_scores"]):
            d = sides.encode(tok, [text], "doc")
            want = float(method.score(state.variables, jnp.asarray(q), jnp.asarray(d))[0])
            assert abs(want - value) < 1e-4, (text, want, value)

    for objective in ("margin_mse", "kl_distill"):
        bi = _config(tmp_path, root, f"pairs:{scored}", vocab, name="biencoder",
                     objective=objective, negatives_per_query=2, proj_dim=0, temperature=0.1)
        out = train_and_evaluate(bi, tmp_path / objective, progress=False, verbose=False)
        losses = [json.loads(line)["loss"] for line in open(tmp_path / objective /
                                                            "metrics.jsonl")]
        assert np.isfinite(losses).all() and np.mean(losses[-2:]) < np.mean(losses[:2])
        assert any(r["metric"] == "beir_coll/ndcg@10" for r in out["eval_rows"])

    # the distilled bi-encoder as the reranker's first stage: its own nDCG@10 is the first stage's
    assert cli.main(["eval", "--workdir", str(tmp_path / "ce"), "--set",
                     "eval.evaluators=('rerank',)", "--set", "eval.rerank.depth=20", "--set",
                     f"eval.rerank.first_stage={tmp_path / 'margin_mse'}", "--no-progress"]) == 0
    reranked = json.loads((tmp_path / "ce" / "eval" / "step_30.json").read_text())
    first = next(r["value"] for r in reranked
                 if r["metric"] == "beir_coll/first_stage/ndcg@10")
    own = next(r["value"] for r in json.loads(
        (tmp_path / "margin_mse" / "eval" / "step_30.json").read_text())
        if r["metric"] == "beir_coll/ndcg@10" and r["evaluator"] == "retrieval")
    np.testing.assert_allclose(first, own, atol=1e-6)

    assert cli.main(["score", "--workdir", str(tmp_path / "margin_mse"), "--data",
                     f"pairs:{mined}", "--out", str(tmp_path / "x.jsonl")]) == 2  # no scorer
    assert cli.main(["score", "--workdir", str(tmp_path / "ce"), "--data", f"pairs:{mined}",
                     "--out", str(mined)]) == 2  # an output is never an input
