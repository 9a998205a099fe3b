"""The layer window: the depth-scaled default, explicit windows that must lie in the model,
and every output naming it."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest

from analysis import analyze_run, load_maps
from analysis.plots import faceted_figure, maps_figure, profile_figure
from analysis.window import Window, default_window, format_layers, resolve_window
from core.errors import ProbeError
from core.records import from_json, to_json
from probe_cli.main import main
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

DEFAULT_16 = (
    "default window: the last 20/32 of depth, layers 6-15 of a 16-layer model (the paper's 12-31 scaled by depth)"
)


@pytest.mark.parametrize("depth", range(1, 129))
def test_default_window_is_twelve_thirty_seconds_of_depth_rounded_half_up(depth: int) -> None:
    start = math.floor(Fraction(12 * depth, 32) + Fraction(1, 2))
    assert default_window(depth) == list(range(start, depth))


@pytest.mark.parametrize(
    ("depth", "span"),
    [(32, "12-31"), (30, "11-29"), (28, "11-27"), (12, "5-11"), (20, "8-19"), (44, "17-43"), (4, "2-3")],
)
def test_default_window_examples(depth: int, span: str) -> None:
    window = resolve_window(None, depth, list(range(depth)))
    assert format_layers(window.layers) == span and window.spec is None and window.warnings == ()
    assert (
        window.reason
        == f"default window: the last 20/32 of depth, layers {span} of a {depth}-layer model (the paper's 12-31 scaled "
        "by depth)"
    )


@pytest.mark.parametrize(
    ("spec", "layers"),
    [
        ("12-20", list(range(12, 21))),
        ("12-", list(range(12, 30))),
        ("3,5,7", [3, 5, 7]),
        ("all", list(range(30))),
        (" 0-29 ", list(range(30))),
    ],
)
def test_an_explicit_window_inside_the_model_is_used_as_given(spec: str, layers: list[int]) -> None:
    window = resolve_window(spec, 30, list(range(30)))
    assert window.layers == layers and window.spec == spec.strip() and window.warnings == ()
    assert window.reason == f"--layers {spec.strip()} (given)"


@pytest.mark.parametrize(("spec", "first_outside"), [("12-31", 30), ("40", 40), ("40-", 40), ("29,30", 30)])
def test_an_explicit_window_outside_the_model_names_its_depth(spec: str, first_outside: int) -> None:
    with pytest.raises(ProbeError) as error:
        resolve_window(spec, 30, list(range(30)))
    assert str(error.value) == (
        f"--layers {spec}: the model has 30 layers (0-29); layer {first_outside} is outside it "
        "(leave --layers out for the default window 11-29, the paper's 12-31 scaled by depth)"
    )


@pytest.mark.parametrize("spec", ["a-b", "3-1", "-2"])
def test_a_malformed_window_is_a_parse_error(spec: str) -> None:
    with pytest.raises(ProbeError, match="expected a range like 12-31"):
        resolve_window(spec, 30, list(range(30)))


def test_a_window_cut_by_the_recording_is_a_warning_and_part_of_the_reason() -> None:
    window = resolve_window(None, 30, list(range(20, 30)))
    assert window.layers == list(range(20, 30))
    assert window.warnings == ("default window 11-29: only layers 20-29 of 11-29 were recorded; analysing those",)
    assert window.reason.endswith("(the paper's 12-31 scaled by depth); cut to 20-29, the layers recorded")
    with pytest.raises(ProbeError, match="default window 11-29: none of layers 11-29 was recorded in this run"):
        resolve_window(None, 30, [0, 1])
    with pytest.raises(ProbeError, match="depth is unknown"):
        resolve_window(None, 0, [])


def test_window_record_round_trips() -> None:
    window = resolve_window("4-6", 8, list(range(8)))
    assert from_json(Window, to_json(window)) == window
    assert to_json(window) == {
        "layers": [4, 5, 6],
        "spec": "4-6",
        "reason": "--layers 4-6 (given)",
        "n_model_layers": 8,
    }


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("window") / "run"
    write_synthetic_run(path, SyntheticSpec(n_samples=20, n_layers=16, width=12, capabilities=("multi_turn", "nested")))
    return path


def test_summary_maps_file_and_plots_name_the_window(run_dir: Path, tmp_path: Path) -> None:
    result = analyze_run(run_dir, out_dir=tmp_path, plots=False)
    for cap in ("multi_turn", "nested"):
        body = to_json(result.summary)["capabilities"][cap]["mlp_out"]
        assert body["window"] == {
            "layers": list(range(6, 16)),
            "spec": None,
            "reason": DEFAULT_16,
            "n_model_layers": 16,
        }
    assert to_json(result.summary)["settings"]["layers"] is None
    assert all(
        loaded.window == result.maps[(loaded.capability, loaded.hook)].window for loaded in load_maps(result.maps_path)
    )
    maps = result.maps[("multi_turn", "mlp_out")]
    for figure in (maps_figure(maps), profile_figure(maps, 0.05), faceted_figure(list(result.maps.values()))):
        title = figure.layout.title.text
        assert "layers 6-15" in title and f"window: {DEFAULT_16}" in title, title


def test_cli_prints_the_window_of_a_given_spec(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "analyze",
                str(run_dir),
                "-c",
                "nested",
                "--layers",
                "8-12",
                "--no-plots",
                "--out",
                str(tmp_path),
                "--stability-resamples",
                "0",
            ]
        )
    out = capsys.readouterr().out
    assert exc.value.code in (0, None)
    assert "window: layers 8-12 — --layers 8-12 (given)" in out and "resamples" not in out
