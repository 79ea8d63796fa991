"""The command line: help, one-line errors (no tracebacks), train and eval end to end."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from repr_jax import cli


def run_cli(*args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "repr_jax.cli", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--config", "--set", "--workdir", "--print-config"):
        assert flag in out


def test_list_names_every_experiment_sweep_and_study_with_its_claim(capsys):
    from repr_jax.config import list_experiments, load_from
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    sections = {}
    for line in out.splitlines():
        if not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line.split()[0], {})
        elif line.startswith("  "):
            name, _, claim = line.strip().partition(" ")
            current[name] = claim.strip()
    assert set(sections) == {"experiments", "sweeps", "studies"}
    assert set().union(*map(set, sections.values())) == set(list_experiments())
    assert sections["experiments"]["simclr_mnist1d"].startswith("SimCLR")
    assert "scaling_simclr_mnist1d" in sections["sweeps"]
    assert "simclr_mnist1d" not in sections["sweeps"]
    assert "finetune_minilm_wordnet" in sections["studies"]
    load_from("finetune_minilm_wordnet", "get_study", object)  # listed studies load as studies


@pytest.mark.parametrize("args, message", [
    (["train", "--set", "optim.lrr=1"], "unknown config key 'optim.lrr'; did you mean 'optim.lr'"),
    (["train", "--set", "optim.lr=-1"], "optim.lr must be > 0"),
    (["train", "--config", "simclr_mnist2d"], "did you mean 'simclr_mnist1d'"),
    (["eval", "--workdir", "/nonexistent/run"], "has no config.json"),
    (["train", "--set", "encoder.kernel_size=1000"],
     "encoder.kernel_size=1000 is larger than the inputs of 'mnist1d' (40); use at most 40"),
    (["train", "--set", "encoder.widths=(1000000000,)"],
     "parameters: its state and gradients need about"),
    (["train", "--set", "data.name=digits", "--set", "encoder.name=vit", "--set",
      "encoder.patch_size=3"],
     "encoder.patch_size=3 does not divide the 8x8 images of 'digits'; choose one of [1, 2, 4, 8]"),
    (["train", "--set", "optim.warmup_steps=1e999"], "optim.warmup_steps"),
    (["train", "--set", "data.num_examples=5"], "data.num_examples=5 is too few to split"),
    (["train", "--set", "data.tokenizer=minilm"],
     "unknown config key 'data.tokenizer'; valid keys in data: name, data_dir, train_examples, "
     "in_memory_mb, workers, prefetch, views, num_examples (data.tokenizer belongs to wordnet, "
     "pairs:FILE.jsonl, beir:DIR, a TFDS dataset: set data.name first)"),
    (["train", "--set", "eval.knn.k=100000"], "eval.knn.k=100000 exceeds the 7200 training"),
    (["train", "--set", "encoder.name=vit"],  # a check after the config's: no config.json yet
     "encoder 'vit' reads images [H, W, C], but 'mnist1d' has inputs of shape (40,)"),
])
def test_errors_are_one_line(capsys, tmp_path, args, message):
    if args[0] == "train":
        args = [*args, "--workdir", str(tmp_path / "run"), "--no-progress"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    # A worker's first use of a built-in dataset says it prepares it (once per data dir) first.
    err = "\n".join(line for line in err.splitlines() if not line.startswith("preparing "))
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_bad_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--sett", "x=1"])
    assert e.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-5"])
def test_fit_needs_at_least_one_bootstrap_resample(capsys, value):
    with pytest.raises(SystemExit) as e:
        cli.main(["fit", "--table", "t.csv", "--law", "power", "--x", "n", "--y", "loss",
                  "--bootstrap", value])
    assert e.value.code == 2
    assert f"--bootstrap: must be at least 1, got {value}" in capsys.readouterr().err


def test_print_config_applies_overrides(capsys):
    assert cli.main(["train", "--set", "optim.lr=0.5", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["optim"]["lr"] == 0.5


@pytest.mark.slow
def test_train_then_eval_in_a_subprocess(tmp_path):
    """The real console entry point, in a fresh process, on a tiny config."""
    workdir = tmp_path / "run"
    sets = ["data.num_examples=600", "encoder.widths=(8,)", "method.proj_hidden=8",
            "method.proj_dim=4", "train.batch_size=32", "train.steps=3", "train.log_every=1",
            "train.num_devices=1"]
    args = ["train", "--workdir", str(workdir)] + [a for s in sets for a in ("--set", s)]
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "linear_probe/accuracy" in r.stdout and "random-init encoder" in r.stdout
    assert json.loads((workdir / "config.json").read_text())["train"]["steps"] == 3
    r = run_cli("eval", "--workdir", str(workdir), "--set", "eval.evaluators=('knn',)")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "simclr encoder" in r.stdout and "knn/accuracy" in r.stdout
    assert f"evaluation of {workdir} at step 3" in r.stdout.splitlines()
    assert (workdir / "eval" / "step_3.json").exists()
    r = run_cli(*args)  # the same command again resumes from the last checkpoint
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"resuming from step 3 ({workdir / 'checkpoints'}" in r.stdout


def _table(path, text, binary=False):
    if binary:
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


@pytest.mark.parametrize("content, message", [
    ("n,loss\n1,2\n2,1,7\n", "line 3 has 3 cells, the header has 2: a ragged or damaged table"),
    ("n,loss\n1\n", "line 2 has 1 cells"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "is not a text CSV (byte"),
    ("", "is empty: no header row"),
    ("directory", "is a directory, not a results table"),
    ("n,loss\n1,0.5\n2,0\n3,-1\n4,0.1\n", "2 rows have loss <= 0 (e.g. 0.0), which a fit in log "
                                         "space cannot take; drop them with --where, or fit "
                                         "absolute errors with --linear-y"),
])
def test_fit_names_a_bad_table_in_one_line(tmp_path, capsys, content, message):
    if content == "directory":
        table = str(tmp_path)
    else:
        table = _table(tmp_path / "t.csv", content, binary=isinstance(content, bytes))
    assert cli.main(["fit", "--table", table, "--law", "power", "--x", "n", "--y", "loss",
                     "--bootstrap", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_fit_in_linear_space_takes_non_positive_y(tmp_path, capsys):
    n = np.array([1e3, 3e3, 1e4, 3e4, 1e5, 3e5])
    rows = "\n".join(f"{a},{0.8 - 0.1 * np.log(a)}" for a in n)  # crosses zero
    table = _table(tmp_path / "t.csv", "n,loss\n" + rows + "\n")
    assert cli.main(["fit", "--table", table, "--law", "log_linear", "--x", "n", "--y", "loss",
                     "--bootstrap", "20", "--linear-y"]) == 0
    result = json.loads((tmp_path / "fit_log_linear.json").read_text())
    assert result["log_space"] is False and result["points"] == 6
    assert result["params"]["b"]["value"] == pytest.approx(-0.1, rel=1e-3)


@pytest.mark.parametrize("option, value, message", [
    ("--jobs", "0", "argument --jobs: must be at least 1, got 0"),
    ("--jobs", "-1", "argument --jobs: must be at least 1, got -1"),
    ("--slurm-time", "-5", "argument --slurm-time: must be at least 1, got -5"),
])
def test_sweep_counts_must_be_positive(capsys, tmp_path, option, value, message):
    """`sweep --jobs 0` ran nothing and `--slurm-time -5` failed each point with nothing on
    stderr: both are refused while parsing, naming the option."""
    from repr_jax.cli import main
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--config", "simclr_mnist1d:quick", "--grid", "seed=[0,1]",
              "--workdir", str(tmp_path / "sw"), option, value, "--dry-run"])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "sw").exists()


def test_a_workdir_that_is_a_file_or_a_dangling_link_is_one_line(capsys, tmp_path):
    from repr_jax.cli import main
    (tmp_path / "afile").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name, message in (("afile", "is a file, not a folder"),
                          ("dangling", "is a symbolic link to a missing")):
        assert main(["train", "--config", "simclr_mnist1d:quick", "--workdir",
                     str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert (tmp_path / "afile").read_text() == "x" and not (tmp_path / "nowhere").exists()


@pytest.mark.slow
def test_output_cut_short_by_its_reader_is_no_traceback():
    """`repr-jax train --print-config | head -1`: the reader closes the pipe early."""
    proc = subprocess.Popen([sys.executable, "-m", "repr_jax.cli", "train", "--print-config"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    proc.stdout.close()  # before the child prints (it imports JAX first): its write breaks
    err = proc.stderr.read().decode()
    assert proc.wait() in (0, 1) and "Traceback" not in err, err


def test_a_config_file_from_elsewhere_says_what_it_reaches(tmp_path):
    """A config file given by path prints, one line each, the settings that read outside the run
    folder or send data off the machine; a shipped experiment prints none."""
    from repr_jax import config as C
    from repr_jax.cli import _reach_of
    cfg = C.override(C.load("simclr_mnist1d"), [
        "data.data_dir=/srv/tfds", "log.wandb=proj", "log.wandb_mode=online"])
    path = tmp_path / "other.json"
    C.save_json(cfg, path)
    lines = _reach_of(str(path), cfg)
    assert lines == [f"repr-jax: note: {path} sets data.data_dir='/srv/tfds' (TFDS data is read "
                     f"from there)",
                     f"repr-jax: note: {path} sets log.wandb='proj' with log.wandb_mode='online' "
                     f"(metrics and evaluation rows are sent to Weights & Biases)"]
    assert _reach_of("simclr_mnist1d", cfg) == []
    assert _reach_of(str(path), C.load("simclr_mnist1d")) == []


def test_sweep_dry_run_without_timing_lists_points_at_once(capsys, tmp_path):
    from repr_jax.cli import main
    assert main(["sweep", "--config", "simclr_mnist1d:quick", "--grid", "seed=[0,1]",
                 "--workdir", str(tmp_path / "sw"), "--dry-run", "--no-timing"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["seed=0  (200 steps)", "seed=1  (200 steps)",
                                         "2 points, 400 train steps in all"]
    assert "timing" not in captured.err and not (tmp_path / "sw").exists()
