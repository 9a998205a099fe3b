"""A build that waits for another process's build says so, then goes on once the lock is free."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from core.builds import build_lock
from core.locks import LockHeld, file_lock


def test_a_waiting_build_says_who_it_waits_for_then_proceeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / ".default_pair.lock"
    entered = threading.Event()

    def second_build() -> None:
        with build_lock(lock, "the default pair in HOME"):
            entered.set()

    with file_lock(lock):
        waiter = threading.Thread(target=second_build)
        waiter.start()
        said, deadline = "", time.monotonic() + 10
        while "waiting:" not in said and time.monotonic() < deadline:
            time.sleep(0.05)
            said += capsys.readouterr().err
        assert said.strip() == f"waiting: another process is building the default pair in HOME (lock {lock})"
        assert not entered.is_set(), "the second build ran while the first held the lock"
    waiter.join(timeout=10)
    assert entered.is_set()


def test_an_unheld_lock_is_taken_silently_and_a_refusing_lock_still_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / ".smollm2_base.lock"
    with build_lock(lock, "the SmolLM2 base"), pytest.raises(LockHeld), file_lock(lock, wait=False):
        pass
    assert capsys.readouterr().err == ""
