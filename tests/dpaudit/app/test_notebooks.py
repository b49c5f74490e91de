"""The notebooks run top to bottom (nbclient, the venv's ``python3`` kernel) on small settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is a dev extra")
nbclient = pytest.importorskip("nbclient", reason="nbclient is a dev extra")

NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"


@pytest.mark.parametrize("name", ["01-audit-a-model.ipynb", "02-compare-defenses.ipynb"])
def test_notebook_runs(name, tmp_path, monkeypatch):
    monkeypatch.setenv("DPAUDIT_NB_OUT", str(tmp_path))
    monkeypatch.setenv("DPAUDIT_NB_NODES", "150")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors
    assert list(tmp_path.rglob("*.html")), "the notebook writes its report"
    assert os.environ["DPAUDIT_NB_OUT"] == str(tmp_path)
