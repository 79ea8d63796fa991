"""Kill -9 in the middle of a write leaves no temporary behind once the command is rerun:
`repr-jax score` during its final write, a ColBERT evaluation while it writes token vectors,
`repr-jax mine` while it writes its cache. Each command is the real CLI in a process of its own,
paused where the write is under way (the test's launcher wraps one function, so the moment is
the same on every machine) and killed there; the rerun says what it removed, leaves no temporary
anywhere ($TMPDIR included), and writes what an uninterrupted run writes, byte for byte. A
dataset preparation a kill cut short (TFDS's folder) is removed by the next preparation."""

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import CLI_COMPILE_CACHE

# Temporaries of the project's writers: write_bytes', build_index's, the token indexes', TFDS's.
TEMPORARY = re.compile(r"\..+\.[a-z0-9_]+\.(tmp|partial)|repr_jax_tokens_.*|"
                       r"\.repr_jax_probe_.*|incomplete\.[A-Z0-9]+_.*")


def _env(tmp_path: Path) -> dict:
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    return dict(os.environ, JAX_PLATFORMS="cpu", TQDM_DISABLE="1", TMPDIR=str(tmpdir),
                REPR_JAX_COMPILE_CACHE=CLI_COMPILE_CACHE,
                XLA_FLAGS="--xla_force_host_platform_device_count=1")


def _cli(tmp_path: Path, *argv) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "repr_jax.cli", *argv], env=_env(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _kill_when_paused(tmp_path: Path, pause: str, *argv) -> str:
    """Runs the CLI with ``pause`` (Python run first: it wraps a function so that, at the moment
    wanted, it prints ``paused <what>`` and sleeps), SIGKILLs it there; returns ``<what>``."""
    code = (f"import os, sys, time\nfrom pathlib import Path\n{pause}\n"
            f"from repr_jax import cli\nsys.exit(cli.main({list(argv)!r}))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(tmp_path), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # A thread reads the lines: select() on the pipe misses a "paused" line that one read took
    # into the reader's buffer with the lines before it (seen on a busy machine).
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in iter(proc.stdout.readline, "")]
                     + [lines.put(None)], daemon=True).start()
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                proc.wait()
                pytest.fail(f"it ended before the pause: {proc.stderr.read()[-3000:]}")
            if line.startswith("paused "):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                time.sleep(0.05)  # the rerun starts after the write it finds
                return line.split(" ", 1)[1].strip()
        pytest.fail("the pause never came")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _temporaries(*folders: Path) -> list[str]:
    return [str(p) for f in folders for p in f.rglob("*") if TEMPORARY.fullmatch(p.name)]


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its path there, but the lock and TensorBoard's logs (named
    by the time and pid of the process that wrote them, and holding wall times)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock" and "tfevents" not in p.name}


# Pauses in fsync of the temporary file of the write named by MARK: the data is written whole.
FSYNC_PAUSE = """
_fsync = os.fsync
def _paused(fd):
    name = os.readlink(f"/proc/self/fd/{fd}")
    if re.search(MARK, name):
        print("paused", name, flush=True)
        time.sleep(600)
    return _fsync(fd)
os.fsync = _paused
"""


def _pairs_file(path: Path) -> Path:
    path.write_text("".join(json.dumps(
        {"query": f"what is item {i}?", "positive": f"item {i} is a thing of kind {i % 7}",
         "negatives": [f"item {i + 1} is other", f"item {i + 2} differs"]}) + "\n"
        for i in range(200)))
    return path


def _text_run(tmp_path: Path, data: str, method, tokenizer: str = "", **eval_kw) -> Path:
    """A tiny text model trained 2 steps on ``data``: what the commands read."""
    from repr_jax import config as C
    from repr_jax.train import train_and_evaluate
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=data, max_len=24, data_dir=str(tmp_path / "tfds"),
                                  tokenizer=tokenizer),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=method, optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(**{"evaluators": ("retrieval",), "bootstrap": 0,
                             "reference_rows": False, **eval_kw}))
    run = tmp_path / f"run_{method.name}"
    train_and_evaluate(cfg, run, progress=False, verbose=False)
    return run


