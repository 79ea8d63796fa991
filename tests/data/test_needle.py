"""The needle set: each document holds its query's gloss once, at its depth, inside the length;
built from a WordNet database written here in the wndb format (and from the real one where
wordnet-base is installed)."""

from pathlib import Path

import numpy as np
import pytest

from repr_jax.data.builders import WORDNET_DIR
from repr_jax.data.needle import needle, needle_documents
from repr_jax.data.tokenizer import make_tokenizer


def _wordnet(root: Path, n: int = 400) -> Path:
    """``n`` synsets per part of speech: lemma ``p<i>word``, a definition, an example for every
    fifth."""
    root.mkdir()
    for pos, letter in (("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r")):
        lines = ["  1 This software and database is being provided (license header)"]
        for i in range(n):
            gloss = f"the {pos} meaning number {i} with some words after it"
            if i % 5 == 0:
                gloss += f'; "an example of {letter}{i}word in use"'
            lines.append(f"{i + 100:08d} 03 {letter} 01 {letter}{i}word 0 000 | {gloss}")
        (root / f"data.{pos}").write_text("\n".join(lines) + "\n", encoding="latin-1")
    return root


def test_each_document_holds_its_needle_once_at_its_depth_within_the_length(tmp_path):
    tok = make_tokenizer("bytes")
    queries, docs, depths = needle_documents(600, tok, num_queries=5, seed=1,
                                             wordnet_dir=str(_wordnet(tmp_path / "wn")))
    assert list(depths) == [0.0, 0.25, 0.5, 0.75, 1.0]
    for i, (query, doc) in enumerate(zip(queries, docs)):
        word = query.split()[3]  # "an example of n40word in use"
        assert 592 - 60 <= len(tok.tokenize(doc)) <= 592  # bytes: a token each
        gloss = f"{word}: the "
        assert doc.count(gloss) == 1, (word, doc[:200])
        assert all(gloss not in other for j, other in enumerate(docs) if j != i)
        at = doc.index(gloss) / len(doc)
        assert abs(at - depths[i]) < 0.15  # within a gloss or two of its depth
    assert docs[0].startswith(queries[0].split()[3] + ": ")


def test_the_set_has_identity_qrels_and_documents_at_the_length(tmp_path):
    rs = needle(300, tokenizer="bytes", num_queries=4, wordnet_dir=str(_wordnet(tmp_path / "w")))
    assert rs.name == "needle_300" and rs.source == "needle:300"
    assert rs.corpus.shape == (4, 300) and rs.queries.shape == (4, 64)
    np.testing.assert_array_equal(rs.qrels, np.eye(4))


def test_too_short_a_length_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="length=16") as info:
        needle_documents(16, make_tokenizer("bytes"), wordnet_dir=str(_wordnet(tmp_path / "w")))
    assert "\n" not in str(info.value)


@pytest.mark.skipif(not Path(WORDNET_DIR, "data.noun").is_file(),
                    reason="WordNet 3.0 absent: apt-get install wordnet-base")
def test_real_wordnet_documents_at_8192_tokens():
    tok = make_tokenizer("bytes")
    queries, docs, _ = needle_documents(8192, tok, num_queries=3)
    assert all(8100 <= len(tok.tokenize(d)) <= 8184 for d in docs)
    assert len(set(queries)) == 3


def test_an_eval_sets_entry_names_its_length():
    from repr_jax.data.needle import needle_length
    assert needle_length("needle:2048") == 2048
    for bad in ("needle:", "needle:2k", "needle:8"):
        with pytest.raises(ValueError, match="needle:LENGTH") as info:
            needle_length(bad)
        assert "\n" not in str(info.value)


@pytest.mark.slow
@pytest.mark.skipif(not Path(WORDNET_DIR, "data.noun").is_file(),
                    reason="WordNet 3.0 absent: apt-get install wordnet-base")
def test_a_run_evaluates_retrieval_on_the_needle_set(tmp_path):
    from repr_jax import config as C
    from repr_jax.data import beir
    from repr_jax.train import train_and_evaluate
    from tiny_llm import tiny_params, write_gguf
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=40, num_queries=4, num_train=16,
                                     seed=1)
    write_gguf(tmp_path / "tiny.gguf", tiny_params())
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=f"beir:{root}", max_len=16, data_dir=str(tmp_path / "t")),
        encoder=C.EncoderConfig(name="decoder_lm", init_from=str(tmp_path / "tiny.gguf"),
                                pooling="mean"),
        method=C.MethodConfig(name="biencoder", proj_dim=0, tied_towers=True),
        train=C.TrainConfig(batch_size=8, steps=1, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), reference_rows=False, bootstrap=0,
                          sets=("needle:96",)))
    rows = train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)["eval_rows"]
    values = {r["metric"]: r["value"] for r in rows}
    assert 0 <= values["needle_96/ndcg@10"] <= 1
