"""Every notebook in notebooks/ runs top to bottom in a fresh Jupyter kernel without an error.

Skipped when nbclient, nbformat or ipykernel is not importable.  The notebooks run
with the repository root as their working directory (they import `benchmarks`).
"""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = {"quickstart", "eam", "cut_uncut", "constants_and_slices", "peers", "lotka_volterra"}


def test_every_notebook_is_there_and_committed_without_outputs():
    assert {p.stem for p in NOTEBOOKS} >= EXPECTED
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    errors = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
              if out.get("output_type") == "error"]
    assert not errors
