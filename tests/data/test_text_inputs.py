"""Issue 49's text inputs: old-Mac (CR-only) line endings read as lines, empty texts refused
alike by every format, paths that are not regular files said for what they are (a FIFO, a device,
a broken link, named with where it points), ``--data`` named as ``--data``, a symlinked qrels file
never echoed, a decoder's sizes recorded from its weights, and what preparation cut counted."""

import json
import os

import pytest

from repr_jax import config as C
from repr_jax import files
from repr_jax.data import beir, text_pairs


def _pairs(n):
    return [{"query": f"what is item {i}?", "positive": f"item {i} is a thing of kind {i % 7} "
             + "and more " * (i % 3)} for i in range(n)]


def _write(path, rows, end="\n"):
    path.write_bytes("".join(json.dumps(r) + end for r in rows).encode())
    return path


# --------------------------------------------------------------------------------------------------
# Line endings
# --------------------------------------------------------------------------------------------------

def test_cr_only_crlf_and_lf_files_read_as_the_same_lines(tmp_path):
    rows = _pairs(40)
    got = {}
    for name, end in (("lf", "\n"), ("crlf", "\r\n"), ("cr", "\r")):
        path = _write(tmp_path / f"{name}.jsonl", rows, end)
        got[name] = [(n, q, p) for n, q, p, _ in text_pairs.read_pairs(path)]
    assert got["cr"] == got["lf"] == got["crlf"] and len(got["cr"]) == 40
    # a \r between JSON values of a \n-ended file stays inside its line (JSON whitespace)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b'{"query": "a",\r"positive": "b"}\n{"query": "c", "positive": "d"}\n')
    assert [q for _, q, _, _ in text_pairs.read_pairs(mixed)] == ["a", "c"]
    # a bad byte in a CR-only file is named by its line, as in any other
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"query": "a", "positive": "b"}\r{"query": "caf\xff", "positive": "x"}\r')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: byte 15 of the line \(0xff\)"):
        list(text_pairs.read_pairs(bad))


def test_a_cr_only_beir_collection_reads_as_its_lf_copy(tmp_path):
    lf = beir.synthetic_collection(tmp_path / "lf", num_docs=50, num_queries=8, num_train=12)
    cr = tmp_path / "cr"
    for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/train.tsv"):
        (cr / f).parent.mkdir(parents=True, exist_ok=True)
        (cr / f).write_bytes((lf / f).read_bytes().replace(b"\n", b"\r"))
    a, b = beir.read_collection(lf), beir.read_collection(cr)
    assert a.doc_texts == b.doc_texts and a.query_texts == b.query_texts
    for split in ("test", "train"):
        assert all((a.qrels[split][k] == b.qrels[split][k]).all() for k in a.qrels[split])


# --------------------------------------------------------------------------------------------------
# Empty texts: refused alike
# --------------------------------------------------------------------------------------------------

def _collection(root, corpus=None, queries=None):
    corpus = corpus or [{"_id": f"d{i}", "title": "", "text": f"doc {i}"} for i in range(4)]
    queries = queries or [{"_id": f"q{i}", "text": f"query {i}"} for i in range(2)]
    root.mkdir(parents=True)
    _write(root / "corpus.jsonl", corpus)
    _write(root / "queries.jsonl", queries)
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\n")
    return root


@pytest.mark.parametrize("kind, line, field", [
    ("pairs", {"query": "  ", "positive": "x"}, "query"),
    ("pairs", {"query": "q", "positive": ""}, "positive"),
    ("queries", {"_id": "q1", "text": " \t"}, "text"),
    ("queries", {"_id": "q1", "text": ""}, "text"),
    ("corpus", {"_id": "d1", "title": "", "text": "  "}, "text"),
    ("corpus", {"_id": "d1", "text": ""}, "text"),
])
def test_an_empty_text_is_refused_alike_in_every_format(tmp_path, kind, line, field):
    if kind == "pairs":
        path = _write(tmp_path / "p.jsonl", [{"query": "a", "positive": "b"}, line])
        with pytest.raises(ValueError) as info:
            list(text_pairs.read_pairs(path))
    else:
        rows = {"corpus": [{"_id": "d0", "text": "doc 0"}, line,
                           *({"_id": f"d{i}", "text": "d"} for i in (2, 3))],
                "queries": [{"_id": "q0", "text": "query 0"}, line]}
        root = _collection(tmp_path / "c", **{kind: rows[kind]})
        path = root / f"{kind}.jsonl"
        with pytest.raises(ValueError) as info:
            beir.read_collection(root)
    assert str(info.value) == f"{path}:2: {field!r} is empty"


