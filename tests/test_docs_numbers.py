"""bench/docs_numbers.py: the header and README tables it reads, and what --write rewrites (the
runs themselves are the CLI's, tested elsewhere; here a finished run's numbers are given)."""

import re
import shutil
from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def docs(tmp_path, monkeypatch):
    module = load_script(ROOT / "bench" / "docs_numbers.py")
    (tmp_path / "experiments").mkdir()
    shutil.copy(ROOT / "experiments" / "byol_mnist1d.py", tmp_path / "experiments")
    shutil.copy(ROOT / "README.md", tmp_path)
    monkeypatch.setattr(module, "EXPERIMENTS", tmp_path / "experiments")
    monkeypatch.setattr(module, "README", tmp_path / "README.md")
    return module


def finished_run(values, stdout=""):
    return lambda args, workdir: dict(seconds=61.4, load=0.2, stdout=stdout, step=2000,
                                      peak_gb=1.0, values=values)


def test_a_header_that_matches_has_no_differences_and_a_changed_one_is_rewritten(docs,
                                                                                  monkeypatch):
    path = docs.EXPERIMENTS / "byol_mnist1d.py"
    before = path.read_text()
    assert "byol_mnist1d" in docs.headers_with_tables()
    same = {}
    for rep in ("raw inputs", "random-init encoder", "byol encoder"):
        probe, knn = map(float, re.search(rf"^ +{rep} +(\S+) +(\S+)$", before, re.M).groups())
        same[(rep, "linear_probe/accuracy")], same[(rep, "knn/accuracy")] = probe, knn
    monkeypatch.setattr(docs, "run", finished_run(same))
    assert docs.check_header("byol_mnist1d", write=False) == []
    nudged = same | {("byol encoder", "knn/accuracy"): knn + 1e-5}
    monkeypatch.setattr(docs, "run", finished_run(nudged))
    assert docs.check_header("byol_mnist1d", write=False) == []  # equal to the 4 digits printed
    assert path.read_text() == before
    changed = same | {("byol encoder", "knn/accuracy"): 0.1234}
    monkeypatch.setattr(docs, "run", finished_run(changed))
    assert docs.check_header("byol_mnist1d", write=True) == [
        f"byol_mnist1d: byol encoder: header {probe:.4f} {knn:.4f}, fresh run {probe:.4f} 0.1234"]
    after = path.read_text()
    assert f"    byol encoder                        {probe:.4f}        0.1234\n" in after
    assert "Runtime:   61 s for the whole command (training and evaluation), measured" in after
    assert "with 0.2 cores busy with other work at the start.\n" in after
    assert after.split('"""', 2)[2] == before.split('"""', 2)[2]  # the code is untouched


def test_the_readme_block_takes_the_fresh_runs_lines(docs, monkeypatch):
    text = docs.README.read_text()
    block = text[text.index("mnist1d: evaluation at step"):]
    block = block[:block.index("```")]
    printed = block.replace("0.9180 ±0.0115", "0.9190 ±0.0115")
    assert printed != block
    monkeypatch.setattr(docs, "run", finished_run({}, stdout="workdir: x\n\n" + block))
    assert docs.check_readme(write=False) == []
    monkeypatch.setattr(docs, "run", finished_run({}, stdout="workdir: x\n\n" + printed))
    diffs = docs.check_readme(write=True)
    assert len(diffs) == 1 and diffs[0].startswith("README: linear_probe/accuracy:")
    after = docs.README.read_text()
    took = re.search(r"^`repr-jax train` took .*$", text, re.M)[0]
    line = re.search(r"^`repr-jax train` took .*$", after, re.M)[0]
    assert after == text.replace(block, printed).replace(took, line)
    assert line.startswith("`repr-jax train` took 61 s for the whole command (training, the full "
                           "evaluation battery, plots; peak memory 1.0 GB), measured ")
    assert line.endswith(" with 0.2 cores busy with other work at the start.")

