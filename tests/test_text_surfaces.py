"""The text surfaces (``pairs:``, ``beir:``, ``repr-jax mine``, ``fit``) through the command line,
one test per class of fault a bad-input battery found: outputs that replaced inputs, numbers that
were silently wrong, bad text not named, checks that came too late, caches and locks that followed
symbolic links, files only their writer could read, progress bars, paths stored as given, and a
dry run that sized the wrong corpus. Every error is one line and writes nothing."""

import gzip
import json
import os
import stat

import numpy as np
import pytest

from repr_jax import cli
from repr_jax import config as C
from repr_jax.data import beir

pytrec_eval = pytest.importorskip("pytrec_eval")


def _pairs(n, start=0):
    return [{"query": f"what is item {i}?", "positive": f"item {i} is a thing of kind {i % 7}",
             "negatives": [f"item {i + 1} is other", f"item {i + 2} differs"]}
            for i in range(start, start + n)]


def _lines(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


def text_config(pairs, **eval_kw):
    return C.Config(
        seed=0, data=C.DataConfig(name=f"pairs:{pairs}", max_len=24),
        encoder=C.EncoderConfig(name="text_transformer", variant="tiny", width=32, num_heads=2,
                                mlp_dim=64, depth=1),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1,
                              proj_dim=16),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
        eval=C.EvalConfig(**{"evaluators": ("retrieval",), "bootstrap": 0,
                             "reference_rows": False, **eval_kw}))


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """A pairs file, its config as an experiment file, a BEIR collection, and a run trained on
    the pairs (2 steps)."""
    from repr_jax.train import train_and_evaluate
    root = tmp_path_factory.mktemp("text")
    pairs = root / "pairs.jsonl"
    pairs.write_text(_lines(_pairs(400)))
    cfg_file = root / "text_cfg.py"
    cfg_file.write_text(
        "from repr_jax import config as C\n\n\ndef get_config(arg=None):\n"
        f"    return C.Config(seed=0, data=C.DataConfig(name='pairs:{pairs}', max_len=24),\n"
        "        encoder=C.EncoderConfig(name='text_transformer', variant='tiny', width=32,\n"
        "                                num_heads=2, mlp_dim=64, depth=1),\n"
        "        method=C.MethodConfig(name='biencoder', objective='info_nce', proj_dim=16),\n"
        "        optim=C.OptimConfig(warmup_steps=0),\n"
        "        train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),\n"
        "        eval=C.EvalConfig(evaluators=('retrieval',), bootstrap=0))\n")
    coll = beir.synthetic_collection(root / "coll", num_docs=600, num_queries=40, num_train=200)
    train_and_evaluate(text_config(pairs), root / "run", progress=False, verbose=False)
    return dict(root=root, pairs=pairs, config=str(cfg_file), coll=coll, run=root / "run")


@pytest.fixture(scope="module")
def signal_run(tmp_path_factory):
    """A run of the tiny 1-D signal CNN (not text)."""
    from conftest import tiny_config

    from repr_jax.train import train_and_evaluate
    workdir = tmp_path_factory.mktemp("signal") / "run"
    cfg = C.override(tiny_config(), ["train.steps=2", "eval.evaluators=('knn',)",
                                     "eval.reference_rows=False"])
    train_and_evaluate(cfg, workdir, progress=False, verbose=False)
    return workdir


def one_line_error(capsys, argv, *messages):
    """Runs the CLI in this process; it must exit 2 with one error line holding ``messages``."""
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith(("preparing ", "prepared ", "repr-jax: note: "))]
    assert code == 2, err
    assert len(err) == 1 or (err and err[0].startswith("usage:")), err
    for m in messages:
        assert m in err[-1], err[-1]
    assert "Traceback" not in "\n".join(err)
    return err[-1]


