"""Every notebook in colab/ runs top to bottom in its quick setting (nbclient, a real kernel):
a cell that raises fails the test. The kernel sees one CPU device (no fake devices), as a Colab
CPU runtime would. The install cell (skipped there: repr_jax is importable) runs on its own in a
fresh virtual environment against a file:// clone of this checkout."""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script, needs_loopback

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "colab").glob("*.ipynb"))


def _set_repo():
    return load_script(ROOT / "colab" / "set_repo.py")


def _install_cell(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return next("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_the_four_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= {"quickstart", "scaling_laws", "matryoshka",
                                          "objectives_tour"}


@pytest.mark.slow
@needs_loopback
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_its_quick_setting(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    assert any("QUICK = True" in c.source for c in nb.cells if c.cell_type == "code")
    for cell in nb.cells:  # no core logic in notebooks: no functions or classes defined there
        if cell.cell_type == "code":
            assert not any(line.lstrip().startswith(("def ", "class "))
                           for line in cell.source.splitlines()), cell.source
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "").replace(
        "--xla_force_host_platform_device_count=8", "").strip())  # " " would name a flags file
    monkeypatch.setenv("MPLBACKEND", "Agg")
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


def test_each_notebook_opens_with_the_same_install_cell_and_a_colab_badge():
    cells = {p.stem: _install_cell(p) for p in NOTEBOOKS}
    assert len(set(cells.values())) == 1, "the install cells differ: keep them one text"
    cell = next(iter(cells.values()))
    assert cell.startswith('REPO = ""  # SET THIS')  # unset in the repository: no guessed URL
    for p in NOTEBOOKS:
        first = "".join(json.loads(p.read_text())["cells"][0]["source"])
        assert f"/blob/main/colab/{p.name})" in first and "colab-badge.svg" in first


def test_set_repo_points_install_cells_and_badges_at_one_url(tmp_path, capsys):
    set_repo = _set_repo()
    for p in NOTEBOOKS:
        shutil.copy(p, tmp_path)
    assert set_repo.main(["git@github.com:alice/my-repr.git", "--dir", str(tmp_path),
                          "--branch", "dev"]) == 0
    for p in sorted(tmp_path.glob("*.ipynb")):
        nb = json.loads(p.read_text())
        assert _install_cell(p).startswith('REPO = "git@github.com:alice/my-repr.git"  # SET THIS')
        assert (f"(https://colab.research.google.com/github/alice/my-repr/blob/dev/colab/{p.name})"
                in "".join(nb["cells"][0]["source"]))
        assert len(nb["cells"]) == len(json.loads((ROOT / "colab" / p.name).read_text())["cells"])
    set_repo.main(["https://gitlab.com/bob/repr_jax", "--dir", str(tmp_path)])
    assert "badges are left as they were" in capsys.readouterr().out
    p = tmp_path / "quickstart.ipynb"
    assert _install_cell(p).startswith('REPO = "https://gitlab.com/bob/repr_jax"')
    assert "github/alice/my-repr/blob/dev/" in p.read_text()  # the GitHub badge is kept
    with pytest.raises(ValueError, match="not a git URL"):
        set_repo.set_repo(p, 'x"; import os')


def _fresh_venv(path: Path) -> Path:
    """A new virtual environment that sees this interpreter's installed packages (added to its
    sys.path by a .pth file, so their own .pth files, repr_jax's editable finder among them, are
    not run) but not repr_jax: what a Colab runtime has before the install cell."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    host = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    Path(site, "_host_packages.pth").write_text("\n".join(host) + "\n")
    return python


def _offline_pip_env(tmp_path: Path) -> dict[str, str]:
    """pip settings that install the clone with no package index: the build backend is this
    interpreter's setuptools when it builds wheels by itself (>= 70.1), else a setuptools wheel
    fetched here first (skip when no index is reachable)."""
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    installed = importlib.metadata.version("setuptools")
    version = tuple(int(x) for x in re.findall(r"\d+", installed)[:2])
    if version >= (70, 1):
        return env | {"PIP_NO_BUILD_ISOLATION": "0"}  # pip reads "0" as: no isolation
    wheels = tmp_path / "wheels"
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d",
                          str(wheels), "setuptools>=70.1"], capture_output=True, text=True,
                         timeout=300)
    if got.returncode:
        pytest.skip(f"setuptools {'.'.join(map(str, version))} here cannot build the clone and no "
                    f"package index answered for a newer one")
    return env | {"PIP_FIND_LINKS": str(wheels)}


@pytest.mark.slow
def test_install_cell_installs_repr_jax_from_a_file_url_clone_in_a_fresh_venv(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone from")
    python = _fresh_venv(tmp_path / "venv")
    work = tmp_path / "content"
    work.mkdir()
    probe = "import importlib.util; print(importlib.util.find_spec('repr_jax'))"
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=work).stdout.strip() == "None"
    cell = _install_cell(NOTEBOOKS[0])
    unset = subprocess.run([python, "-c", cell], capture_output=True, text=True, cwd=work)
    assert unset.returncode and "set REPO at the top of this cell" in unset.stderr
    nb = tmp_path / NOTEBOOKS[0].name
    shutil.copy(NOTEBOOKS[0], nb)
    _set_repo().set_repo(nb, ROOT.as_uri())  # file:///...: the checkout's committed HEAD
    check = "\nimport repr_jax, repr_jax.config\nprint('imported', repr_jax.__file__)"
    run = subprocess.run([python, "-c", _install_cell(nb) + check], capture_output=True,
                         text=True, cwd=work, env=_offline_pip_env(tmp_path), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"repr_jax installed from {ROOT.as_uri()}" in run.stdout
    assert f"imported {work / 'repr_jax-src' / 'repr_jax' / '__init__.py'}" in run.stdout
    listed = subprocess.run([tmp_path / "venv" / "bin" / "repr-jax", "list"], capture_output=True,
                            text=True, cwd=work, timeout=300)
    assert listed.returncode == 0 and "simclr_mnist1d" in listed.stdout, listed.stderr[-2000:]
