"""``repr-jax compare``: paired bootstrap differences between runs on the same queries."""

import csv
import json

import numpy as np
import pytest

from repr_jax import cli
from repr_jax import config as C
from repr_jax.data import beir, eval_sets
from repr_jax.eval.bm25 import bm25_per_query
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
    assert cli.main(["compare", str(short), str(long), str(short), "bm25", "--metrics",
                     "ndcg@10", "recall@10", "--bootstrap", "200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "beir_coll" in printed and "difference" in printed
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 3 * 2 and json.loads(out.with_suffix(".json").read_text())
    same = [r for r in rows if r["run"] == str(short)]
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
