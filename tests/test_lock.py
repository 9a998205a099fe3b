"""The install lock (requirements.lock) agrees with pyproject.toml and with what is installed.

Every declared requirement, extras included, has an exact pin that satisfies it; the lock was made from today's
pyproject (its recorded digest matches); and the running environment holds the locked version of every locked package
it has, so a suite run from a drifted install says so instead of failing somewhere far away.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import lock


def _requirements() -> list[Requirement]:
    declared = lock.declared()
    texts = list(declared["dependencies"])  # type: ignore[call-overload]
    for group in declared["optional-dependencies"].values():  # type: ignore[attr-defined]
        texts.extend(group)
    return [Requirement(text) for text in texts]


def test_every_line_of_the_lock_is_an_exact_pin() -> None:
    assert len(lock.read_pins()) > 100


def test_every_declared_requirement_has_a_pin_that_satisfies_it() -> None:
    pins = lock.read_pins()
    missing = [str(r) for r in _requirements() if lock.normalize(r.name) not in pins]
    unmet = [
        f"{r} (locked {pins[lock.normalize(r.name)]})"
        for r in _requirements()
        if lock.normalize(r.name) in pins and not r.specifier.contains(pins[lock.normalize(r.name)], prereleases=True)
    ]
    assert missing == [] and unmet == [], "run `make lock`"


def test_the_lock_was_made_from_this_pyproject() -> None:
    assert lock.recorded_digest() == lock.pyproject_digest(), (
        "pyproject.toml's dependencies changed since requirements.lock was made: run `make lock`"
    )


def test_the_digest_sees_a_changed_requirement(tmp_path: Path) -> None:
    changed = tmp_path / "pyproject.toml"
    text = (lock.ROOT / "pyproject.toml").read_text(encoding="utf-8")
    changed.write_text(text.replace('"pandas>=2"', '"pandas>=3"'), encoding="utf-8")
    assert lock.pyproject_digest(changed) != lock.pyproject_digest()


def test_a_loose_line_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "requirements.lock"
    loose.write_text("# header\nnumpy==2.4.6\npyyaml>=6\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"requirements.lock:3: 'pyyaml>=6' is not an exact name==version pin"):
        lock.read_pins(loose)


def test_the_installed_packages_are_the_locked_ones() -> None:
    drifted = []
    for name, version in lock.read_pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # e.g. pip's own wheel in a venv made without it
        if installed.split("+")[0] != version:
            drifted.append(f"{name} {installed} (locked {version})")
    assert drifted == [], "reinstall from the lock: make setup"
