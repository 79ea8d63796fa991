"""``data.name=pairs:FILE.jsonl``: tokenised at preparation, streamed like any split, one-line
errors naming file and line."""

import json
import os

import numpy as np
import pytest

from repr_jax import data
from repr_jax.data import text_pairs
from repr_jax.data.tokenizer import ByteTokenizer


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _rows(n):
    return [{"query": f"what is item {i}?", "positive": f"item {i} is a thing of kind {i % 7}",
             "negatives": [f"item {i + 1} is other", f"item {i + 2} differs"][: 1 + i % 2]}
            for i in range(n)]


def test_pairs_file_tokenised_split_and_streamed_bitwise(tmp_path):
    rows = _rows(600)
    path = _write(tmp_path / "pairs.jsonl", rows)
    ds = data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=24, negatives=2)
    train, test = ds.splits["train"], ds.splits["test"]
    n_test = sum(text_pairs.is_test(r["query"]) for r in rows)
    assert 0 < n_test < 100 and len(test["x"]) == n_test
    assert len(train["x"]) + len(ds.splits["validation"]["x"]) == 600 - n_test
    assert ds.num_classes == 1 and ds.vocab == tuple(ByteTokenizer.vocab)
    # the test split keeps file order: its first row is the first test line, tokenised as it reads
    first = next(r for r in rows if text_pairs.is_test(r["query"]))
    enc = ByteTokenizer().encode([first["query"], first["positive"]], max_len=24, pad_to=24).ids
    np.testing.assert_array_equal(test["x"][0], enc[0])
    np.testing.assert_array_equal(test["x_pos"][0], enc[1])
    # a line with one negative repeats it; with two keeps both, in order
    negs = ByteTokenizer().encode(first["negatives"] * 2, max_len=24, pad_to=24).ids[:2]
    np.testing.assert_array_equal(test["negatives"][0], negs)
    streamed = data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=24,
                         negatives=2, in_memory_mb=0)
    assert type(streamed.splits["train"]).__name__ == "SourceSplit"
    for step in (0, 7, 40):  # past an epoch: the permutation changes
        a = data.BatchStream(train, batch_size=32, seed=3).batch(step)
        b = data.BatchStream(streamed.splits["train"], batch_size=32, seed=3).batch(step)
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k


def test_sentence_transformers_columns_and_no_negatives(tmp_path):
    path = _write(tmp_path / "st.jsonl", [
        {"anchor": f"a{i} question", "positive": f"p{i}", "negative_1": f"n{i}",
         "negative_2": f"m{i}"} for i in range(300)])
    ds = data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=8, negatives=2)
    row = ds.splits["test"]["negatives"][0]
    assert ByteTokenizer().decode(row[0]).startswith("n") and ByteTokenizer().decode(
        row[1]).startswith("m")
    plain = data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=8)
    assert "negatives" not in plain.splits["train"]
    assert text_pairs.parse_line('{"anchor": "a", "positive": "p", "negative": "n"}', "f:1") == (
        "a", "p", ["n"])


@pytest.mark.parametrize("line, needle", [
    ("{not json", "f.jsonl:2: not JSON"),
    ('{"query": "q"}', "f.jsonl:2: no 'positive' field"),
    ('{"query": "  ", "positive": "p"}', "f.jsonl:2: 'query' is empty"),
    ('{"query": "q", "positive": 3}', "f.jsonl:2: 'positive' must be a string"),
    ('["q", "p"]', "f.jsonl:2: a line must be a JSON object"),
])
def test_bad_lines_are_one_line_naming_file_and_line(tmp_path, line, needle):
    path = _write(tmp_path / "f.jsonl", ['{"query": "q0", "positive": "p0"}', line])
    with pytest.raises(ValueError) as e:
        data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=8)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not any((tmp_path / "tfds").rglob("dataset_info.json"))  # nothing half-prepared


