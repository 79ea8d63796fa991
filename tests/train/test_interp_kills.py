"""Kill -9 in the middle of the issue-51 commands' writes: ``repr-jax features`` in each of its
two files, ``repr-jax concepts`` between its direction files and before ``concepts.json``,
``repr-jax steer --out`` in its one file. Each command is the real CLI in a process of its own,
paused in the fsync of the write named (its data whole in the hidden temporary) and killed there
(:mod:`test_kill_orphans`' launcher); the old file, if any, is still whole; the rerun names each
temporary it removes in one line, leaves none anywhere ($TMPDIR included), and writes what an
uninterrupted run writes, byte for byte, every file with the mode a plain ``open`` gives under
the process's umask (0o027 here, so a temporary's 0o600 would show)."""

import json
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

from repr_jax.data.builders import WORDNET_DIR
from test_kill_orphans import FSYNC_PAUSE, _cli, _kill_when_paused, _temporaries, _tree

MASK = 0o027

needs_wordnet = pytest.mark.skipif(not (Path(WORDNET_DIR) / "data.noun").is_file(),
                                   reason="WordNet 3.0 absent: apt-get install wordnet-base")


@pytest.fixture
def umask():
    """The test's processes (the CLI's inherit it) under ``MASK``."""
    old = os.umask(MASK)
    yield MASK
    os.umask(old)


def _pause_at(name: str) -> str:
    """The launcher's pause in the fsync of the temporary of the file ``name``."""
    mark = re.escape(f"/.{name}.")
    return f"import re\nMARK = {mark!r}\n{FSYNC_PAUSE}"


def _modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode)
            for p in folder.rglob("*") if p.is_file()}


def _removed(stderr: str, temporary: Path, name: str) -> bool:
    return (f"repr-jax: warning: removed {temporary}: a temporary copy of {name} that a killed "
            f"run left") in stderr.splitlines()


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """tiny_llm's decoder as a GGUF, prompts, and a pairs file its store reads."""
    from tiny_llm import TINY, tiny_params, write_gguf
    root = tmp_path_factory.mktemp("interp_kills")
    gguf = root / "tiny.gguf"
    write_gguf(gguf, tiny_params())
    prompts = root / "prompts.txt"
    prompts.write_text("the thing\nthen there\na cat sat on the\nhello\n", encoding="utf-8")
    np.save(root / "ones.npy", np.ones(TINY["width"], np.float32))
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"the thing {i}", "positive": f"then {i} there"})
                             + "\n" for i in range(40)))
    return dict(root=root, gguf=gguf, prompts=prompts, pairs=pairs, ones=root / "ones.npy")


@pytest.fixture(scope="module")
def sae_run(decoder):
    """A TopK SAE (24 latents) trained 3 steps on the decoder's layer-1 store."""
    from conftest import sae_config

    from repr_jax import config as C
    from repr_jax.train import activations as acts
    from repr_jax.train import train_and_evaluate
    root = decoder["root"]
    acts.activations(out=root / "store", layer=1, data=f"pairs:{decoder['pairs']}",
                     init_from=str(decoder["gguf"]), max_len=16, progress=False)
    cfg = C.override(sae_config(steps=3, warmup=0, bootstrap=0), [
        f"data.name=activations:{root / 'store'}", "method.latents=24", "eval.evaluators=()"])
    train_and_evaluate(cfg, root / "sae", progress=False, verbose=False)
    return root / "sae"


