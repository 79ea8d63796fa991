"""Sweeps: grid expansion and its errors, what a run costs, failure isolation, a sweep killed
midway that, rerun, finishes with the same table as an uninterrupted one, and the same sweep as a
population."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from repr_jax.config import ConfigError
from repr_jax.scaling import Sweep, load_sweep, run_sweep
from repr_jax.scaling.sweep import point_name
from repr_jax.train import costs

from conftest import assert_readable_ticks, tiny_config

# A sweep file: a tiny config, one point that diverges (lr 1e30 makes the loss NaN on step 1) and
# one that trains, checkpointing every 5 of its 30 steps and evaluating at 15 and 30.
SWEEP_FILE = textwrap.dedent("""
    from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                                 OptimConfig, TrainConfig)
    from repr_jax.scaling import Sweep

    def get_config(arg=None):
        return Config(
            data=DataConfig(name="mnist1d", num_examples=1000),
            encoder=EncoderConfig(name="cnn", widths=(8, 16), kernel_size=3),
            method=MethodConfig(name="simclr", proj_hidden=16, proj_dim=8),
            optim=OptimConfig(lr=1e-3, warmup_steps=2),
            train=TrainConfig(batch_size=32, steps=30, eval_every=15, ckpt_every=5, log_every=5,
                              num_devices=1),
            eval=EvalConfig(evaluators=("linear_probe", "knn"), bootstrap=50,
                            reference_rows=False))

    def get_sweep(arg=None):  # arg "population": both points as one vmapped population
        return Sweep(base=get_config(), grid={"optim.lr": [1e30, 1e-3],
                                              "data.train_examples": [300]},
                     population=("optim.lr",) if arg == "population" else ())
