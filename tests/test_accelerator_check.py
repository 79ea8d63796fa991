"""bench/accelerator/check.sh --cpu-smoke: the prepared accelerator check runs every step at toy
sizes, so the script a lent GPU runs cannot rot between loans."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_accelerator_check_runs_every_step_at_toy_size(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    proc = subprocess.run(["bash", "bench/accelerator/check.sh", "--cpu-smoke"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["mode"] == "cpu-smoke"
    assert results["environment"]["platform"] == "cpu"
    steps = results["steps"]
    assert list(steps) == ["default", "mfu", "population", "eval", "pytest"]
    assert all(s["status"] == "ok" for s in steps.values()), steps
    assert "evaluation at step 20" in steps["default"]["table"]
    for model in steps["mfu"]["models"].values():
        assert model["step_ms"] > 0 and 0 < model["mfu_vs_measured_matmul"] < 10, model
    assert steps["population"]["speedup"] > 0
    assert {"ridge_probe", "logistic_probe", "knn", "retrieval_top10",
            "bootstrap_1000"} <= set(steps["eval"])
    assert steps["pytest"]["counts"].get("passed", 0) > 0 and not steps["pytest"]["failed"]
    table = subprocess.run([sys.executable, "bench/accelerator/check.py", "--table",
                            str(tmp_path / "results.json")], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout
    assert "| population of 8 tiny MLPs |" in table and "evaluation at step 20" in table


def test_check_refuses_an_unknown_argument():
    proc = subprocess.run(["bash", "bench/accelerator/check.sh", "--gpu"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown argument '--gpu'" in proc.stderr


def test_full_check_without_wheels_says_how_to_get_them(tmp_path):
    # A copy of the scripts in a tree that has no .accel/: one line, exit 2, nothing installed.
    (tmp_path / "bench" / "accelerator").mkdir(parents=True)
    for name in ("check.sh", "check.py"):
        src = REPO / "bench" / "accelerator" / name
        (tmp_path / "bench" / "accelerator" / name).write_text(src.read_text())
    proc = subprocess.run(["bash", "bench/accelerator/check.sh"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "run bench/accelerator/wheels.sh" in proc.stderr


def test_the_full_size_mfu_configs_build():
    """The device-size configs are only ever built on a lent GPU: a config that no longer
    validates (ResNet's variant given as a number once) would lose the whole MFU step there."""
    sys.path.insert(0, str(REPO / "bench" / "accelerator"))
    from check import mfu_configs
    configs = mfu_configs(False)
    assert len(configs) == 4 and any("SmolLM2" in name for name in configs)
    assert {c.encoder.name for c in configs.values()} == {"vit", "resnet", "text_transformer",
                                                          "decoder_lm"}
