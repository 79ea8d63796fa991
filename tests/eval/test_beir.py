"""BEIR-format collections: reading (one-line errors), training pairs, and evaluation with sparse
qrels whose nDCG@10 / Recall@100 / MRR@10 equal pytrec_eval's on the same run."""

import csv

import numpy as np
import pytest

from repr_jax import data
from repr_jax.data import beir, eval_sets
from repr_jax.eval import Embedder
from repr_jax.eval.retrieval import Retrieval, SparseQrels, retrieve, topk_metrics

pytrec_eval = pytest.importorskip("pytrec_eval")


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    root = tmp_path_factory.mktemp("beir") / "coll"
    return beir.synthetic_collection(root, num_docs=3000, num_queries=150, num_train=400, seed=1)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """A WordPiece vocabulary holding the collection's words whole (so ids are words)."""
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    path.write_text("\n".join(specials + [f"w{i}" for i in range(2000)] + ["topic"]
                              + [str(i) for i in range(20)]) + "\n")
    return str(path)


def _bag_of_words(ids, width=2048):
    out = np.zeros((len(ids), width), np.float32)
    for i, row in enumerate(np.asarray(ids)):
        np.add.at(out[i], row[row > 4] % width, 1.0)
    return out


def test_metrics_equal_pytrec_eval_on_a_sparse_collection(collection, vocab, tmp_path):
    s = eval_sets.beir(collection, tokenizer=vocab, max_len=48, data_dir=str(tmp_path))
    assert isinstance(s.qrels, SparseQrels) and s.corpus.shape == (3000, 48)
    assert isinstance(s.corpus, np.memmap)  # tokenised once, kept on disk
    q, c = _bag_of_words(s.queries), _bag_of_words(s.corpus)
    c += np.random.default_rng(0).normal(0, 1e-3, c.shape).astype(np.float32)  # no ties
    scores, idx = retrieve(q, c, k=100)
    ours = topk_metrics(idx, s.qrels, (10, 100))
    # pytrec_eval on the same top-100 run, qrels read from the file by a plain TSV reader
    with open(collection / "qrels" / "test.tsv") as f:
        rows = list(csv.reader(f, delimiter="\t"))[1:]
    qrels = {}
    for qid, did, grade in rows:
        qrels.setdefault(qid, {})[did] = int(grade)
    qids = sorted(qrels, key=lambda k: int(k[1:]))  # eval_set's rows: the judged queries, sorted
    assert len(qids) == len(s.queries) == 150
    run = {qid: {f"d{int(j)}": float(v) for j, v in zip(idx[i], scores[i])}
           for i, qid in enumerate(qids)}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100", "map_cut_100"}
                                         ).evaluate(run)
    top10 = {qid: dict(sorted(d.items(), key=lambda kv: -kv[1])[:10]) for qid, d in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    assert ours["ndcg@10"] == pytest.approx(np.mean([ref[q]["ndcg_cut_10"] for q in qids]),
                                            abs=1e-6)
    assert ours["recall@100"] == pytest.approx(np.mean([ref[q]["recall_100"] for q in qids]),
                                               abs=1e-6)
    assert ours["mrr@10"] == pytest.approx(np.mean([rr[q]["recip_rank"] for q in qids]), abs=1e-6)
    assert ours["map@100"] == pytest.approx(np.mean([ref[q]["map_cut_100"] for q in qids]),
                                            abs=1e-6)
    assert ours["ndcg@10"] > 0.05  # the words carry signal: the check is not of all-zero runs
    dense = topk_metrics(idx, s.qrels.dense(), (10, 100))
    for k, v in ours.items():
        assert v == pytest.approx(dense[k], abs=1e-7), k


def test_retrieval_evaluator_runs_a_beir_set(collection, tmp_path):
    s = eval_sets.beir(collection, max_len=48, data_dir=str(tmp_path))
    split = {"x": np.asarray(s.queries[:10]), "label": np.zeros(10, np.int32)}
    embedder = Embedder(lambda v, x: _embed(x), {"test": split}, eval_sets=[s], batch_size=256)
    rows = dict(Retrieval(embedder, metrics=("ndcg@10", "recall@100"), bootstrap=50).run(None))
    assert set(rows) == {"beir_coll/ndcg@10", "beir_coll/recall@100"}
    assert 0 < float(rows["beir_coll/ndcg@10"]) < 1


def _embed(x):
    import jax
    import jax.numpy as jnp
    return jnp.sum(jax.nn.one_hot(x % 97, 97) * (x > 4)[..., None], axis=1)


def test_training_pairs_from_train_qrels(collection, tmp_path):
    ds = data.load(f"beir:{collection}", data_dir=str(tmp_path), max_len=32)
    judged = beir.read_collection(collection).qrels
    n_train = int((judged["train"]["grade"] >= 1).sum())
    assert len(ds.splits["train"]["x"]) + len(ds.splits["validation"]["x"]) == n_train
    assert len(ds.splits["test"]["x"]) == 150  # one (best) document per test query
    assert "negatives" not in ds.splits["train"]


def _lines(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("damage, needle", [
    (lambda r: (r / "corpus.jsonl").unlink(), "no corpus.jsonl"),
    (lambda r: _lines(r / "corpus.jsonl",
                      '{"_id": "d0", "text": "a"}\n{"_id": "d0", "text": "b"}\n'),
     "corpus.jsonl:2: duplicate _id 'd0' (first at line 1)"),
    (lambda r: _lines(r / "queries.jsonl", '{"_id": "q0", "text": "a"}\n{"text": "b"}\n'),
     "queries.jsonl:2: no '_id' field"),
    (lambda r: _lines(r / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq0\tzz\t1\n"),
     "test.tsv:2: corpus-id 'zz' is not in corpus.jsonl"),
    (lambda r: _lines(r / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq9\td0\t1\n"),
     "test.tsv:2: query-id 'q9' is not in queries.jsonl"),
    (lambda r: _lines(r / "qrels" / "test.tsv", "q0\td0\t1\nq0\td0\t2\n"),
     "test.tsv:2: duplicate judgement of (q0, d0) (first at line 1)"),
    (lambda r: _lines(r / "qrels" / "test.tsv", "q0\td0\n"), "test.tsv:1: expected 3"),
])
def test_bad_collections_are_one_line(tmp_path, damage, needle):
    root = beir.write_collection(tmp_path / "c", {"d0": ("", "a b"), "d1": ("t", "c d")},
                                 {"q0": "a", "q1": "c"},
                                 {"test": [("q0", "d0", 1), ("q1", "d1", 1)]})
    damage(root)
    with pytest.raises(ValueError) as e:
        eval_sets.beir(root, data_dir=str(tmp_path / "dd"))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_no_train_qrels_refused_for_training(tmp_path):
    root = beir.write_collection(tmp_path / "c", {"d0": ("", "a b")}, {"q0": "a"},
                                 {"test": [("q0", "d0", 1)]})
    with pytest.raises(ValueError, match="no qrels/train.tsv to train on"):
        data.load(f"beir:{root}", data_dir=str(tmp_path / "dd"))


def test_sparse_qrels_checks_and_ideal_ranking():
    with pytest.raises(ValueError, match="judged twice"):
        SparseQrels([0, 0], [1, 1], [1, 2], (1, 3))
    with pytest.raises(ValueError, match="outside the shape"):
        SparseQrels([0], [3], [1], (1, 3))
    r = SparseQrels([1, 0, 1, 1], [0, 2, 3, 1], [1, 3, 2, 0], (3, 4))
    assert r.ideal(2).tolist() == [[3, 0], [2, 1], [0, 0]]
    assert r.num_relevant().tolist() == [1, 2, 0]
    assert r.gains(np.asarray([[2, 0], [3, 1], [0, 1]])).tolist() == [[3, 0], [2, 0], [0, 0]]


def test_a_query_that_is_also_a_document_does_not_retrieve_itself(tmp_path, vocab):
    """BEIR's ignore_identical_ids: query d{i} has the text of document d{i} and is relevant to
    d{i+10}; it must not score its own twin."""
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{j}" for j in rng.integers(0, 2000, 12)) for _ in range(40)]
    corpus = {f"d{i}": ("", t) for i, t in enumerate(texts)}
    root = beir.write_collection(tmp_path / "c", corpus, {f"d{i}": texts[i] for i in range(10)},
                                 {"test": [(f"d{i}", f"d{i + 10}", 1) for i in range(10)]})
    s = eval_sets.beir(root, tokenizer=vocab, max_len=16, data_dir=str(tmp_path / "dd"))
    assert s.exclude.tolist() == list(range(10))
    split = {"x": np.asarray(s.queries), "label": np.zeros(10, np.int32)}
    embedder = Embedder(lambda v, x: _embed(x), {"test": split}, eval_sets=[s])
    rows = dict(Retrieval(embedder, metrics=("recall@10",), bootstrap=0).run(None))
    q, c = _embed(np.asarray(s.queries)), _embed(np.asarray(s.corpus))
    _, idx = retrieve(q, c, k=11)
    assert (np.asarray(idx)[:, 0] == np.arange(10)).all()  # without the rule, each finds itself
    kept = np.asarray([[j for j in row if j != i][:10] for i, row in enumerate(np.asarray(idx))])
    assert float(rows["beir_c/recall@10"]) == pytest.approx(
        topk_metrics(kept, s.qrels, (10,))["recall@10"])
    from repr_jax.eval.quantization import Quantization  # the same rule in quantised search
    quantized = dict(Quantization(embedder, metric="recall@10", bootstrap=0).run(None))
    assert float(quantized["beir_c/float32/recall@10"]) == pytest.approx(
        float(rows["beir_c/recall@10"]))
