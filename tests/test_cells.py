"""One paired-delta row (:mod:`interventions.cells`): every table renders its Δ, CI, p and placebo cells through it.

The same :class:`~interventions.stats.PairedDelta` with the same placebo ranking gives the same cells in the A/B
markdown, the ``--select`` comparison, the lm-eval markdown, the study's HTML and the terminal tables; the
placebo percentile has one surface form; and no other product module formats a percentile ordinal, a placebo
percentile or a signed point difference itself (nor do the examples).
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from rich.console import Console
from rich.table import Table

from interventions.cells import (
    CI,
    DELTA,
    PLACEBO,
    N,
    P,
    Placement,
    Row,
    Strong,
    evaluation_columns,
    evaluation_row,
    extra,
    fmt_placement,
    html_table,
    markdown,
    terminal,
)
from interventions.report import ARM_TERMINAL_COLUMNS, arm_rows, arm_table
from interventions.results import ArmResult, CapabilityResult, NoOpGuard, NoPlacebo, PlaceboRank
from interventions.select_compare import arm_verdict
from interventions.stats import PairedDelta
from lmeval.compare import MetricRow, Paired
from lmeval.report import columns as lmeval_columns
from lmeval.report import table_row as lmeval_row
from study import claims
from tests.test_import_graph import ORDER
from training.eval_rows import EvalRow

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = tuple(room for room in ORDER if room != "probe_cli")
EFFECT = (200, 0.6, 0.75, 0.15, 0.08, 0.22, 0.0004, 3, 33)
RANK = PlaceboRank(72.5, 1 / 3, [0.01 * k for k in range(20)])
CELLS = ["+15.0", "[+8.0, +22.0]", "4.0e-04", "72nd (p = 0.333, 20 sets)"]  # Δ, CI, p, placebo


def _arm() -> ArmResult:
    result = CapabilityResult("multi_turn", True, 210, 10, PairedDelta(*EFFECT), 40, 0.3, 0.31, 9.0, 9.5, RANK)
    guard = NoOpGuard(0.0, "float32", 1.0, 900, 900, 210, 40)
    return ArmResult(
        0.0, "main", [result], guard, 2.0, 300, name="scale 0.0", label="scale 0.0", model="dpo", placebo=NoPlacebo()
    )


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _in_order(cells: list[str], wanted: list[str] = CELLS) -> bool:
    """``wanted`` appear among ``cells`` in this order, next to each other."""
    return any(cells[k : k + len(wanted)] == wanted for k in range(len(cells)))


def _printed(table: Table) -> str:
    out = Console(file=io.StringIO(), width=400, record=True)
    out.print(table)
    return out.export_text()


def test_the_placebo_percentile_has_one_surface_form() -> None:
    assert fmt_placement(Placement.of(RANK)) == CELLS[3]
    assert fmt_placement(None) == "—" and fmt_placement(Placement(math.nan, math.nan, 5)) == "n/a"


def test_the_ab_markdown_and_the_terminal_table_share_the_cells() -> None:
    lines = arm_table(_arm())
    assert lines[0].startswith(
        "| capability | n | before | after | Δ (pts) | 95% CI | McNemar p | placebo percentile |"
    )
    row = _cells(lines[2])
    assert row[:4] == ["**multi_turn**", "200", "60.0%", "75.0%"] and _in_order(row)
    printed = _printed(terminal(ARM_TERMINAL_COLUMNS, arm_rows(_arm()), "arm"))
    line = next(text for text in printed.splitlines() if "multi_turn *" in text)
    assert _in_order([c.strip() for c in re.split(r"\s{2,}|│", line) if c.strip()])


def test_the_lmeval_markdown_shares_the_cells_and_keeps_its_own_units() -> None:
    binary = MetricRow("probe_mc", "acc", "none", True, Paired(*EFFECT, binary=True), 30, placebo=RANK)
    other = MetricRow("probe_ppl", "ppl", "none", False, Paired(12, 10.5, 11.25, 0.75, 0.5, 1.0, math.nan), 12)
    lines = markdown(lmeval_columns(True), [lmeval_row(binary), lmeval_row(other)])
    assert lines[0] == (
        "| task | metric | filter | n | before | after | Δ | 95% CI | McNemar p | changed | placebo percentile |"
    )
    first, second = _cells(lines[2]), _cells(lines[3])
    assert first[6:9] == [*CELLS[:2], "4.0e-04 (3↓ 33↑)"] and first[-1] == CELLS[3]
    assert second[4:10] == ["10.5", "11.25", "+0.75", "[+0.5, +1]", "—", "12/12"] and second[-1] == "—"


def test_the_study_html_shares_the_cells() -> None:
    report = cast(Any, SimpleNamespace(capability="multi_turn"))
    page = claims.arm_table([claims.arm_row(report, _arm())])
    cells = re.findall(r"<td>(.*?)</td>", page)
    assert _in_order(cells) and "<th>placebo percentile</th>" in page


def test_the_evaluation_table_is_the_same_on_the_terminal_and_in_html() -> None:
    row = EvalRow("multi_turn", 200, 0.6, 0.75, 0.15, (0.08, 0.22), 0.0004, sft_ci=(0.53, 0.67), dpo_ci=(0.69, 0.81))
    page = html_table(evaluation_columns(False), [evaluation_row(row, Strong)])
    assert "<td><b>multi_turn</b></td><td>200</td><td>60.0%</td><td>75.0%</td>" in page
    assert _in_order(re.findall(r"<td>(.*?)</td>", page), CELLS[:3])
    printed = _printed(terminal(evaluation_columns(False, intervals=True), [evaluation_row(row)]))
    assert "60.0% [53.0, 67.0]" in printed and "+15.0" in printed and "[+8.0, +22.0]" in printed
    base = replace(row, base_rate=0.5, base_ci=(0.43, 0.57), sft_minus_base=0.1, sft_minus_base_ci=(0.02, 0.18))
    base = replace(base, base_mcnemar_p=0.02)
    header = _printed(terminal(evaluation_columns(True, intervals=True), [evaluation_row(base)]))
    assert "SFT − base (pts)" in header and "+10.0" in header and "[+2.0, +18.0]" in header and "0.020" in header


def test_html_cells_are_escaped_and_a_table_keeps_its_own_columns() -> None:
    row = Row(PairedDelta(*EFFECT), placebo=Placement.of(RANK), extra={"arm": "<patch & mean>"})
    columns = [extra("arm"), N, DELTA, CI, P, PLACEBO]
    assert "<td>&lt;patch &amp; mean&gt;</td><td>200</td>" in html_table(columns, [row])
    assert _cells(markdown(columns, [row])[2]) == ["<patch & mean>", "200", *CELLS]


def _product_files() -> list[Path]:
    files = [p for room in PRODUCT for p in (ROOT / room).rglob("*.py")]
    return files + list((ROOT / "probe_cli").rglob("*.py")) + list((ROOT / "examples").rglob("*.py"))


FORMATTERS = {
    "an ordinal typed after a field ({x:.0f}th)": re.compile(r"\}(?:st|nd|rd|th)\b"),
    # a format field such as {x.percentile:.0f}; a dict literal's "percentile": key is data, not a printed number
    "a percentile printed as a number": re.compile(r"\{[^{}]*percentile[^{}\"']*:[^{}]*\}"),
    "a placebo p written as (p=": re.compile(r"\(p ?= ?\{"),
    "a rate turned into signed points ({100 * x:+...})": re.compile(r"\{100 \*[^{}]*:\+"),
    "a signed point difference ({x:+.1f})": re.compile(r"(?<!%)\{[^{}]*:\+\.[01]f\}"),
}


@pytest.mark.parametrize("what", sorted(FORMATTERS))
def test_only_the_cells_module_formats_a_paired_delta_cell(what: str) -> None:
    pattern = FORMATTERS[what]
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _product_files()
        if path != ROOT / "interventions" / "cells.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, f"{what} outside interventions/cells.py:\n" + "\n".join(found)


def test_a_verdict_reason_in_the_ab_json_keeps_its_words() -> None:
    """``--select``'s verdict reasons are written to ab_report.json: the prose of a paired delta stays as it was."""
    arm = _arm()
    reason = arm_verdict(arm, arm.capabilities[0]).reason
    assert reason == (
        "significant, but random units of the same layers do as much: Δ +15.0 pts [+8.0, +22.0], McNemar p 4.0e-04, "
        "72nd percentile of 20 placebo sets, 40/210 generations changed"
    )