def test_an_unfinished_preparation_a_kill_left_is_removed_by_the_next(tmp_path):
    """TFDS prepares into ``incomplete.<random>_<version>/`` and renames it when done: a kill
    leaves it (made here, as a kill leaves it, with an old time)."""
    from repr_jax import data
    pairs, tfds = _pairs_file(tmp_path / "pairs.jsonl"), tmp_path / "tfds"
    data.load(f"pairs:{pairs}", data_dir=str(tfds), max_len=24)
    version = next(tfds.rglob("dataset_info.json")).parent
    shutil.rmtree(version)
    left = version.parent / f"incomplete.K1LL3D_{version.name}"
    left.mkdir()
    (left / "text_pairs-train.array_record-00000-of-00001").write_bytes(b"\0" * 100)
    os.utime(left, (0, 0))
    with pytest.warns(UserWarning, match=rf"removed {left}: an unfinished preparation of "):
        data.load(f"pairs:{pairs}", data_dir=str(tfds), max_len=24)
    assert sorted(p.name for p in version.parent.iterdir()) == [version.name]


def test_a_preparation_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    """TFDS makes an empty ``tmp*tfds`` folder there per unprepared builder (for GCS metadata,
    never removed): a preparation here leaves none."""
    import tempfile

    from repr_jax import data
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "system_tmp"))
    (tmp_path / "system_tmp").mkdir()
    data.load(f"pairs:{_pairs_file(tmp_path / 'pairs.jsonl')}", data_dir=str(tmp_path / "tfds"),
              max_len=24)
    with pytest.raises(ValueError, match="is not prepared"):  # a TFDS name, looked up
        data.load("mnist", data_dir=str(tmp_path / "tfds"))
    assert list((tmp_path / "system_tmp").iterdir()) == []


@pytest.mark.slow
def test_score_killed_in_its_final_write(tmp_path):
    from repr_jax import config as C
    pairs = _pairs_file(tmp_path / "pairs.jsonl")
    run = _text_run(tmp_path, f"pairs:{pairs}",
                    C.MethodConfig(name="cross_encoder", negatives_per_query=2), evaluators=())
    argv = ["score", "--workdir", str(run), "--data", f"pairs:{pairs}", "--no-progress"]
    full, killed = tmp_path / "full" / "scored.jsonl", tmp_path / "killed" / "scored.jsonl"
    _cli(tmp_path, *argv, "--out", str(full))

    seen = _kill_when_paused(tmp_path, f"import re\nMARK = r'/\\.scored\\.jsonl\\.'\n{FSYNC_PAUSE}",
                             *argv, "--out", str(killed))
    left = Path(seen)
    assert left.parent == killed.parent and left.stat().st_size == full.stat().st_size
    assert not killed.exists()  # before: the whole output in a hidden temporary, nothing else

    r = _cli(tmp_path, *argv, "--out", str(killed))
    assert f"repr-jax: warning: removed {left}: a temporary copy of scored.jsonl that a " \
           f"killed run left" in r.stderr.splitlines()
    assert killed.read_bytes() == full.read_bytes()
    assert sorted(p.name for p in killed.parent.iterdir()) == ["scored.jsonl"]
    assert _temporaries(tmp_path) == []


