"""Calling the `probe` entry point in-process the way a shell does, and checking its one-line errors."""

from __future__ import annotations

import pytest

from probe_cli.main import main


def exit_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``probe ARGV``."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """Assert ``probe ARGV`` exits 2 with exactly one ``error:`` line containing every needle; return it."""
    capsys.readouterr()  # drop what set-up printed
    code, _, err = exit_of(argv, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