def test_a_beir_document_with_a_title_and_no_text_is_its_title(tmp_path):
    corpus = [{"_id": "d0", "title": "Paris", "text": ""}, {"_id": "d1", "title": "Rome"},
              *({"_id": f"d{i}", "text": f"doc {i}"} for i in (2, 3))]
    c = beir.read_collection(_collection(tmp_path / "c", corpus=corpus))
    assert c.doc_texts[:2] == ["Paris ", "Rome "]  # title + " " + text, as BEIR encodes it


# --------------------------------------------------------------------------------------------------
# Paths that are not regular files, links, and which flag gave them
# --------------------------------------------------------------------------------------------------

def test_a_fifo_a_device_and_a_broken_link_are_said_for_what_they_are(tmp_path):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "gone.jsonl")
    for name, said in [
            (f"pairs:{fifo}", f"data.name=pairs:{fifo}: a FIFO (named pipe), not a regular file"),
            ("pairs:/dev/zero", "data.name=pairs:/dev/zero: a character device, not a regular "
                                "file"),
            (f"pairs:{link}", f"data.name=pairs:{link}: a symbolic link to {tmp_path}/gone.jsonl, "
                              f"which does not exist"),
            (f"pairs:{tmp_path}/none.jsonl", f"data.name=pairs:{tmp_path}/none.jsonl: no such "
                                             f"file")]:
        with pytest.raises(ValueError) as info:
            text_pairs.path_of(name)
        assert str(info.value) == said
    with pytest.raises(ValueError, match="a FIFO"):  # never opened: opening one waits forever
        list(files.text_lines(fifo))


def test_a_fifo_or_broken_link_in_a_beir_folder_is_named_not_skipped(tmp_path):
    root = _collection(tmp_path / "c")
    (root / "qrels" / "dev.tsv").symlink_to(tmp_path / "gone.tsv")
    with pytest.raises(ValueError, match=r"c: qrels/dev.tsv: a symbolic link to .*gone.tsv, "
                                         r"which does not exist$"):
        beir.read_collection(root)
    (root / "qrels" / "dev.tsv").unlink()
    (root / "queries.jsonl").unlink()
    os.mkfifo(root / "queries.jsonl")
    with pytest.raises(ValueError, match=r"c: queries.jsonl: a FIFO \(named pipe\), not a "
                                         r"regular file$"):
        beir.read_collection(root)


def test_data_given_by_the_data_flag_is_named_as_the_flag(tmp_path):
    from repr_jax.train.mine import input_files
    from repr_jax.train.score import score_file
    with pytest.raises(ValueError, match=r"^--data pairs: needs a \.jsonl file after the colon"):
        input_files("pairs:")
    with pytest.raises(ValueError, match=rf"^--data pairs:{tmp_path}/x.jsonl: no such file$"):
        input_files(f"pairs:{tmp_path}/x.jsonl")
    with pytest.raises(ValueError, match=r"^--data pairs:/dev/zero: a character device"):
        score_file(workdir=tmp_path, data="pairs:/dev/zero", out=tmp_path / "o.jsonl")


def test_a_symlinked_qrels_file_is_named_not_echoed(tmp_path):
    secret = tmp_path / "elsewhere.tsv"
    secret.write_text("id\tuser\tscore\nhunter2\tq0\t1\n")
    root = _collection(tmp_path / "c")
    (root / "qrels" / "test.tsv").unlink()
    (root / "qrels" / "test.tsv").symlink_to(secret)
    with pytest.raises(ValueError) as info:
        beir.read_collection(root)
    assert str(info.value) == (f"{root}/qrels/test.tsv:2: query-id (not shown: {root}/qrels/"
                               f"test.tsv is a symbolic link to {secret}) is not in "
                               f"queries.jsonl")
    assert "hunter2" not in str(info.value)
    (root / "qrels" / "test.tsv").unlink()  # the same line in the file itself: echoed
    (root / "qrels" / "test.tsv").write_text(secret.read_text())
    with pytest.raises(ValueError, match="query-id 'hunter2' is not in queries.jsonl"):
        beir.read_collection(root)


