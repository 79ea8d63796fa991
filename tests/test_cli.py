"""The command line: help, one-line errors (no tracebacks), train and eval end to end."""

import json
import os
import subprocess
import sys

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


@pytest.mark.parametrize("args, message", [
    (["train", "--set", "optim.lrr=1"], "unknown config key 'optim.lrr'; did you mean 'optim.lr'"),
    (["train", "--set", "optim.lr=-1"], "optim.lr must be > 0"),
    (["train", "--config", "simclr_mnist2d"], "did you mean 'simclr_mnist1d'"),
    (["eval", "--workdir", "/nonexistent/run"], "has no config.json"),
])
def test_errors_are_one_line(capsys, args, message):
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


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
    assert (workdir / "eval" / "step_3.json").exists()
