"""Starting from pretrained weights (encoder.init_from) and handing results on: sentence-transformers
and safetensors exports, their round trips, and the errors for weights that do not fit."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax import config as config_lib
from repr_jax.config import (Config, ConfigError, DataConfig, EncoderConfig, EvalConfig,
                             MethodConfig, TrainConfig)
from repr_jax.data import Dataset
from repr_jax.encoders.pretrained import (encode, export_safetensors, export_sentence_transformer,
                                          flatten_tree, load_sentence_transformer)
from repr_jax.train.run import build_run

DATA = Path(__file__).resolve().parent.parent / "data"
sys.path.insert(0, str(DATA))
from make_minilm_reference import TEXTS  # noqa: E402

from conftest import needs_minilm, tiny_config  # noqa: E402



# 17 texts: the reference sentences, accents and punctuation, and one truncated at 256 tokens.
MORE_TEXTS = TEXTS + ["Héllo wörld: a naïve café, déjà vu!", "Definitions: (n.) a small feline.",
                      "1234 numbers and UPPER case", "word " * 400, "A single line."]


def _pairs(vocab, n=48, length=16):
    """Token-id pairs in MiniLM's vocabulary: enough of a dataset to build a bi-encoder on."""
    rng = np.random.default_rng(0)

    def ids():
        x = rng.integers(1000, 20000, (n, length)).astype(np.int32)
        x[:, 0], x[:, -1] = 101, 102
        return x
    split = {"x": ids(), "x_pos": ids(), "label": rng.integers(0, 4, n)}
    return Dataset("pairs", {"train": split, "validation": split, "test": split}, 4,
                   vocab=tuple(vocab))


def _config(init_from, **encoder) -> Config:
    enc = dict(name="text_transformer", width=384, depth=6, num_heads=12, mlp_dim=1536,
               init_from=str(init_from))
    enc.update(encoder)
    return Config(data=DataConfig(name="wordnet", tokenizer="minilm", max_len=16),
                  encoder=EncoderConfig(**enc),
                  method=MethodConfig(name="biencoder", objective="info_nce", temperature=0.05,
                                      proj_dim=0),
                  train=TrainConfig(batch_size=8, steps=2, num_devices=1),
                  eval=EvalConfig(evaluators=("knn",), bootstrap=0))


def _minilm_embed(loaded, ids):
    return np.asarray(loaded.module.apply({"params": loaded.params}, jnp.asarray(ids))[0])


@needs_minilm
def test_init_from_minilm_starts_both_towers_as_minilm(minilm_dir, minilm):
    dataset = _pairs(minilm.tokenizer.vocab)
    _, _, method, state = build_run(_config(minilm_dir), dataset)
    x = dataset.splits["test"]["x"][:8]
    want = _minilm_embed(minilm, x)
    np.testing.assert_allclose(np.asarray(method.embed(state.variables, jnp.asarray(x))), want,
                               atol=1e-6)  # the first rows of MiniLM's 512 positions
    np.testing.assert_allclose(np.asarray(method.embed_pos(state.variables, jnp.asarray(x))),
                               want, atol=1e-6)


@needs_minilm
def test_init_from_names_what_does_not_fit(minilm_dir, minilm, tmp_path):
    dataset = _pairs(minilm.tokenizer.vocab)
    with pytest.raises(ConfigError, match=r"does not fit this encoder \(encoder.width: 128 here, "
                                          r"384 in the weights; encoder.num_heads: 4 here"):
        build_run(_config(minilm_dir, width=128, num_heads=4, mlp_dim=256), dataset)
    with pytest.raises(ConfigError, match=r"the data's vocabulary .* is not the weights'"):
        build_run(_config(minilm_dir), _pairs(list(minilm.tokenizer.vocab[:-1]) + ["[zzz]"]))

    # A missing and an extra tensor: one table naming both; init_strict=False loads the rest.
    tensors = flatten_tree({"params": jax.device_get(minilm.params)})
    missing = "params/layer_3/query/kernel"
    dropped = tensors.pop(missing)
    tensors["params/pooler/dense/kernel"] = np.zeros((384, 384), np.float32)
    fields = dict(name="text_transformer", width=384, depth=6, num_heads=12, mlp_dim=1536,
                  vocab_size=30522)
    export_safetensors(tensors, dict(fields=fields, vocab=list(minilm.tokenizer.vocab)),
                       tmp_path / "edited")
    with pytest.raises(ConfigError) as err:
        build_run(_config(tmp_path / "edited"), dataset)
    lines = str(err.value).splitlines()
    assert "2 tensor(s) do not match" in lines[0] and "init_strict=False" in lines[0]
    assert any(missing in line and "missing from the weights" in line for line in lines[1:])
    assert any("params/pooler/dense/kernel" in line and "not in this encoder" in line
               for line in lines[1:])
    with pytest.warns(UserWarning, match="keep their fresh initialisation"):
        _, _, _, state = build_run(_config(tmp_path / "edited", init_strict=False), dataset)
    tower = state.params["tower_a"]["encoder"]
    assert not np.allclose(np.asarray(tower["layer_3"]["query"]["kernel"]), dropped)
    np.testing.assert_array_equal(np.asarray(tower["layer_2"]["query"]["kernel"]),
                                  tensors["params/layer_2/query/kernel"])


@needs_minilm
def test_sentence_transformers_export_round_trips(minilm, tmp_path):
    texts = MORE_TEXTS
    out = export_sentence_transformer(minilm, tmp_path / "st", card="# MiniLM, unchanged\n")
    assert {"model.safetensors", "config.json", "vocab.txt", "modules.json", "README.md",
            "sentence_bert_config.json", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"]
    again = load_sentence_transformer(out)
    np.testing.assert_allclose(encode(again, texts), encode(minilm, texts), atol=1e-6)


@needs_minilm
@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                    reason="sentence-transformers (and torch) absent: the optional interop check "
                           "runs where pip install sentence-transformers was done")
