"""Every notebook in colab/ runs top to bottom in its quick setting (nbclient, a real kernel):
a cell that raises fails the test. The kernel sees one CPU device (no fake devices), as a Colab
CPU runtime would."""

import os
from pathlib import Path

import pytest

from conftest import needs_loopback

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "colab").glob("*.ipynb"))


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
