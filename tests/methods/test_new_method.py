"""Adding a method is one file and one registry line: it trains from the CLI with its own section."""

import json

import pytest
import toy_method

from repr_jax import cli
from repr_jax import config as C
from repr_jax.methods import METHODS

QUICK = ["--config", "simclr_mnist1d:quick", "--set", "data.num_examples=1000",
         "--set", "encoder.widths=(8,)", "--set", "train.batch_size=32", "--set", "train.steps=4",
         "--set", "train.ckpt_every=0", "--set", "train.log_every=2",
         "--set", "eval.evaluators=('knn',)", "--set", "eval.reference_rows=False",
         "--set", "eval.bootstrap=0", "--no-progress"]


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(METHODS, "toy", toy_method.TOY)


def test_a_new_methods_section_is_its_own(toy):
    cfg = C.override(C.load("simclr_mnist1d"), ["method.name=toy", "method.spread=0.25"])
    assert isinstance(cfg.method, toy_method.ToyConfig)
    assert C.flatten(cfg.method) == {"name": "toy", "loss_weight": 1.0, "spread": 0.25}
    with pytest.raises(C.ConfigError, match=r"unknown config key 'method.sprad'; did you mean "
                                            r"'method.spread'\? valid keys in method: name, "
                                            r"loss_weight, spread"):
        C.override(cfg, ["method.sprad=1"])


@pytest.mark.slow
def test_a_new_method_trains_from_the_cli(toy, tmp_path, capsys):
    workdir = tmp_path / "toy"
    code = cli.main(["train", *QUICK, "--set", "method.name=toy", "--set", "method.spread=0.25",
                     "--workdir", str(workdir)])
    assert code == 0
    saved = json.loads((workdir / "config.json").read_text())
    assert saved["method"] == {"name": "toy", "loss_weight": 1.0, "spread": 0.25}
    losses = [json.loads(line)["loss"] for line in (workdir / "metrics.jsonl").open()]
    assert len(losses) == 2
    rows = json.loads((workdir / "eval" / "step_4.json").read_text())
    assert {r["representation"] for r in rows} == {"toy encoder"}

    code = cli.main(["train", *QUICK, "--set", "method.name=toy", "--set", "method.sprad=1",
                     "--workdir", str(tmp_path / "bad")])
    err = capsys.readouterr().err
    assert code == 2 and "valid keys in method: name, loss_weight, spread" in err
    assert not (tmp_path / "bad").exists()