def test_missing_negatives_missing_file_and_edits(tmp_path):
    path = _write(tmp_path / "p.jsonl", [{"query": f"q{i}", "positive": "p"} for i in range(200)])
    with pytest.raises(ValueError, match=r"p.jsonl:1: no negatives, and "
                                         r"method.negatives_per_query=1"):
        data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=8, negatives=1)
    with pytest.raises(ValueError, match="no such file"):
        data.load(f"pairs:{tmp_path}/absent.jsonl", data_dir=str(tmp_path / "tfds"))
    with pytest.raises(ValueError, match="needs a .jsonl file after the colon"):
        data.load("pairs:", data_dir=str(tmp_path / "tfds"))
    with pytest.raises(ValueError, match="hard negatives come from data.name=pairs:FILE"):
        data.load("digits", data_dir=str(tmp_path / "tfds"), negatives=2)
    before = text_pairs.config_for(f"pairs:{path}").name
    _write(path, [{"query": f"q{i}", "positive": "p"} for i in range(201)])
    os.utime(path, ns=(1, 1))
    assert text_pairs.config_for(f"pairs:{path}").name != before  # an edited file: prepared anew


def _scored(rows):
    return [dict(r, positive_score=float(i), negative_scores=[i - 0.5, i - 0.25][:len(r["negatives"])])
            for i, r in enumerate(rows)]


def test_teacher_scores_are_read_beside_the_negatives(tmp_path):
    rows = _scored(_rows(300))
    path = _write(tmp_path / "scored.jsonl", rows)
    ds = data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=16, negatives=2,
                   scores=True)
    test = ds.splits["test"]
    firsts = [(i, r) for i, r in enumerate(rows) if text_pairs.is_test(r["query"])]
    for row_scores, (i, r) in zip(test["scores"], firsts):
        negs = r["negative_scores"]  # a line with one negative repeats it, and its score
        np.testing.assert_allclose(row_scores, [i, negs[0], negs[1 % len(negs)]])
    assert test["scores"].dtype == np.float32
    unscored = data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=16,
                         negatives=2)
    assert "scores" not in unscored.splits["train"]
    st = _write(tmp_path / "st.jsonl", [  # sentence-transformers' n-tuple scores
        {"anchor": f"q{i}", "positive": "p", "negative_1": "n", "scores": [3.0, 1.0]}
        for i in range(300)])
    ds = data.load(f"pairs:{st}", data_dir=str(tmp_path / "tfds"), max_len=8, negatives=1,
                   scores=True)
    np.testing.assert_allclose(ds.splits["train"]["scores"][0], [3.0, 1.0])


@pytest.mark.parametrize("extra, needle", [
    ({}, "scored.jsonl:2: no 'positive_score' or 'negative_scores'"),
    ({"positive_score": 1.0}, "scored.jsonl:2: no 'negative_scores'"),
    ({"positive_score": "high", "negative_scores": [0.1]}, "must be finite numbers, got 'high'"),
    ({"positive_score": 1.0, "negative_scores": [None]}, "must be finite numbers, got None"),
    ({"positive_score": 1.0, "negative_scores": [0.1, 0.2]}, "2 negative score(s) for 1"),
    ({"positive_score": 1.0, "negative_scores": 0.1}, "'negative_scores' must be a list"),
])
def test_missing_or_non_numeric_scores_are_one_line(tmp_path, extra, needle):
    good = {"query": "q0", "positive": "p", "negatives": ["n"], "positive_score": 1.0,
            "negative_scores": [0.0]}
    bad = {"query": "q1", "positive": "p", "negatives": ["n"], **extra}
    path = _write(tmp_path / "scored.jsonl", [good, bad] + [dict(good, query=f"q{i}")
                                                              for i in range(2, 200)])
    with pytest.raises(ValueError) as e:
        data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=8, negatives=1,
                  scores=True)
    assert needle in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="come with the negatives of a pairs: file"):
        data.load(f"pairs:{path}", data_dir=str(tmp_path / "tfds"), max_len=8, scores=True)