def digest(path):
    import hashlib
    return hashlib.sha1(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------------
# Outputs never replace an input, a run's file, or anything outside their folder
# --------------------------------------------------------------------------------------------------

def test_mine_never_writes_over_an_input_or_into_a_run_folder(text, capsys, tmp_path):
    victim = tmp_path / "victim.jsonl"
    victim.write_text(text["pairs"].read_text())
    before = digest(victim)
    mine = ["mine", "--workdir", str(text["run"]), "--no-progress"]
    one_line_error(capsys, [*mine, "--data", f"pairs:{victim}", "--out", str(victim)],
                   "--out", "is an input of this command")
    link = tmp_path / "link.jsonl"
    link.symlink_to(victim)
    one_line_error(capsys, [*mine, "--data", f"pairs:{victim}", "--out", str(link)],
                   "is a symbolic link")
    assert digest(victim) == before
    config = text["run"] / "config.json"
    before = digest(config)
    one_line_error(capsys, [*mine, "--data", f"pairs:{victim}", "--out", str(config)],
                   "lies inside the run folder")
    one_line_error(capsys, [*mine, "--data", f"pairs:{victim}", "--out",
                            str(text["run"] / "new" / "mined.jsonl")], "lies inside the run folder")
    assert digest(config) == before and not (text["run"] / "new").exists()
    assert not list(tmp_path.glob("*.cache"))


def test_fit_writes_only_into_its_out_folder(capsys, tmp_path):
    table = tmp_path / "sweep" / "results.csv"
    table.parent.mkdir()
    table.write_text("N,loss\n" + "".join(f"{n},{3 * n ** -0.3:.6f}\n"
                                          for n in (10, 30, 100, 300, 1000, 3000)))
    fit = ["fit", "--table", str(table), "--law", "power", "--x", "N", "--y", "loss",
           "--bootstrap", "20"]
    one_line_error(capsys, [*fit, "--out", str(tmp_path / "out"), "--name", "../../escaped"],
                   "--name '../../escaped' must be a plain name")
    (tmp_path / "afile").write_text("x")
    one_line_error(capsys, [*fit, "--out", str(tmp_path / "afile")], "is a file; give a folder")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["afile", "results.csv", "sweep"]


# --------------------------------------------------------------------------------------------------
# Numbers: negative grades, qrels without a header, collections with nothing relevant
# --------------------------------------------------------------------------------------------------

def _junk_collection(root):
    """Graded 2 for two documents of each query, -1 (TREC's junk) for two others."""
    corpus = {f"d{i}": ("", f"item {i} is a thing of kind {i % 7}") for i in range(60)}
    queries = {f"q{i}": f"what is item {i}?" for i in range(15)}
    grades = [(f"q{i}", f"d{(i + j) % 60}", g) for i in range(15)
              for j, g in ((0, 2), (30, 2), (1, -1), (2, -1))]
    return beir.write_collection(root, corpus, queries, {"test": grades}), grades


def test_ndcg_with_negative_grades_equals_pytrec_eval_through_the_cli(text, capsys, tmp_path):
    from repr_jax.eval import Embedder
    from repr_jax.train import load_trained
    from repr_jax.train.run import load_eval_sets
    root, grades = _junk_collection(tmp_path / "neg")
    assert cli.main(["eval", "--workdir", str(text["run"]), "--no-progress", "--set",
                     f"eval.sets=('beir:{root}',)", "--set",
                     "eval.retrieval.metrics=('ndcg@10','ndcg@5')"]) == 0
    capsys.readouterr()
    rows = json.loads((text["run"] / "eval" / "step_2.json").read_text())
    ours = {r["metric"]: r["value"] for r in rows if r["metric"].startswith("beir_neg/")}
    # pytrec_eval on the run's own scores of every document (the same trained towers)
    cfg, dataset, method, state = load_trained(text["run"],
                                               overrides=[f"eval.sets=('beir:{root}',)"])
    s = load_eval_sets(cfg, dataset)[0]
    emb = Embedder(method.embed, {}, query_fn=method.embed_query, pos_fn=method.embed_pos)
    q, c = (np.asarray(emb.embed(state.variables, a, w))
            for a, w in ((s.queries, "query"), (s.corpus, "pos")))
    scores = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
        c / np.linalg.norm(c, axis=1, keepdims=True)).T
    qrels = {}
    for qid, did, g in grades:
        qrels.setdefault(qid, {})[did] = g
    run = {f"q{i}": {f"d{j}": float(scores[i, j]) for j in range(60)} for i in range(15)}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_5", "ndcg_cut_10"}).evaluate(run)
    for k in (5, 10):
        want = np.mean([ref[f"q{i}"][f"ndcg_cut_{k}"] for i in range(15)])
        assert ours[f"beir_neg/ndcg@{k}"] == pytest.approx(want, abs=1e-5)
        assert 0 <= ours[f"beir_neg/ndcg@{k}"] <= 1