def test_sentence_transformers_loads_the_export(minilm, tmp_path):
    from sentence_transformers import SentenceTransformer
    texts = MORE_TEXTS
    out = export_sentence_transformer(minilm, tmp_path / "st")
    theirs = SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(theirs, encode(minilm, texts), atol=1e-5)


@pytest.mark.slow
def test_a_trained_run_exports_reloads_and_initialises_another(tmp_path):
    """A tiny CNN run: its safetensors export rebuilds the encoder exactly; a sentence-transformers
    export is refused with the reason; a new run under another method starts from its encoder;
    a second repr-jax eval reuses the cached features (no encoder pass)."""
    from repr_jax.encoders import load_exported
    from repr_jax.eval import base
    from repr_jax.train import evaluation
    from repr_jax.train import evaluate_workdir, load_trained, train_and_evaluate
    from repr_jax.train.export import export_run
    run = tmp_path / "run"
    train_and_evaluate(tiny_config(), run, progress=False, verbose=False)
    cfg, dataset, method, state = load_trained(run)
    out = export_run(run, "safetensors", tmp_path / "export")
    module, variables = load_exported(out)
    x = jnp.asarray(dataset.splits["test"]["x"][:16])
    np.testing.assert_allclose(np.asarray(module.apply(variables, x)[0]),
                               np.asarray(method.embed(state.variables, x)), atol=1e-6)
    card = (out / "README.md").read_text()
    assert "knn/accuracy" in card and "repr-jax train --config train_config.json" in card
    assert config_lib.load(str(out / "train_config.json")) == cfg  # the card's command runs
    for bad, message in ((out, "is not empty"), (out / "README.md", "is a file")):
        with pytest.raises(ConfigError, match=message):  # nothing written beside other files
            export_run(run, "safetensors", bad)
    refused = subprocess.run([sys.executable, "-m", "repr_jax.cli", "export", "--workdir",
                              str(run), "--format", "sentence-transformers", "--out",
                              str(tmp_path / "st")], capture_output=True, text=True)
    assert refused.returncode == 2 and "exports BERT-style text encoders" in refused.stderr

    # Continue the pretraining under another method: the encoder starts as the trained one.
    byol = config_lib.override(tiny_config(), ["method.name='byol'",
                                               f"encoder.init_from={str(run)!r}"])
    _, _, _, fresh = build_run(byol)
    trained = jax.device_get(state.params["tower"]["encoder"])
    jax.tree.map(np.testing.assert_array_equal,
                 jax.device_get(fresh.params["tower"]["encoder"]), trained)
    jax.tree.map(np.testing.assert_array_equal,  # BYOL's target network starts as the loaded one
                 jax.device_get(fresh.extra["target"]["tower"]["encoder"]), trained)
    jax.tree.map(np.testing.assert_array_equal,
                 jax.device_get(fresh.batch_stats["tower"]["encoder"]),
                 jax.device_get(state.batch_stats["tower"]["encoder"]))

    # The final evaluation kept its features; another evaluator set encodes nothing again.
    passes = []
    original = base.Embedder._batches

    def counted(self, variables, x, which, *rest):
        if self._fns["x"] is not evaluation._raw_inputs:  # raw inputs are not an encoder pass
            passes.append(which)
        yield from original(self, variables, x, which, *rest)
    base.Embedder._batches = counted
    try:
        evaluate_workdir(run, overrides=["eval.evaluators=('linear_probe', 'fewshot')"],
                         progress=False)
        assert passes == []
        evaluate_workdir(run, overrides=["eval.evaluators=('knn',)", "eval.cache=False"],
                         progress=False)
        assert passes  # --no-cache encodes again
    finally:
        base.Embedder._batches = original
    assert list((run / "cache" / "features").iterdir())


def _usage_block(card: str) -> str:
    """The python block of a model card's Usage section."""
    usage = card.split("## Usage", 1)[1].split("## Reproduce", 1)[0]
    return usage.split("```python\n", 1)[1].split("```", 1)[0]


def test_export_help_and_model_card_name_both_towers_and_how_to_reach_them(capsys, tmp_path):
    """Issue 49: the help said "a dual encoder's first tower" while the sentence-transformers
    export keeps both; the card now says how to reach each (encode_query / encode_document)."""
    from repr_jax import cli
    from repr_jax.train.export import model_card
    with pytest.raises(SystemExit) as e:
        cli.main(["export", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "first tower" not in text
    assert "keeps both towers" in text and "encode_query" in text and "encode_document" in text
    cfg = Config(data=DataConfig(name="pairs:p.jsonl", max_len=16),
                 encoder=EncoderConfig(name="text_transformer"),
                 method=MethodConfig(name="biencoder"))
    (tmp_path / "run").mkdir()
    two = model_card(tmp_path / "run", cfg, "sentence-transformers", 5, two_towers=True)
    one = model_card(tmp_path / "run", cfg, "sentence-transformers", 5)
    assert "Two towers behind a Router" in two and "One encoder" in one
    for card in (two, one):
        code = _usage_block(card)
        compile(code, "usage", "exec")  # the example is Python as written
        assert "model.encode_query(" in code and "model.encode_document(" in code
        assert "model.similarity(" in code
    safetensors = model_card(tmp_path / "run", cfg, "safetensors", 5, two_towers=True)
    code = _usage_block(safetensors)
    compile(code, "usage", "exec")
    assert "load_exported(" in code and "query tower" in safetensors
