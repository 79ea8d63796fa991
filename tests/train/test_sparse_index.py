"""``repr-jax index`` / ``repr-jax search``: a collection's SPLADE term weights on disk as an
inverted index, searched exactly (the same documents and scores as a dense product of the same
weights); every file checked against its digest, a tampered one named and not used."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_mlm import WORDS, write_mlm

from repr_jax import cli
from repr_jax.encoders.mlm import splade_encode
from repr_jax.encoders.pretrained import load_mlm

QUERIES = ["the red cat", "dogs ran away"]


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    write_mlm(root / "mlm")
    rng = np.random.default_rng(3)
    words = [w for w in WORDS if w.isalpha()]
    docs = [" ".join(rng.choice(words, int(rng.integers(3, 9)))) for _ in range(40)]
    (root / "docs.txt").write_text("\n".join(docs[:20]) + "\n\n" + "\n".join(docs[20:]) + "\n")
    return root, docs


def _search(capsys, *argv):
    assert cli.main(["search", *argv]) == 0
    hits, out = {}, capsys.readouterr().out.splitlines()
    for line in out:
        if not line.startswith("  "):
            query = line.split("\t")[0]
            hits[query] = []
        else:
            rank, score, number, text = line.strip().split("\t")
            hits[query].append((int(number[1:]), float(score), text))
    return hits


def test_an_index_of_an_mlm_searches_as_the_dense_product_of_its_weights(collection, tmp_path,
                                                                          capsys):
    root, docs = collection
    out = tmp_path / "ix"
    assert cli.main(["index", str(root / "docs.txt"), "--init-from", str(root / "mlm"), "--out",
                     str(out), "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: 40 documents, ")
    assert (out / "meta.json").is_file() and json.loads(
        (out / "source.json").read_text()) == {"init_from": str(root / "mlm")}
    hits = _search(capsys, str(out), *QUERIES, "--top", "5")
    loaded = load_mlm(root / "mlm")
    d, q = splade_encode(loaded, docs), splade_encode(loaded, QUERIES)
    for query, row in zip(QUERIES, q @ d.T):
        best = np.lexsort((np.arange(len(docs)), -row))[:5]
        got = hits[query]
        assert [n - 1 for n, _, _ in got] == best.tolist()  # numbers: non-empty lines from 1
        np.testing.assert_allclose([s for _, s, _ in got], row[best], rtol=1e-4)
        assert [t for _, _, t in got] == [docs[i] for i in best]
    # rebuilding into the same folder is allowed (an index's own files)
    assert cli.main(["index", str(root / "docs.txt"), "--init-from", str(root / "mlm"), "--out",
                     str(out), "--no-progress"]) == 0


@pytest.mark.parametrize("damage, says", [
    (lambda ix: ix.joinpath("weights.npy").write_bytes(
        ix.joinpath("weights.npy").read_bytes()[:-8]),
     "weights.npy: its content differs from the digest recorded when it was written; not used"),
    (lambda ix: ix.joinpath("documents.txt").write_text("another text\n"),
     "documents.txt: its content differs from the digest"),
    (lambda ix: ix.joinpath("doc_ids.npy.blake2b").unlink(), "doc_ids.npy: no recorded digest"),
    (lambda ix: ix.joinpath("meta.json").unlink(), "no meta.json: not an index, or one whose "
                                                   "building was stopped"),
])
def test_a_tampered_or_unfinished_index_is_named_and_not_used(collection, tmp_path, capsys,
                                                              damage, says):
    root, _ = collection
    out = tmp_path / "ix"
    assert cli.main(["index", str(root / "docs.txt"), "--init-from", str(root / "mlm"), "--out",
                     str(out), "--no-progress"]) == 0
    capsys.readouterr()
    damage(out)
    assert cli.main(["search", str(out), "cat"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and not captured.out, err


def test_bad_index_arguments_are_one_line(collection, tmp_path, capsys):
    root, _ = collection
    docs = str(root / "docs.txt")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.md").write_text("mine")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    for argv, says in (
            ([docs, "--init-from", str(root / "mlm"), "--out", str(busy)],
             "the folder holds other files (notes.md)"),
            ([docs, "--init-from", str(root / "mlm"), "--out", docs], "is a file; give a folder"),
            ([str(latin), "--init-from", str(root / "mlm"), "--out", str(tmp_path / "a")],
             "not UTF-8 text"),
            ([docs, "--workdir", str(tmp_path), "--out", str(tmp_path / "b")],
             "not a run directory"),
            ([docs, "--init-from", str(tmp_path), "--out", str(tmp_path / "c")],
             f"missing config.json in {tmp_path}")):
        assert cli.main(["index", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert not (busy / "meta.json").exists() and not (tmp_path / "a").exists()
    assert cli.main(["search", str(tmp_path / "none"), "cat"]) == 2
    assert "no such index folder" in capsys.readouterr().err


@pytest.mark.slow  # trains a splade run: ~15 s
def test_an_index_of_a_splade_run_reads_its_query_side_and_goes_stale(collection, tmp_path,
                                                                      capsys):
    from test_expand import _config

    from repr_jax import files
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    from repr_jax.train import train_and_evaluate
    from repr_jax.train.run import load_trained
    root, docs = collection
    cfg = _config(tmp_path)
    run = tmp_path / "run"
    train_and_evaluate(cfg, run, progress=False, verbose=False)
    out = tmp_path / "ix"
    assert cli.main(["index", str(root / "docs.txt"), "--workdir", str(run), "--out", str(out),
                     "--no-progress"]) == 0
    hits = _search(capsys, str(out), *QUERIES, "--top", "40")
    cfg_run, _, method, state = load_trained(run, text_only=True)
    tok, sides = make_tokenizer(cfg_run.data.tokenizer), Sides.of_section(cfg_run.data)
    d = np.asarray(method.embed_pos(state.variables, sides.encode(tok, docs, "doc")))
    q = np.asarray(method.embed_query(state.variables, sides.encode(tok, QUERIES, "query")))
    for query, row in zip(QUERIES, q @ d.T):
        got = hits[query]
        assert len(got) == int((row > 0).sum())  # only documents sharing a term
        np.testing.assert_allclose([s for _, s, _ in got], np.sort(row[row > 0])[::-1],
                                   rtol=1e-4)
    # an index built at an earlier checkpoint of the run (written as index writes its files)
    files.write_verified(out / "source.json", json.dumps({"workdir": str(run), "step": 1}
                                                         ).encode())
    assert cli.main(["search", str(out), "cat"]) == 2
    assert f"built from {run} at step 1, whose latest checkpoint is now step 2; build the " \
           f"index again" in capsys.readouterr().err


@pytest.mark.slow  # the real CLI in processes of its own, killed: ~40 s
@pytest.mark.parametrize("name", ["documents.txt", "source.json", "weights.npy", "meta.json"])
def test_index_killed_in_each_write_is_refused_then_rebuilt_byte_for_byte(collection, tmp_path,
                                                                          name):
    """Killed in the fsync of each file's temporary: ``search`` refuses the unfinished folder
    (``meta.json`` is written last, and removed first); the rerun removes the temporary, leaves
    none anywhere ($TMPDIR included) and writes what an uninterrupted run writes, byte for byte,
    with the mode a plain ``open`` gives under the umask."""
    import os
    import re
    import stat

    from test_kill_orphans import FSYNC_PAUSE, _cli, _kill_when_paused, _temporaries, _tree
    root, _ = collection
    argv = ["index", str(root / "docs.txt"), "--init-from", str(root / "mlm"), "--no-progress"]
    old = os.umask(0o027)
    try:
        full, killed = tmp_path / "full", tmp_path / "killed"
        _cli(tmp_path, *argv, "--out", str(full))
        pause = f"import re\nMARK = {re.escape('/.' + name + '.')!r}\n{FSYNC_PAUSE}"
        seen = Path(_kill_when_paused(tmp_path, pause, *argv, "--out", str(killed)))
        assert seen.parent == killed and not (killed / "meta.json").exists()
        r = subprocess.run([sys.executable, "-m", "repr_jax.cli", "search", str(killed), "cat"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "no meta.json" in r.stderr
        r = _cli(tmp_path, *argv, "--out", str(killed))
        assert f"removed {seen}: a temporary copy of {name}" in r.stderr, r.stderr[-2000:]
        assert _tree(killed) == _tree(full) and _temporaries(tmp_path) == []
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in killed.iterdir()}
        assert set(modes.values()) == {0o666 & ~0o027}
    finally:
        os.umask(old)