# --------------------------------------------------------------------------------------------------
# A decoder's sizes come from its weights, and are recorded
# --------------------------------------------------------------------------------------------------

def test_a_gguf_decides_the_recorded_sizes_and_a_conflict_is_one_note(tmp_path, capsys):
    from tiny_llm import TINY, tiny_params, write_gguf

    from repr_jax.train.run import resolved_paths
    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    cfg = C.override(C.load("biencoder_wordnet"), [
        "encoder.name=decoder_lm", f"encoder.init_from='{gguf}'", "encoder.width=64",
        "encoder.mlp_dim=0"])  # the config's own 256 would be noted too
    for _ in range(3):  # a run resolves its config more than once: one note
        resolved = resolved_paths(cfg)
    e = resolved.encoder
    assert (e.width, e.depth, e.num_heads, e.num_kv_heads, e.mlp_dim, e.eps) == (
        TINY["width"], TINY["depth"], TINY["num_heads"], TINY["num_kv_heads"], TINY["mlp_dim"],
        TINY["eps"])
    assert C.to_dict(resolved)["encoder"]["width"] == 32  # what config.json records
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"repr-jax: note: encoder.width=64 given, the weights in {gguf} have 32: 32 "
                   f"was taken"]
    assert resolved_paths(resolved) == resolved  # a recorded config resolves to itself, quietly
    assert not capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Preparation says what it cut
# --------------------------------------------------------------------------------------------------

def test_preparation_counts_the_texts_it_cut_once_and_records_them(tmp_path, capsys):
    from repr_jax.data.tokenizer import ByteTokenizer
    rows = _pairs(200)
    path = _write(tmp_path / "p.jsonl", rows)
    settings = dict(data_dir=str(tmp_path / "tfds"), query_max_len=18, doc_max_len=40)
    builder = text_pairs.prepare(f"pairs:{path}", **settings)
    tok = ByteTokenizer()
    q_cut = sum(len(tok.tokenize(r["query"])) > 16 for r in rows)
    d_cut = sum(len(tok.tokenize(r["positive"])) > 38 for r in rows)
    assert 0 < q_cut < 200 and 0 < d_cut < 200
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("prepared")]
    assert lines == [f"prepared pairs:{path}: 200 queries ({q_cut} cut at 18 tokens, "
                     f"{100 * q_cut / 200:.1f}%), 200 documents ({d_cut} cut at 40 tokens, "
                     f"{100 * d_cut / 200:.1f}%)"]
    recorded = {"query": {"texts": 200, "cut": q_cut, "length": 18},
                "doc": {"texts": 200, "cut": d_cut, "length": 40}}
    assert text_pairs.cut_counts(builder) == recorded
    again = text_pairs.prepare(f"pairs:{path}", **settings)  # reused: quiet, still told
    assert "prepared" not in capsys.readouterr().err
    assert text_pairs.cut_counts(again) == recorded


def test_an_instruction_ending_in_a_space_leaves_the_first_word_to_the_text(tmp_path):
    """Byte-level BPE joins the space to the next word: "t " alone is [t, Ġ], "t the the" is
    [t, Ġthe, Ġthe]; only "t" is the instruction's (counting the prefix's own two tokens took
    the text's first word for the instruction, and a one-word text pooled nothing)."""
    from repr_jax.data.tokenizer import make_tokenizer
    from tiny_llm import tiny_params, write_gguf
    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    tok = make_tokenizer(str(gguf))
    assert len(tok.tokenize("t ")) == 2
    for prefix, text in (("t ", "the the"), ("t ", "the"), ("t", " the")):
        (row,) = tok.rows([text], prefix=prefix, max_len=32)
        assert sum(i <= -2 for i in row) == 1, (prefix, text, row)
        assert tok.decode([i for i in row if i >= 0]) == " " + text.strip()
