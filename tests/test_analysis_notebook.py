"""The heatmap explorer notebook: saved clean, and it runs top to bottom against a small run."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from analysis import analyze_run
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "heatmap_explorer.ipynb"


def test_saved_notebook_has_no_outputs_or_execution_counts() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the explorer has code cells"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    assert any("parameters" in c.metadata.get("tags", []) for c in code)
    assert "PROBE_RUN_DIR" in code[0].source


@pytest.mark.slow
def test_notebook_executes_top_to_bottom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient

    run_dir = tmp_path / "run"
    planted = write_synthetic_run(
        run_dir, SyntheticSpec(n_samples=24, n_layers=16, width=16, capabilities=("multi_turn", "priority"))
    )
    analyze_run(run_dir, plots=False)  # the summary.json whose window and stability the notebook shows
    monkeypatch.setenv("PROBE_RUN_DIR", str(run_dir))
    monkeypatch.setenv("PROBE_CAPABILITY", "priority")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=180, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "showing priority / mlp_out / topk_count over layers 6-15" in text
    default = (
        "window: layers 6-15 — default window: the last 20/32 of depth, "
        "layers 6-15 of a 16-layer model (the paper's 12-31 scaled by depth)"
    )
    assert text.count(default) == 2  # the notebook's own window and the saved analysis' (summary.json)
    assert "— stable in " in text and "resamples (≥4 of 5 kept)" in text
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 3  # maps, profile, faceted
    drill = next(o for c in nb.cells if "Drill down" in c.source for o in c.outputs if o.output_type == "stream")
    assert any(f"layer {lay}, unit {u}," in drill.text for lay, u in planted["priority"]), drill.text