def test_qrels_scores_written_as_floats_and_headerless_files_keep_every_row(tmp_path):
    root, _ = _junk_collection(tmp_path / "c")
    qrels = root / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines()[1:]  # no header
    lines[0] = lines[0].rsplit("\t", 1)[0] + "\t2.0"
    qrels.write_text("\n".join(lines) + "\n")
    got = beir.read_collection(root).qrels["test"]
    assert len(got["grade"]) == 60 and got["grade"][0] == 2
    lines[3] = lines[3].rsplit("\t", 1)[0] + "\t0.5"
    qrels.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"test.tsv:4: score '0.5' is not a whole number"):
        beir.read_collection(root)


def test_a_collection_with_nothing_relevant_is_one_line(text, capsys, tmp_path):
    corpus = {f"d{i}": ("", f"doc {i}") for i in range(10)}
    root = beir.write_collection(tmp_path / "allneg", corpus, {"q0": "a query"},
                                 {"test": [("q0", "d0", -1), ("q0", "d1", 0)]})
    one_line_error(capsys, ["eval", "--workdir", str(text["run"]), "--no-progress", "--set",
                            f"eval.sets=('beir:{root}',)"],
                   "no judgement of qrels/test.tsv has a grade >= 1 (its grades: -1, 0)")


# --------------------------------------------------------------------------------------------------
# Bad text: named with its file and line
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, message", [
    ("byte", "bad.jsonl:31: byte 15 of the line (0xff) is not UTF-8"),
    ("latin1", "bad.jsonl:31: byte 15 of the line (0xe9) is not UTF-8; the file must be UTF-8"),
    ("gzip", "bad.jsonl is gzip-compressed, not text: decompress it first"),
    ("surrogate", "bad.jsonl:31: 'query' holds a lone surrogate (\\ud800 at character 3)"),
    ("no query", "bad.jsonl:31: no 'query' (or 'anchor') field (it has ['positive']"),
])
def test_bad_text_is_named_by_file_and_line(text, capsys, tmp_path, kind, message):
    good = _lines(_pairs(30)).encode()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes({
        "byte": good + b'{"query": "caf\xff", "positive": "x"}\n',
        "latin1": good + '{"query": "café", "positive": "x"}\n'.encode("latin-1"),
        "gzip": gzip.compress(good),
        "surrogate": good + b'{"query": "a \\ud800 b", "positive": "x"}\n',
        "no query": good + b'{"positive": "x"}\n'}[kind])
    one_line_error(capsys, ["train", "--config", text["config"], "--workdir",
                            str(tmp_path / "w"), "--no-progress", "--set",
                            f"data.name=pairs:{bad}"], message)
    assert not (tmp_path / "w").exists()


# --------------------------------------------------------------------------------------------------
# Checked before anything heavy runs
# --------------------------------------------------------------------------------------------------

def test_negatives_per_query_is_checked_against_the_file_before_tokenising(text, capsys,
                                                                           tmp_path):
    one_line_error(capsys, ["train", "--config", text["config"], "--workdir",
                            str(tmp_path / "w"), "--no-progress", "--set",
                            "method.negatives_per_query=100000"],
                   "method.negatives_per_query=100000, but no line of", "has more than 2 "
                   "negatives", "use at most 2")
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("extra, message", [
    (["--margin", "nan"], "argument --margin: must be a finite number, got nan"),
    (["--max-score", "nan"], "argument --max-score: must be a finite number, got nan"),
    (["--seed", "-1"], "argument --seed: must be at least 0, got -1"),
    (["--out", "AFILE/out.jsonl"], "AFILE is a file, not a folder"),
    (["--out", "C/out.jsonl"], "out.jsonl.cache is a file; mine keeps its corpus embeddings"),
])
def test_mine_checks_its_arguments_before_encoding(text, capsys, tmp_path, extra, message):
    (tmp_path / "AFILE").write_text("x")
    (tmp_path / "C").mkdir()
    (tmp_path / "C" / "out.jsonl.cache").write_text("x")
    extra = [e.replace("AFILE", str(tmp_path / "AFILE")).replace("C/", f"{tmp_path / 'C'}/")
             for e in extra]
    if "--out" not in extra:
        extra += ["--out", str(tmp_path / "m" / "out.jsonl")]
    one_line_error(capsys, ["mine", "--workdir", str(text["run"]), "--data",
                            f"pairs:{text['pairs']}", "--no-progress", *extra],
                   message.replace("AFILE", str(tmp_path / "AFILE")))
    assert not (tmp_path / "m").exists()