@pytest.mark.slow
def test_mine_killed_while_writing_its_cache(tmp_path):
    from repr_jax import config as C
    pairs = _pairs_file(tmp_path / "pairs.jsonl")
    run = _text_run(tmp_path, f"pairs:{pairs}",
                    C.MethodConfig(name="biencoder", objective="info_nce", proj_dim=16))
    argv = ["mine", "--workdir", str(run), "--data", f"pairs:{pairs}", "--no-progress",
            "--range-max", "20"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    _cli(tmp_path, *argv, "--out", str(full / "mined.jsonl"))

    seen = Path(_kill_when_paused(tmp_path, f"import re\nMARK = r'/\\.[a-z]+-.*\\.npz\\.'\n"
                                            f"{FSYNC_PAUSE}", *argv, "--out",
                                  str(killed / "mined.jsonl")))
    cache = killed / "mined.jsonl.cache"
    assert cache in seen.parents and seen.exists()  # before: the cache's hidden temporary
    assert not (killed / "mined.jsonl").exists()

    r = _cli(tmp_path, *argv, "--out", str(killed / "mined.jsonl"))
    assert any(line.startswith(f"repr-jax: warning: removed {seen}: a temporary copy of ")
               for line in r.stderr.splitlines()), r.stderr[-2000:]
    assert _tree(killed) == _tree(full)  # the mined lines and the cache, byte for byte
    assert _temporaries(tmp_path) == []


@pytest.mark.slow
def test_a_colbert_evaluation_killed_while_writing_token_vectors(tmp_path):
    from conftest import collection_vocab

    from repr_jax import config as C
    from repr_jax.data import beir
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=300, num_queries=20,
                                     num_train=100, seed=5)
    run = _text_run(tmp_path, f"beir:{root}", C.MethodConfig(name="colbert", dim=16),
                    evaluators=("late_interaction",), sets=(f"beir:{root}",),
                    tokenizer=str(collection_vocab(tmp_path)))
    full, killed = tmp_path / "full", tmp_path / "killed"
    shutil.copytree(run, full)
    shutil.copytree(run, killed)
    _cli(tmp_path, "eval", "--workdir", str(full), "--no-progress")

    # Pauses as a batch starts once a token index holds vectors (its earlier batches written).
    pause = f"""
import repr_jax.eval.late_interaction as li
_trim = li.trim_padding
def _paused(ids, pad_id):
    written = sorted(Path({str(killed / "cache")!r}).glob("repr_jax_tokens_*/.index.*.partial"))
    if written and (written[0] / "vectors.npy").exists():
        print("paused", written[0].parent, flush=True)
        time.sleep(600)
    return _trim(ids, pad_id)
li.trim_padding = _paused
"""
    seen = Path(_kill_when_paused(tmp_path, pause, "eval", "--workdir", str(killed),
                                  "--no-progress"))
    assert seen.parent == killed / "cache"  # before: in the run folder, not $TMPDIR
    assert list(seen.glob(".index.*.partial/vectors.npy"))

    r = _cli(tmp_path, "eval", "--workdir", str(killed), "--no-progress")
    assert f"repr-jax: warning: removed {seen}: a token index that a killed run left" in \
        r.stderr.splitlines(), r.stderr[-2000:]
    assert _tree(killed) == _tree(full)  # eval rows, plots and feature caches, byte for byte
    assert _temporaries(tmp_path) == []


@pytest.mark.slow
def test_activations_killed_mid_store_and_mid_move(tmp_path):
    """``repr-jax activations`` killed with a chunk's vectors written but not yet recorded, then
    again between moving its two files into place: each rerun finishes the store, byte for byte
    the uninterrupted one, and leaves nothing else in --out."""
    from repr_jax import config as C
    pairs = _pairs_file(tmp_path / "pairs.jsonl")
    run = _text_run(tmp_path, f"pairs:{pairs}",
                    C.MethodConfig(name="biencoder", objective="info_nce", proj_dim=16))
    argv = ["activations", "--workdir", str(run), "--layer", "0", "--data", f"pairs:{pairs}",
            "--batch-size", "2", "--no-progress"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    _cli(tmp_path, *argv, "--out", str(full))

    mid_store = """
import repr_jax.files as rf
_append = rf.append_line
def _paused(path, line):
    if '"chunk": 1,' in line:  # chunk 1's vectors are on disk, not yet recorded
        print("paused", path, flush=True)
        time.sleep(600)
    return _append(path, line)
rf.append_line = _paused
"""
    seen = Path(_kill_when_paused(tmp_path, mid_store, *argv, "--out", str(killed)))
    assert seen == killed / ".progress.jsonl" and (killed / ".vectors.npy.partial").exists()
    mid_move = """
_replace = os.replace
def _paused(src, dst):
    if str(src).endswith(".index.npy.partial"):  # vectors.npy moved, index.npy not yet
        print("paused", src, flush=True)
        time.sleep(600)
    return _replace(src, dst)
os.replace = _paused
"""
    seen = Path(_kill_when_paused(tmp_path, mid_move, *argv, "--out", str(killed)))
    assert seen == killed / ".index.npy.partial" and (killed / "vectors.npy").exists()

    _cli(tmp_path, *argv, "--out", str(killed))
    assert _tree(killed) == _tree(full)
    assert sorted(p.name for p in killed.iterdir()) == sorted(p.name for p in full.iterdir())
    assert _temporaries(tmp_path) == []
