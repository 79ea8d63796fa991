"""Run assembly's bookkeeping: the paths a run records, and what a resumed run compares."""

import os

import pytest
from conftest import needs_minilm

from repr_jax import config as C
from repr_jax.config import ConfigError
from repr_jax.train.run import check_resumable, resolved_paths


def test_paths_are_recorded_absolute_and_names_stay_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = C.override(C.Config(), [
        "data.name=pairs:sub/../pairs.jsonl", "data.data_dir=tfds", "data.tokenizer=vocab.txt",
        "encoder.init_from=weights", "eval.sets=('beir:coll','lee')"])
    r = resolved_paths(cfg)
    assert r.data.name == f"pairs:{tmp_path / 'pairs.jsonl'}"  # '..' folded
    assert (r.data.data_dir, r.data.tokenizer, r.encoder.init_from) == (
        str(tmp_path / "tfds"), str(tmp_path / "vocab.txt"), str(tmp_path / "weights"))
    assert r.eval.sets == (f"beir:{tmp_path / 'coll'}", "lee")
    assert resolved_paths(r) == r and resolved_paths(C.Config()) == C.Config()
    named = C.override(C.Config(), ["data.name=wordnet", "data.tokenizer=bytes",
                                    "encoder.init_from=minilm"])
    assert resolved_paths(named) == named
    splade = C.override(C.Config(), ["encoder.init_from=splade_tiny"])
    assert resolved_paths(splade) == splade  # a name, resolved where it is read


@needs_minilm
def test_the_minilm_wheel_is_recorded_by_its_name(minilm_dir):
    cfg = C.override(C.Config(), ["data.name=wordnet", f"data.tokenizer={minilm_dir / 'vocab.txt'}",
                                  f"encoder.init_from={minilm_dir}"])
    r = resolved_paths(cfg)
    assert (r.data.tokenizer, r.encoder.init_from) == ("minilm", "minilm")


def test_a_run_recorded_with_a_relative_path_resumes_and_a_changed_one_does_not(tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = C.override(C.Config(), ["data.name=pairs:pairs.jsonl"])  # as runs were saved before
    C.save_json(old, tmp_path / "config.json")
    check_resumable(resolved_paths(old), tmp_path)
    other = C.override(C.Config(), [f"data.name=pairs:{os.sep}elsewhere.jsonl"])
    with pytest.raises(ConfigError, match="data.name"):
        check_resumable(other, tmp_path)