def test_mine_refuses_a_run_that_does_not_read_text_and_never_prepares_its_data(
        text, signal_run, capsys, tmp_path, monkeypatch):
    out = tmp_path / "m" / "out.jsonl"
    one_line_error(capsys, ["mine", "--workdir", str(signal_run), "--data",
                            f"pairs:{text['pairs']}", "--out", str(out), "--no-progress"],
                   "its encoder 'cnn' reads mnist1d inputs, not text")
    assert not out.parent.exists()
    # a text run's towers encode without its training data being prepared again
    data_dir = tmp_path / "fresh_data_dir"
    monkeypatch.setenv("REPR_JAX_DATA_DIR", str(data_dir))
    assert cli.main(["mine", "--workdir", str(text["run"]), "--data", f"pairs:{text['pairs']}",
                     "--out", str(out), "--no-progress", "--range-max", "20"]) == 0
    assert out.exists() and not data_dir.exists()


RAY = ["--executor", "ray", "--ray-address", "127.0.0.1:1"]  # nothing there: refused first
SWEEP = ["sweep", "--config", "simclr_mnist1d:quick", "--grid", "seed=[0,1]", *RAY]


@pytest.mark.parametrize("argv, message", [
    ([*SWEEP, "--max-retries", "-1"], "argument --max-retries: must be at least 0, got -1"),
    ([*SWEEP, "--point-cpus", "-2"], "argument --point-cpus: must be a finite number >= 0, "
                                     "got -2"),
    (["study", "finetune_minilm_wordnet", *RAY, "--point-gpus", "-1"],
     "argument --point-gpus: must be a finite number >= 0, got -1"),
    (["fit", "--law", "power", "--x", "N", "--y", "loss", "--holdout-above", "nan"],
     "argument --holdout-above: must be a finite number, got nan"),
])
def test_executor_and_fit_numbers_are_checked_by_the_parser(capsys, tmp_path, argv, message):
    where = ["--workdir", str(tmp_path / "w")] if argv[0] != "fit" else ["--table", "t.csv"]
    one_line_error(capsys, [*argv, *where], message)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("table, message", [
    ("N,loss\n0,1.0\n-5,0.9\n10,0.8\n30,0.7\n100,0.6\n300,0.5\n",
     "column 'N' has 2 rows <= 0 (e.g. 0); law 'power' takes log x"),
    ("N,loss,loss\n10,1,1\n30,0.9,2\n100,0.8,3\n300,0.7,4\n",
     "the header names 'loss' twice (columns [2, 3])"),
])
def test_fit_refuses_tables_it_would_fit_wrongly(capsys, tmp_path, table, message):
    path = tmp_path / "results.csv"
    path.write_text(table)
    one_line_error(capsys, ["fit", "--table", str(path), "--law", "power", "--x", "N", "--y",
                            "loss", "--bootstrap", "20"], message)
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_an_empty_beir_path_and_an_unwritable_workdir_are_one_line(text, capsys, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(text["coll"])  # a collection in the current folder is not read silently
    one_line_error(capsys, ["train", "--config", text["config"], "--workdir",
                            str(tmp_path / "w"), "--set", "eval.sets=('beir:',)"],
                   "beir: needs a folder after the colon")
    if os.path.isdir("/sys/kernel"):  # Linux's sysfs: nobody, root included, makes folders there
        one_line_error(capsys, ["train", "--config", "simclr_mnist1d:quick", "--workdir",
                                "/sys/repr_jax_run"], "--workdir /sys/repr_jax_run cannot be "
                                                      "written: making a folder in /sys failed")


# --------------------------------------------------------------------------------------------------
# Caches and locks: no symbolic link followed, nothing used that changed since it was written
# --------------------------------------------------------------------------------------------------

def test_caches_and_locks_follow_no_symbolic_link(text, capsys, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "s" / "out.jsonl"
    out.parent.mkdir()
    (tmp_path / "s" / "out.jsonl.cache").symlink_to(elsewhere)
    one_line_error(capsys, ["mine", "--workdir", str(text["run"]), "--data",
                            f"pairs:{text['pairs']}", "--out", str(out), "--no-progress"],
                   "out.jsonl.cache (where mine keeps its corpus embeddings) is a symbolic link")
    data_dir = tmp_path / "dd"
    data_dir.mkdir()
    (data_dir / "beir").symlink_to(elsewhere)
    monkeypatch.setenv("REPR_JAX_DATA_DIR", str(data_dir))
    one_line_error(capsys, ["eval", "--workdir", str(text["run"]), "--no-progress", "--set",
                            f"eval.sets=('beir:{text['coll']}',)"],
                   f"{data_dir / 'beir'} is a symbolic link", "refusing to write a collection's "
                   "token ids through it")
    data_dir2 = tmp_path / "dd2"
    data_dir2.mkdir()
    (data_dir2 / ".mnist1d.prepare.lock").symlink_to(tmp_path / "lock_target")
    monkeypatch.setenv("REPR_JAX_DATA_DIR", str(data_dir2))
    one_line_error(capsys, ["train", "--config", "simclr_mnist1d:quick", "--workdir",
                            str(tmp_path / "w"), "--no-progress"],
                   ".mnist1d.prepare.lock is a symbolic link", "refusing to use it as a lock")
    assert not list(elsewhere.iterdir()) and not (tmp_path / "lock_target").exists()


def test_cached_features_replaced_are_not_used(text, tmp_path, recwarn):
    out = tmp_path / "r" / "out.jsonl"
    argv = ["mine", "--workdir", str(text["run"]), "--data", f"pairs:{text['pairs']}", "--out",
            str(out), "--no-progress", "--range-max", "20"]
    assert cli.main(argv) == 0
    first = out.read_text()
    cached = sorted((tmp_path / "r").rglob("*.npz"))
    assert cached and all(p.with_name(p.name + ".blake2b").exists() for p in cached)
    rng = np.random.default_rng(1)
    for npz in cached:  # random arrays of the same shapes, as a damaged or stale cache
        with np.load(npz) as z:
            arrays = {k: rng.normal(size=z[k].shape).astype(z[k].dtype) for k in z.files}
        with open(npz, "wb") as f:
            np.savez(f, **arrays)
    assert cli.main(argv) == 0
    assert out.read_text() == first
    said = [str(w.message) for w in recwarn]
    assert sum("cached features not used (its content differs from the digest" in m
               for m in said) == len(cached), said


def test_beir_token_ids_changed_on_disk_are_made_again(text, tmp_path):
    from repr_jax.data import eval_sets
    s = eval_sets.beir(text["coll"], max_len=16, data_dir=str(tmp_path))
    right = np.array(s.corpus)
    ids = next(tmp_path.rglob("corpus_ids.npy"))
    ids.unlink()
    np.save(ids, np.zeros_like(right))  # same shape, wrong ids
    with pytest.warns(UserWarning, match="cached token ids not used .its content differs"):
        again = eval_sets.beir(text["coll"], max_len=16, data_dir=str(tmp_path))
    np.testing.assert_array_equal(again.corpus, right)


# --------------------------------------------------------------------------------------------------
# Progress bars, recorded paths, the dry run's sizes
# --------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_no_progress_means_no_bar_and_an_error_starts_its_own_line(text, tmp_path):
    """In a fresh process, as a user runs it (tqdm reads TQDM_DISABLE when it is imported)."""
    import subprocess
    import sys
    late = tmp_path / "late_bad.jsonl"
    late.write_text(_lines(_pairs(5000)) + "{not json\n")
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    env["REPR_JAX_DATA_DIR"] = str(tmp_path / "dd")  # the run's data not prepared yet
    train = [sys.executable, "-m", "repr_jax.cli", "train", "--config", text["config"],
             "--workdir", str(tmp_path / "w"), "--set", f"data.name=pairs:{late}"]
    r = subprocess.run(train, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "pairs: tokenising" in r.stderr  # a bar was on the line
    error = next(line for line in r.stderr.split("\n") if "error:" in line)
    assert "late_bad.jsonl:5001: not JSON" in error
    # what a terminal shows: the text after the line's last carriage return (the bar cleared)
    assert error.split("\r")[-1].startswith("repr-jax: error: "), repr(error)
    r = subprocess.run(train + ["--no-progress"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 2 and "late_bad.jsonl:5001" in r.stderr
    assert "tokenising" not in r.stderr and "\r" not in r.stderr, r.stderr


def test_relative_paths_are_recorded_absolute(text, capsys, tmp_path, monkeypatch):
    from repr_jax.train import train_and_evaluate
    here = tmp_path / "here"
    here.mkdir()
    (here / "pairs.jsonl").write_text(text["pairs"].read_text())
    monkeypatch.chdir(here)
    cfg = C.override(text_config("pairs.jsonl"),
                     [f"eval.sets=('beir:{os.path.relpath(text['coll'])}',)"])
    train_and_evaluate(cfg, tmp_path / "run", progress=False, verbose=False)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["data"]["name"] == f"pairs:{here / 'pairs.jsonl'}"
    assert saved["eval"]["sets"] == [f"beir:{text['coll']}"]
    monkeypatch.chdir("/")
    capsys.readouterr()
    assert cli.main(["eval", "--workdir", str(tmp_path / "run"), "--no-progress"]) == 0
    assert "beir_coll/ndcg@10" in capsys.readouterr().out


def test_dry_run_sizes_a_collection_by_its_corpus(text, capsys):
    assert cli.main(["eval", "--workdir", str(text["run"]), "--dry-run", "--set",
                     f"eval.sets=('beir:{text['coll']}',)"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "retrieval (beir_coll)" in line)
    assert row.split()[-6:-4] == ["600", "40"]  # N: the corpus; the queries: its test queries


def test_a_text_runs_table_says_what_its_rows_measure(text, capsys):
    from repr_jax.train.evaluation import table_notes
    from repr_jax.train.log import format_table
    from repr_jax.train.run import load_dataset
    cfg = C.load_json(text["run"] / "config.json")
    rows = json.loads((text["run"] / "eval" / "step_2.json").read_text())
    rows = rows + [dict(r, representation="raw inputs (bag of words)") for r in rows]
    table = format_table(rows, table_notes(cfg, load_dataset(cfg), rows))
    assert "note: retrieval rows without a set name search the test split's first" in table
    assert "note: raw inputs (bag of words): token counts of each text, no model" in table


# --------------------------------------------------------------------------------------------------
# Modes: what a run, an eval, a sweep, a fit and mine write is readable as a plain open makes it
# --------------------------------------------------------------------------------------------------

def modes_of(folder):
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode)
            for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_atomic_writes_take_the_umask_mode(tmp_path, mask):
    from repr_jax import files
    old = os.umask(mask)
    try:
        files.write_json(tmp_path / "a.json", {"a": 1})
        files.write_verified(tmp_path / "b.bin", b"x")
        with files.exclusive(tmp_path / ".lock"):
            pass
    finally:
        os.umask(old)
    assert set(modes_of(tmp_path).values()) == {0o666 & ~mask}


@pytest.mark.slow
def test_every_file_a_run_eval_sweep_fit_and_mine_write_is_0644_under_umask_022(text, tmp_path):
    import subprocess
    import sys
    old = os.umask(0o022)
    try:
        # The compile cache as the CLI keeps it (its entries are files a run writes, checked too)
        env = {**os.environ, "TQDM_DISABLE": "1", "REPR_JAX_COMPILE_CACHE": str(tmp_path / "xla")}

        def run(*argv):
            r = subprocess.run([sys.executable, "-m", "repr_jax.cli", *argv], env=env,
                               capture_output=True, text=True, timeout=900)
            assert r.returncode == 0, r.stderr[-3000:]
        quick = ["--config", "simclr_mnist1d:quick", "--set", "train.steps=4", "--set",
                 "train.ckpt_every=2", "--set", "eval.evaluators=('knn','geometry')",
                 "--set", "log.tensorboard=True"]
        run("train", *quick, "--workdir", str(tmp_path / "run"), "--no-progress")
        run("eval", "--workdir", str(tmp_path / "run"), "--no-progress")
        run("sweep", *quick, "--grid", "seed=[0,1]", "--workdir", str(tmp_path / "sweep"),
            "--no-progress", "--jobs", "1")
        table = tmp_path / "fit" / "t.csv"
        table.parent.mkdir()
        table.write_text("N,loss\n" + "".join(f"{n},{3 * n ** -0.3:.6f}\n"
                                              for n in (10, 30, 100, 300, 1000, 3000)))
        run("fit", "--table", str(table), "--law", "power", "--x", "N", "--y", "loss",
            "--bootstrap", "20")
        run("mine", "--workdir", str(text["run"]), "--data", f"pairs:{text['pairs']}", "--out",
            str(tmp_path / "mined" / "out.jsonl"), "--no-progress", "--range-max", "20")
    finally:
        os.umask(old)
    modes = modes_of(tmp_path)
    assert any(k.startswith("run/checkpoints/") for k in modes)
    assert any("events.out.tfevents" in k for k in modes)
    assert any(k.startswith("mined/out.jsonl.cache/") for k in modes)
    assert any(k.startswith("xla/") for k in modes)
    wrong = {k: oct(v) for k, v in modes.items() if v != 0o644 and k != "fit/t.csv"}
    assert not wrong, wrong