@pytest.mark.slow
def test_features_killed_in_each_of_its_writes(sae_run, tmp_path, umask):
    """Killed writing index.html (features.json written), then again writing features.json:
    the rerun removes both temporaries and writes the uninterrupted run's two files."""
    argv = ["features", "--workdir", str(sae_run), "--top", "4", "--sample", "2", "--bins", "6",
            "--no-progress"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    _cli(tmp_path, *argv, "--out", str(full))
    assert sorted(p.name for p in full.iterdir()) == ["features.json", "index.html"]

    page = Path(_kill_when_paused(tmp_path, _pause_at("index.html"), *argv, "--out", str(killed)))
    assert page.parent == killed and page.read_bytes() == (full / "index.html").read_bytes()
    assert (killed / "features.json").read_bytes() == (full / "features.json").read_bytes()
    assert not (killed / "index.html").exists()
    data = Path(_kill_when_paused(tmp_path, _pause_at("features.json"), *argv, "--out",
                                  str(killed)))
    assert data.parent == killed and data.read_bytes() == (full / "features.json").read_bytes()
    assert sorted(killed.iterdir()) == sorted([killed / "features.json", data, page])

    r = _cli(tmp_path, *argv, "--out", str(killed))
    assert _removed(r.stderr, page, "index.html"), r.stderr[-2000:]
    assert _removed(r.stderr, data, "features.json"), r.stderr[-2000:]
    assert _tree(killed) == _tree(full)
    assert sorted(p.name for p in killed.iterdir()) == ["features.json", "index.html"]
    assert json.loads((killed / "features.json").read_text())["latents"] == 24
    assert _temporaries(tmp_path) == []
    assert set(_modes(killed).values()) == set(_modes(full).values()) == {0o666 & ~umask}


@pytest.mark.slow
def test_steer_killed_in_its_final_write(decoder, tmp_path, umask):
    """Killed writing --out over an older file: that file is still whole; the rerun removes
    the temporary and writes the uninterrupted run's file."""
    argv = ["steer", "--init-from", str(decoder["gguf"]), "--layer", "1", "--direction",
            str(decoder["ones"]), "--alpha", "1,4", "--prompts", str(decoder["prompts"]),
            "--words", "the", "--random", "2", "--new-tokens", "2", "--max-len", "16",
            "--bootstrap", "50", "--no-progress"]
    full, killed = tmp_path / "full" / "steer.json", tmp_path / "killed" / "steer.json"
    _cli(tmp_path, *argv, "--out", str(full))
    killed.parent.mkdir()
    killed.write_text('{"older": true}\n')

    seen = Path(_kill_when_paused(tmp_path, _pause_at("steer.json"), *argv, "--out",
                                  str(killed)))
    assert seen.parent == killed.parent and seen.read_bytes() == full.read_bytes()
    assert json.loads(killed.read_text()) == {"older": True}  # the old file, whole

    r = _cli(tmp_path, *argv, "--out", str(killed))
    assert _removed(r.stderr, seen, "steer.json"), r.stderr[-2000:]
    assert killed.read_bytes() == full.read_bytes()
    assert [row["alpha"] for row in json.loads(killed.read_text())["rows"]] == [1.0, 4.0]
    assert sorted(p.name for p in killed.parent.iterdir()) == ["steer.json"]
    assert _temporaries(tmp_path) == []
    assert _modes(killed.parent) == _modes(full.parent) == {"steer.json": 0o666 & ~umask}


SYNSETS = "animal.n.01,mammal.n.01,bird.n.01,fish.n.01"


@pytest.fixture(scope="module")
def word_decoder(tmp_path_factory):
    """test_concepts_command's tiny decoder whose vocabulary holds each sampled word whole."""
    from test_concepts_command import MAX_WORDS, word_gguf

    from repr_jax.train import concepts as K
    root = tmp_path_factory.mktemp("concept_kills")
    gguf = root / "tiny.gguf"
    word_gguf(gguf, K.concept_words(SYNSETS, max_words=MAX_WORDS, seed=0))
    return dict(gguf=gguf, max_words=MAX_WORDS)


@pytest.mark.slow
@needs_wordnet
def test_concepts_killed_before_its_result_and_between_direction_files(word_decoder, tmp_path,
                                                                       umask):
    """Killed writing concepts.json (every direction written), then, in that folder (directions,
    no concepts.json: accepted as one the command wrote), killed again between direction files
    (bird's written whole in its temporary, the older bird file still in place): the rerun
    removes both temporaries and writes the uninterrupted run's concepts.json and directions."""
    argv = ["concepts", "--init-from", str(word_decoder["gguf"]), "--categories", SYNSETS,
            "--max-words", str(word_decoder["max_words"]), "--template", "a {}",
            "--layers", "1", "--bootstrap", "0", "--no-progress"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    _cli(tmp_path, *argv, "--out", str(full))
    directions = sorted(str(p.relative_to(full)) for p in (full / "directions").rglob("*.npy"))
    assert len(directions) == 4  # a direction of each category

    result = Path(_kill_when_paused(tmp_path, _pause_at("concepts.json"), *argv, "--out",
                                    str(killed)))
    assert result.parent == killed and result.read_bytes() == (full / "concepts.json").read_bytes()
    assert not (killed / "concepts.json").exists()
    assert {k: v for k, v in _tree(killed).items() if k != result.name} == {
        k: v for k, v in _tree(full).items() if k != "concepts.json"}  # every direction
    layer_1 = killed / "directions" / "layer_1"
    inodes = {p.name: p.stat().st_ino for p in layer_1.iterdir()}

    between = Path(_kill_when_paused(tmp_path, _pause_at("bird.n.01.npy"), *argv, "--out",
                                     str(killed)))
    assert between.parent == layer_1  # animal's and mammal's written, bird's in its temporary
    assert between.read_bytes() == (layer_1 / "bird.n.01.npy").read_bytes() == (
        full / "directions/layer_1/bird.n.01.npy").read_bytes()
    replaced = {p.name for p in layer_1.glob("*.npy") if p.stat().st_ino != inodes[p.name]}
    assert replaced == {"animal.n.01.npy", "mammal.n.01.npy"}  # by the second run

    r = _cli(tmp_path, *argv, "--out", str(killed))
    assert _removed(r.stderr, result, "concepts.json"), r.stderr[-2000:]
    assert _removed(r.stderr, between, "bird.n.01.npy"), r.stderr[-2000:]
    assert _tree(killed) == _tree(full)  # concepts.json and the four directions, byte for byte
    assert sorted(p.name for p in killed.iterdir()) == ["concepts.json", "directions"]
    assert sorted(str(p.relative_to(killed)) for p in killed.rglob("*.npy")) == directions
    assert _temporaries(tmp_path) == []
    assert set(_modes(killed).values()) == set(_modes(full).values()) == {0o666 & ~umask}


@pytest.mark.slow
@needs_wordnet
def test_a_rerun_with_other_categories_and_layers_leaves_no_orphan(word_decoder, tmp_path,
                                                                   umask):
    """A run killed between direction files, rerun into the same folder with other categories
    and layers: the killed run's temporary and the direction files no result lists are gone,
    and so is the layer folder no longer analysed."""
    base = ["concepts", "--init-from", str(word_decoder["gguf"]), "--max-words",
            str(word_decoder["max_words"]), "--template", "a {}", "--bootstrap", "0",
            "--no-progress"]
    out = tmp_path / "out"
    between = Path(_kill_when_paused(tmp_path, _pause_at("bird.n.01.npy"), *base, "--categories",
                                     SYNSETS, "--layers", "1", "--out", str(out)))
    assert between.parent == out / "directions" / "layer_1"
    assert (out / "directions" / "layer_1" / "mammal.n.01.npy").exists()
    r = _cli(tmp_path, *base, "--categories", "mammal.n.01,bird.n.01", "--layers", "0",
             "--out", str(out))
    assert _removed(r.stderr, between, "bird.n.01.npy"), r.stderr[-2000:]
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "concepts.json", "directions", "directions/layer_0", "directions/layer_0/bird.n.01.npy",
        "directions/layer_0/mammal.n.01.npy"]
    assert _temporaries(tmp_path) == []