""")


def test_grid_points_names_and_errors():
    base = tiny_config()
    sweep = Sweep(base=base, grid={("encoder.widths", "method.proj_hidden"): [((4,), 8),
                                                                            ((8, 16), 32)],
                                   "data.train_examples": [100, 400, 800]},
                  overrides=["train.steps=7"])
    points = sweep.points(["seed=3"])
    assert len(points) == 6
    assert points[0].name == "widths=4,proj_hidden=8,train_examples=100"
    assert points[-1].name == "widths=8x16,proj_hidden=32,train_examples=800"
    last = points[-1].config
    assert (last.encoder.widths, last.method.proj_hidden, last.data.train_examples) == (
        (8, 16), 32, 800)
    assert last.train.steps == 7 and last.seed == 3 and last.optim.lr == base.optim.lr
    assert point_name({"encoder.widths": (4,), "optim.lr": 3e-4}) == "widths=4,lr=0.0003"
    assert point_name({"a.lr": 1, "b.lr": 2}) == "a.lr=1,b.lr=2"  # a shared leaf keeps its key

    with pytest.raises(ConfigError, match="did you mean 'optim.lr'.*valid keys in optim"):
        Sweep(base=base, grid={"optim.lrr": [1e-3]}).points()
    with pytest.raises(ConfigError, match="optim.lr must be > 0"):
        Sweep(base=base, grid={"optim.lr": [1e-3, -1.0]}).points()
    with pytest.raises(ConfigError, match="has no values"):
        Sweep(base=base, grid={"optim.lr": []}).points()
    with pytest.raises(ConfigError, match="tuple of 2 values"):
        Sweep(base=base, grid={("optim.lr", "seed"): [1e-3]}).points()
    with pytest.raises(ConfigError, match="both named"):
        Sweep(base=base, grid={"optim.lr": [1e-3, 0.001]}).points()


def test_sweep_files_load_and_the_flagship_study_expands():
    sweep = load_sweep("scaling_simclr_mnist1d")
    points = sweep.points()
    assert len(points) == 30 and len({p.name for p in points}) == 30
    assert {p.config.data.train_examples for p in points} == {500, 1000, 2000, 4000, 8000, 16000}
    with pytest.raises(ConfigError, match="defines no get_sweep"):
        load_sweep("simclr_mnist1d")


def test_quick_is_honoured_by_every_sweep_file_or_refused(tmp_path):
    """``NAME:quick`` gives fewer or shorter points for every sweep in experiments/; a sweep file
    whose get_sweep ignores its argument is refused in one line, not run at full length."""
    from repr_jax.config import describe_experiments
    for e in describe_experiments():
        if "sweep" in e["kinds"]:
            full, quick = (load_sweep(n).points() for n in (e["name"], e["name"] + ":quick"))
            cost = lambda ps: sum(p.config.train.steps for p in ps)  # noqa: E731
            assert cost(quick) < cost(full), e["name"]
    quick = load_sweep("scaling_simclr_mnist1d:quick").points()
    assert len(quick) == 4 and {p.config.train.steps for p in quick} == {100}
    deaf = tmp_path / "deaf.py"
    deaf.write_text("from simclr_mnist1d import get_config\nfrom repr_jax.scaling import Sweep\n"
                    "def get_sweep(arg=None):\n"
                    "    return Sweep(base=get_config(), grid={'optim.lr': [1e-3, 2e-3]})\n")
    import shutil

    from repr_jax.config import experiments_dir
    shutil.copy(experiments_dir() / "simclr_mnist1d.py", tmp_path)
    assert len(load_sweep(str(deaf)).points()) == 2
    with pytest.raises(ConfigError, match=r"ignores ':quick' \(its get_sweep returns the same"):
        load_sweep(f"{deaf}:quick")


def test_a_grid_from_the_command_line_equals_the_same_grid_in_a_file(tmp_path, capsys):
    from repr_jax.cli import main
    from repr_jax.scaling import Sweep
    from repr_jax.scaling.sweep import dry_run, grid_sweep
    cli = grid_sweep("simclr_mnist1d", ["optim.lr=[1e-3, 3e-3]",
                                        "encoder.widths=[(16, 32), (32, 64)]"])
    in_file = Sweep(base="simclr_mnist1d", grid={"optim.lr": [1e-3, 3e-3],
                                                 "encoder.widths": [(16, 32), (32, 64)]})
    assert [(p.name, p.config) for p in cli.points()] == [(p.name, p.config)
                                                          for p in in_file.points()]
    assert len(cli.points()) == 4
    for bad, message in (("optim.lr=1e-3", "expected KEY=\\[v1, v2, ...\\]"),
                         ("optim.lr=[1e-3,", "expected KEY"), ("=[1]", "expected KEY")):
        with pytest.raises(ConfigError, match=message):
            grid_sweep("simclr_mnist1d", [bad])
    with pytest.raises(ConfigError, match="unknown config key 'optim.lrr'"):
        grid_sweep("simclr_mnist1d", ["optim.lrr=[1, 2]"]).points()
    lines = dry_run(cli, ["train.steps=7"], time_step=False)
    assert lines[-1] == "4 points, 28 train steps in all" and lines[0].endswith("(7 steps)")
    assert main(["sweep", "--workdir", str(tmp_path), "--grid", "optim.lr=[1e-3]", "--config",
                 "simclr_mnist1d", "--dry-run", "--set", "train.steps=20", "--set",
                 "data.num_examples=600", "--set", "encoder.widths=(8,)"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(20 steps)") and len(out) == 2
    assert out[1].startswith("1 point, 20 train steps in all; ~") and "ms per step here" in out[1]
    assert main(["sweep", "--workdir", str(tmp_path)]) == 2  # neither a file nor --grid
    assert "give a sweep file" in capsys.readouterr().err


def test_param_counts_leave_out_embedding_tables():
    from repr_jax.encoders.text_transformer import TextTransformer
    model = TextTransformer(vocab_size=50, width=16, depth=1, num_heads=2, mlp_dim=32, max_len=12)
    params = model.init(jax.random.PRNGKey(0), np.ones((2, 12), np.int32))["params"]
    counts = costs.param_counts(params)
    tables = 50 * 16 + 12 * 16 + 2 * 16  # word, position and token-type embeddings
    assert counts["params"] == sum(x.size for x in jax.tree.leaves(params))
    assert counts["params"] - counts["non_embedding_params"] == tables


def test_step_flops_do_not_depend_on_the_device_count(mnist1d_small):
    """A scaling table's FLOPs are the whole step's (XLA's count before the program is split), the
    same on 1 and 8 devices; each of 8 devices executes a little more than an eighth of them (the
    optimizer update and the loss over the gathered batch are repeated on every device)."""
    from repr_jax.train import build_method, sharding
    from repr_jax.train.run import compile_step, init_state, sample_batch
    cfg = tiny_config()
    method = build_method(cfg, mnist1d_small)
    flops = {}
    for n in (1, 8):
        mesh = sharding.make_mesh(n)
        state = init_state(cfg, method, sample_batch(mnist1d_small), mesh)
        batch = sharding.global_batch(
            {k: v[:32] for k, v in mnist1d_small.splits["train"].items()}, mesh)
        _, flops[n] = compile_step(cfg, method, mesh, state, batch)
    assert flops[1]["flops_per_step"] > 0
    assert flops[8]["flops_per_step"] == flops[1]["flops_per_step"]
    assert (flops[1]["flops_per_step"] / 8 < flops[8]["device_flops_per_step"]
            < flops[1]["device_flops_per_step"] / 4)


def _table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_sweep_isolates_a_failure_and_a_killed_sweep_resumes_to_the_same_table(tmp_path, capsys,
                                                                             monkeypatch):
    from conftest import CLI_COMPILE_CACHE
    monkeypatch.setenv("REPR_JAX_COMPILE_CACHE", CLI_COMPILE_CACHE)  # the points' processes
    sweep_file = tmp_path / "tiny_sweep.py"
    sweep_file.write_text(SWEEP_FILE)
    sweep = load_sweep(str(sweep_file))

    # Uninterrupted, both points at once (each pinned to its own core).
    whole = tmp_path / "whole"
    rows = run_sweep(sweep, whole, jobs=2, progress=False)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("sweep: 2 points; 0 done or failed before, 2 to run")
    assert out[-1] == f"sweep: 1 of 2 points finished, 1 failed; table: {whole / 'results.csv'}"
    by_point = {}
    for r in rows:
        by_point.setdefault(r["point"], []).append(r)
    failed, good = by_point["lr=1e+30,train_examples=300"], by_point["lr=0.001,train_examples=300"]
    assert [r["status"] for r in failed] == ["failed"]
    assert "loss is nan" in failed[0]["error"].lower() and failed[0]["step"] is None
    assert [(r["status"], r["step"], r["final"]) for r in good] == [
        ("finished", 15, False), ("finished", 30, True)]
    last = good[-1]
    assert last["examples_seen"] == 30 * 32 and last["train_examples"] == 300
    assert last["epochs"] == pytest.approx(30 * 32 / 300)
    assert last["params"] == last["non_embedding_params"] > 0
    assert last["flops"] == pytest.approx(30 * last["flops_per_step"]) and last["flops"] > 0
    assert np.isfinite(last["upstream/loss"]) and np.isfinite(last["train/loss"])
    assert 0 < last["linear_probe/accuracy"] <= 1 and "knn/accuracy.ci_low" in last
    assert last["optim.lr"] == 1e-3 and last["encoder.widths"] == [8, 16]
    assert (whole / "plots" / "loss_vs_flops.png").stat().st_size > 0
    assert json.loads((whole / "results.json").read_text())[0]["point"] == rows[0]["point"]

    # The same sweep killed (SIGKILL, no cleanup) while the good point trains, then rerun.
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "repr_jax.cli", "sweep", str(sweep_file),
                             "--workdir", str(killed), "--jobs", "1", "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpts = killed / "runs" / "lr=0.001,train_examples=300" / "checkpoints"
    deadline = time.time() + 300
    while not (ckpts.is_dir() and any(p.name.isdigit() and int(p.name) >= 10
                                      for p in ckpts.iterdir())):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    status = json.loads((ckpts.parent / "status.json").read_text())
    assert status["status"] == "running"  # interrupted: nobody recorded an outcome
    for _ in range(200):  # the point's process dies with the sweep (PR_SET_PDEATHSIG)
        try:
            os.kill(status["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the point's process outlived the killed sweep")
    assert not (killed / "runs" / "lr=0.001,train_examples=300" / "eval" / "step_30.json").exists()
    failed_log = (killed / "runs" / "lr=1e+30,train_examples=300" / "log.txt").read_text()

    run_sweep(load_sweep(str(sweep_file)), killed, jobs=1, progress=False)
    assert _table(killed / "results.csv") == _table(whole / "results.csv")
    # The failed point was not retried; the resumed one continued from its checkpoint.
    assert (killed / "runs" / "lr=1e+30,train_examples=300" / "log.txt").read_text() == failed_log
    log = (ckpts.parent / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in log] == [5, 10, 15, 20, 25, 30]

    # The same two points as one population (members one after another: the CNN on CPU): the
    # diverged member fails alone, and the other's row equals its separate run's.
    pop = tmp_path / "population"
    prow = {r["point"]: r for r in run_sweep(load_sweep(f"{sweep_file}:population"), pop,
                                              progress=False)
            if r["final"] or r["status"] != "finished"}
    assert prow["lr=1e+30,train_examples=300"]["status"] == "failed"
    assert "diverged" in prow["lr=1e+30,train_examples=300"]["error"].lower()
    member = prow["lr=0.001,train_examples=300"]
    assert (pop / "runs" / "train_examples=300" / "members" / "lr=0.001" / "eval").is_dir()
    assert (member["params"], member["examples_seen"]) == (last["params"], last["examples_seen"])
    # A member's FLOPs are its separate run's.
    assert member["flops_per_step"] == last["flops_per_step"]
    for key in ("upstream/loss", "train/loss", "linear_probe/accuracy", "knn/accuracy"):
        assert member[key] == pytest.approx(last[key], rel=1e-3, abs=1e-3), key


def test_loss_vs_flops_colours_sizes_and_shapes_the_other_grid_key():
    from repr_jax.scaling.plots import loss_vs_flops_figure
    rows, grid = [], {}
    for widths, params in (((8, 16), 3100), ((16, 32), 11800), ((32, 64), 45000)):
        for n in (2000, 8000, 32000):
            name = f"encoder.widths={widths},data.train_examples={n}"
            grid[name] = {"encoder.widths": list(widths), "data.train_examples": n}
            rows += [{"point": name, "params": params, "flops": 6 * params * 256 * step * 40,
                      "upstream/loss": 4.6 + params ** -0.2 + n ** -0.3 + step ** -0.5}
                     for step in (500, 1000, 2000, 4000)]
    rows.append({"point": "failed", "params": None, "flops": None, "upstream/loss": None})
    fig = loss_vs_flops_figure(rows, grid)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 9
    by_size = {}
    for line, name in zip(lines, grid):
        by_size.setdefault(name.split(",")[0], set()).add(line.get_marker())
        n = grid[name]["data.train_examples"]
        assert line.get_marker() == "os^"[[2000, 8000, 32000].index(n)]
    assert all(len(m) == 3 for m in by_size.values()) and len({l.get_color() for l in lines}) == 3
    legends = [a for a in ax.get_children() if type(a).__name__ == "Legend"]
    assert {lg.get_title().get_text() for lg in legends} == {"parameters", "data.train_examples"}
    assert [t.get_text() for t in legends[0].get_texts()] in (["3.1k", "11.8k", "45k"],
                                                            ["2000", "8000", "32000"])
    assert_readable_ticks(fig, ax.xaxis)
    assert_readable_ticks(fig, ax.yaxis)
    assert loss_vs_flops_figure(rows[-1:], grid) is None
