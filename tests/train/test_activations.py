"""``repr-jax activations`` and ``data.name=activations:DIR``: a layer's vectors are the encoder's
own hidden states at the kept tokens (checked against flax's captured intermediates of the
trained model), padding left out, the index right, bfloat16 the float32 values rounded; a killed
write completes to the same bytes; a tampered file, an unknown layer and a folder that is not a
store are one line each; the store reads back as a dataset split by example."""

import json
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from repr_jax import config as C
from repr_jax import files
from repr_jax.data import activations as store_lib
from repr_jax.train import activations as acts


def _pairs(n):
    return [{"query": f"what is item {i}?" + " really" * (i % 5),
             "positive": f"item {i} is a thing of kind {i % 7}"} for i in range(n)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A two-block text_transformer bi-encoder trained 2 steps on a pairs file."""
    from repr_jax.train import train_and_evaluate
    root = tmp_path_factory.mktemp("acts")
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in _pairs(60)))
    cfg = C.Config(
        seed=0, data=C.DataConfig(name=f"pairs:{pairs}", max_len=24),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=2),
        method=C.MethodConfig(name="biencoder", objective="info_nce", proj_dim=16),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(evaluators=("retrieval",), bootstrap=0, reference_rows=False))
    train_and_evaluate(cfg, root / "run", progress=False, verbose=False)
    return dict(root=root, pairs=pairs, run=root / "run", data=f"pairs:{pairs}")


def _write(run, out, **kw):
    opts = dict(layer=1, data=run["data"], workdir=str(run["run"]), progress=False)
    opts.update(kw)
    return acts.activations(out=out, **opts)


@pytest.fixture(scope="module")
def stores(run, tmp_path_factory):
    """Layer 1 in float32 and bfloat16, and the embedding, of the run (batches of 2: several
    chunks)."""
    root = tmp_path_factory.mktemp("stores")
    out = {name: root / name for name in ("f32", "bf16", "emb")}
    _write(run, out["f32"], batch_size=2)
    _write(run, out["bf16"], batch_size=2, dtype="bfloat16")
    _write(run, out["emb"], batch_size=2, layer="embedding")
    return out


def _reference(run):
    """Token ids of the source's texts and the model's own per-block token states (flax's
    captured intermediates of the trained method's model: no code of the writer)."""
    from repr_jax.train.run import load_trained
    cfg, _, method, state = load_trained(run["run"], text_only=True)
    texts = acts.texts_of(run["data"])
    from repr_jax.data.tokenizer import Sides, make_tokenizer
    ids = Sides.of_section(cfg.data).encode(make_tokenizer(cfg.data.tokenizer), texts, "doc")
    _, inter = method.model.apply(state.variables, ids, method=method.model.embed,
                                  capture_intermediates=True, mutable=["intermediates"])
    flat = {"/".join(map(str, k)): v for k, v in _flatten(inter["intermediates"])}
    block = {i: np.asarray(next(v for k, v in flat.items()
                                if k.endswith(f"encoder/layer_{i}/__call__"))[0])
             for i in range(2)}
    emb = np.asarray(method.embed(state.variables, ids))
    return np.asarray(ids), block, emb


def _flatten(tree, prefix=()):
    if isinstance(tree, dict) or hasattr(tree, "items"):
        for k, v in tree.items():
            yield from _flatten(v, prefix + (k,))
    else:
        yield prefix, tree


def test_layer_vectors_are_the_encoders_hidden_states_at_kept_tokens(run, stores):
    ids, block, emb = _reference(run)
    store = store_lib.open_store(stores["f32"])
    kept = ids != 0  # the byte tokenizer pads with 0
    ex, pos = np.nonzero(kept)
    assert store.vectors.shape == (kept.sum(), 32) and store.vectors.dtype == np.float32
    assert kept.sum() < kept.size  # there was padding, and it is left out
    np.testing.assert_array_equal(store.index, np.stack([ex, pos], 1))
    np.testing.assert_allclose(store.vectors, block[1][ex, pos], rtol=1e-5, atol=1e-5)
    assert not np.allclose(store.vectors, block[0][ex, pos], atol=1e-3)  # block 1, not 0
    meta = store.meta
    assert meta["layer"] == 1 and meta["width"] == 32 and meta["vectors"] == kept.sum()
    assert meta["examples"] == len(ids) and meta["encoder"] == "text_transformer"
    assert meta["model"] == str(run["run"].absolute()) and meta["step"] == 2
    assert meta["data"] == f"pairs:{run['pairs']}" and meta["created_by"].startswith("repr_jax")
    # the embedding: one vector per example, position -1
    e = store_lib.open_store(stores["emb"])
    np.testing.assert_allclose(e.vectors, emb, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(e.index, np.stack([np.arange(len(ids)),
                                                     np.full(len(ids), -1)], 1))
    # np.load maps the files as the docstring says
    assert np.load(stores["f32"] / "vectors.npy", mmap_mode="r").shape == (kept.sum(), 32)


def test_bfloat16_is_the_float32_values_rounded(stores):
    f32 = store_lib.open_store(stores["f32"])
    bf16 = store_lib.open_store(stores["bf16"])
    assert bf16.vectors.dtype == ml_dtypes.bfloat16 and bf16.meta["dtype"] == "bfloat16"
    np.testing.assert_array_equal(bf16.vectors.view(np.uint16),
                                  np.asarray(f32.vectors).astype(ml_dtypes.bfloat16)
                                  .view(np.uint16))
    np.testing.assert_array_equal(bf16.index, f32.index)
    half = (stores["bf16"] / "vectors.npy").stat().st_size
    assert half < 0.6 * (stores["f32"] / "vectors.npy").stat().st_size


class Killed(BaseException):
    pass


def test_a_killed_write_resumes_to_the_same_bytes_and_leaves_no_temporary(
        run, stores, tmp_path, monkeypatch):
    out = tmp_path / "resumed"
    real, calls = files.append_line, []

    def dies_after_two_chunks(path, line):
        calls.append(line)
        if len(calls) == 3:
            raise Killed
        real(path, line)
    monkeypatch.setattr(files, "append_line", dies_after_two_chunks)
    with pytest.raises(Killed):
        _write(run, out, batch_size=2)
    assert not (out / "meta.json").exists() and (out / ".progress.jsonl").exists()
    monkeypatch.setattr(files, "append_line", lambda p, line: (calls.append(line),
                                                             real(p, line)))
    calls.clear()
    _write(run, out, batch_size=2)
    chunks = -(-store_lib.open_store(stores["f32"]).meta["examples"] // (2 * acts.CHUNK_BATCHES))
    assert chunks >= 3 and len(calls) == chunks - 2  # the two recorded chunks kept
    for name in ("vectors.npy", "index.npy", "vectors.npy.blake2b", "index.npy.blake2b"):
        assert (out / name).read_bytes() == (stores["f32"] / name).read_bytes(), name
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["meta.json", "vectors.npy", "index.npy", "vectors.npy.blake2b", "index.npy.blake2b"])
    # a rerun of a finished store verifies it and writes nothing
    mtime = (out / "vectors.npy").stat().st_mtime_ns
    _write(run, out, batch_size=2)
    assert (out / "vectors.npy").stat().st_mtime_ns == mtime


def test_a_norm_limit_leaves_out_the_large_vectors_and_survives_a_kill(
        run, stores, tmp_path, monkeypatch):
    """``max_norm_ratio``: the rows of the full store whose norm is at most the ratio times the
    median, in order, the limit and the count recorded; a kill while the kept rows replace the
    files leaves the partial ones, and a rerun writes the same bytes and no temporary."""
    full = store_lib.open_store(stores["f32"])
    v, index = np.asarray(full.vectors), np.asarray(full.index)
    norms = np.linalg.norm(v, axis=1)
    ratio = float(np.quantile(norms, 0.9) / np.median(norms))  # ~10% left out
    limit, keep = ratio * np.median(norms), norms <= ratio * np.median(norms)
    assert ratio > 1 and 0 < (~keep).sum() < len(keep) // 5
    real, calls = files.record_digest, []

    def dies_once(path):
        calls.append(path)
        if len(calls) == 2:  # the vectors are in place, the index is not
            raise Killed
        real(path)
    monkeypatch.setattr(files, "record_digest", dies_once)
    with pytest.raises(Killed):
        _write(run, tmp_path / "cut", batch_size=2, max_norm_ratio=ratio)
    assert (tmp_path / "cut" / ".vectors.npy.partial").exists()
    monkeypatch.setattr(files, "record_digest", real)
    meta = _write(run, tmp_path / "cut", batch_size=2, max_norm_ratio=ratio)
    store = store_lib.open_store(tmp_path / "cut")
    np.testing.assert_array_equal(np.asarray(store.vectors), v[keep])
    np.testing.assert_array_equal(np.asarray(store.index), index[keep])
    assert meta["max_norm"] == pytest.approx(limit, rel=1e-6)
    assert (meta["dropped"], meta["vectors"], meta["max_norm_ratio"]) == (
        int((~keep).sum()), int(keep.sum()), ratio)
    assert sorted(p.name for p in (tmp_path / "cut").iterdir()) == sorted(
        ["meta.json", "vectors.npy", "index.npy", "vectors.npy.blake2b", "index.npy.blake2b"])
    assert full.meta["max_norm"] is None and full.meta["dropped"] == 0  # off for a text encoder
    for bad in (0.5, -1.0):
        with pytest.raises(ValueError, match="--max-norm-ratio must be above 1"):
            _write(run, tmp_path / "bad", max_norm_ratio=bad)


def test_the_splice_leaves_vectors_above_the_stores_norm_limit():
    import jax.numpy as jnp

    from repr_jax.train.splice import replaced
    h = jnp.asarray([[[3.0, 4.0], [30.0, 40.0], [0.3, 0.4]]])  # norms 5, 50, 0.5
    kept = jnp.asarray([[True, True, False]])
    out = replaced(h, kept, "zero_ablation", None, jnp.zeros(2), max_norm=10.0)
    np.testing.assert_array_equal(out, np.where([[[0], [1], [1]]], h, 0))
    out = replaced(h, kept, "zero_ablation", None, jnp.zeros(2))
    np.testing.assert_array_equal(out, np.where([[[0], [0], [1]]], h, 0))


def test_a_tampered_file_is_refused_in_one_line(stores, tmp_path):
    from repr_jax import data
    copy = tmp_path / "copy"
    shutil.copytree(stores["f32"], copy)
    with open(copy / "vectors.npy", "r+b") as f:
        f.seek(-3, 2)
        f.write(b"\x01\x02\x03")
    with pytest.raises(ValueError) as e:
        data.load(f"activations:{copy}", data_dir=str(tmp_path / "tfds"))
    message = str(e.value)
    assert len(message.splitlines()) == 1 and str(copy / "vectors.npy") in message
    assert "differs from the digest" in message and "not used" in message
    (copy / "index.npy.blake2b").unlink()
    with pytest.raises(ValueError, match="no recorded digest"):
        store_lib.check_digest(copy / "index.npy")


def test_an_unknown_layer_is_one_line_naming_the_valid_ones(run, tmp_path):
    out = tmp_path / "never"
    with pytest.raises(ValueError) as e:
        _write(run, out, layer=2)
    assert str(e.value) == ("--layer 2: the text_transformer has 2 block(s); choose a block 0 "
                            "to 1 (counted from 0) or embedding")
    with pytest.raises(ValueError, match="--layer 'last': give a block number"):
        _write(run, out, layer="last")
    assert not out.exists()


def test_outputs_never_replace_an_input_or_enter_a_run_folder(run, tmp_path):
    with pytest.raises(ValueError, match="lies inside the run folder"):
        _write(run, run["run"] / "acts")
    with pytest.raises(ValueError, match="is a file"):
        _write(run, run["pairs"])
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds other files .notes.txt. and is not an "
                                         "activations folder"):
        _write(run, tmp_path / "busy")


def test_as_a_dataset_vectors_split_by_example_and_stream(stores, tmp_path):
    from repr_jax import data
    from repr_jax.data.source import SourceSplit
    store = store_lib.open_store(stores["bf16"])
    held = data.load(f"activations:{stores['bf16']}", data_dir=str(tmp_path / "tfds"))
    streamed = data.load(f"activations:{stores['bf16']}", data_dir=str(tmp_path / "tfds"),
                         in_memory_mb=0)
    assert held.input_shape == (32,) and held.num_classes == 1 and held.vocab is None
    example = store.index[:, 0]
    for split, rule in (("test", example % 10 == 0), ("validation", example % 10 == 1),
                        ("train", example % 10 >= 2)):
        x = held.splits[split]["x"]
        assert isinstance(x, np.ndarray) and x.dtype == np.float32 and x.shape[1] == 32
        np.testing.assert_array_equal(x, np.asarray(store.vectors[rule], np.float32))
        assert (held.splits[split]["label"] == 0).all()
        s = streamed.splits[split]
        assert isinstance(s, SourceSplit)
        rows = np.asarray([3, 0, len(s) - 1])
        np.testing.assert_array_equal(s["x"][rows], x[rows])
    batch = data.BatchStream(streamed.splits["train"], batch_size=8, seed=0).batch(1)
    assert batch["x"].shape == (8, 32) and batch["x"].dtype == np.float32
    with pytest.raises(ValueError, match="is not an activations folder .no meta.json"):
        data.load(f"activations:{tmp_path}", data_dir=str(tmp_path / "tfds"))
    with pytest.raises(ValueError, match="no such folder"):
        data.load(f"activations:{tmp_path / 'nowhere'}", data_dir=str(tmp_path / "tfds"))


@pytest.mark.slow
def test_the_command_line_writes_resumes_and_refuses(run, tmp_path):
    out = tmp_path / "cli"

    def cli(*extra):
        return subprocess.run([sys.executable, "-m", "repr_jax.cli", "activations",
                               "--workdir", str(run["run"]), "--data", run["data"],
                               "--out", str(out), "--no-progress", *extra],
                              capture_output=True, text=True, timeout=300)

    done = cli("--layer", "0", "--dtype", "bfloat16")
    assert done.returncode == 0, done.stderr
    assert "vectors of width 32 (bfloat16)" in done.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["layer"] == 0 and meta["dtype"] == "bfloat16"
    again = cli("--layer", "0", "--dtype", "bfloat16")
    assert again.returncode == 0 and "nothing to do" in again.stderr
    other = cli("--layer", "1")
    assert other.returncode == 2 and len(other.stderr.strip().splitlines()) == 1
    assert "holds activations of other settings" in other.stderr
    bad = cli("--layer", "7")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "repr-jax: error: --layer 7: the text_transformer has 2 block(s); choose a block 0 to "
        "1 (counted from 0) or embedding"]
    from repr_jax.data.tokenizer import minilm_dir
    if minilm_dir() is not None:  # a pretrained model, no run
        mini = subprocess.run([sys.executable, "-m", "repr_jax.cli", "activations",
                               "--init-from", "minilm", "--layer", "5", "--data", run["data"],
                               "--out", str(tmp_path / "minilm"), "--max-len", "16",
                               "--no-progress"], capture_output=True, text=True, timeout=300)
        assert mini.returncode == 0, mini.stderr
        store = store_lib.open_store(tmp_path / "minilm")
        assert store.vectors.shape[1] == 384 and store.meta["model"] == "minilm"


def test_a_decoders_instruction_tokens_and_padding_get_no_vector():
    # decoder_lm ids: -1 padding, -2 - id an instruction token (read, not content)
    valid, kept, text = acts._token_masks("decoder_lm", -1)
    ids = np.asarray([[-2 - 7, -2 - 8, 5, 6, -1, -1], [-2 - 7, 9, -1, -1, -1, -1]])
    np.testing.assert_array_equal(valid(ids), ids != -1)
    np.testing.assert_array_equal(np.argwhere(kept(ids)), [[0, 2], [0, 3], [1, 1]])
    np.testing.assert_array_equal(text(ids), kept(ids))
    assert acts.trim_columns(ids, valid(ids), bucket=4).shape == (2, 4)


def test_skip_first_leaves_out_the_first_tokens_each_row_reads():
    # counted over the tokens the model reads (instruction tokens too), so a row without an
    # instruction loses its first text token and a row behind an instruction loses nothing more
    valid, kept, text = acts._token_masks("decoder_lm", 0, skip_first=1)
    ids = np.asarray([[4, 5, 6, 0, -1], [-2 - 7, 9, 3, 0, 0], [8, -1, -1, -1, -1]])
    np.testing.assert_array_equal(np.argwhere(kept(ids)), [[0, 1], [0, 2], [1, 1], [1, 2]])
    np.testing.assert_array_equal(np.argwhere(text(ids)),
                                  [[0, 0], [0, 1], [0, 2], [1, 1], [1, 2], [2, 0]])
    _, kept2, _ = acts._token_masks("text_transformer", 0, skip_first=2)
    np.testing.assert_array_equal(np.argwhere(kept2(np.asarray([[101, 7, 8, 102, 0]]))),
                                  [[0, 2], [0, 3]])
