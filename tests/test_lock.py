"""The install lock (requirements.lock) agrees with pyproject.toml and with what is installed, and is hash-checked.

Every declared requirement, extras included, has an exact pin that satisfies it, with the sha256 of each file that may
install it; ``make setup`` installs it with ``pip install --require-hashes`` (a file whose hash the lock does not list
is refused: checked with pip itself on a wheel made here) and the project alone after it; the lock was made from
today's pyproject (its recorded digest matches); and the running environment holds the locked version of every locked
package it has, so a suite run from a drifted install says so instead of failing somewhere far away.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import subprocess
import sys
import zipfile
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


def test_every_line_of_the_lock_is_an_exact_pin_with_its_hashes() -> None:
    pins = lock.read_lock()
    assert len(pins) > 100
    assert [p.name for p in pins.values() if not p.hashes] == [], "run `make lock`"
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for p in pins.values() for h in p.hashes)


def test_make_setup_installs_the_lock_with_its_hashes_and_the_project_alone() -> None:
    recipe = (lock.ROOT / "Makefile").read_text(encoding="utf-8")
    installs = [line.split("#")[0].split() for line in recipe.splitlines() if "-m pip install" in line]
    assert [" ".join(lock.INSTALL), "requirements.lock"] in [[" ".join(i[-3:-1]), i[-1]] for i in installs]
    project = [i for i in installs if i[-1] == "."]
    assert len(project) == 1 and "--no-deps" in project[0] and "-e" in project[0]
    assert all("-c" not in i for i in installs), "a constraints file is not hash-checked: install from -r"


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


@pytest.mark.parametrize(
    "text, error",
    [
        ("numpy==2.4.6 \\\n    --hash=sha256:{h}\npyyaml>=6\n", r":4: 'pyyaml>=6' is not an exact name==version pin"),
        ("numpy==2.4.6 \\\n    --hash=md5:00\n", r":2: numpy==2.4.6: expected only --hash=sha256:<64 hex digits>"),
        ("numpy==2.4.6 --index-url=http://x\n", r":2: numpy==2.4.6: expected only --hash=sha256"),
    ],
)
def test_a_line_that_is_not_a_hashed_pin_is_refused(text: str, error: str, tmp_path: Path) -> None:
    loose = tmp_path / "requirements.lock"
    loose.write_text("# header\n" + text.format(h="ab" * 32), encoding="utf-8")
    with pytest.raises(ValueError, match="requirements.lock" + error):
        lock.read_pins(loose)


def _wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel of ``probe-lock-check`` 1.0, made here (no index is asked)."""
    path = folder / "probe_lock_check-1.0-py3-none-any.whl"
    info = "probe_lock_check-1.0.dist-info"
    files = {
        "probe_lock_check.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: probe-lock-check\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip('=')},"
        f"{len(text.encode())}"
        for name, text in files.items()
    ]
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


def test_pip_refuses_a_file_whose_hash_the_lock_does_not_list(tmp_path: Path) -> None:
    """The lock's own form, installed the way make setup does: the right hash installs, one edited digit is refused."""
    wheel = _wheel(tmp_path)
    right = hashlib.sha256(wheel.read_bytes()).hexdigest()
    outcomes = []
    for digest in (right, ("0" if right[0] != "0" else "1") + right[1:]):
        locked = tmp_path / "requirements.lock"
        locked.write_text(lock.render([lock.Pin("probe-lock-check", "1.0", [digest])]), encoding="utf-8")
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(tmp_path)]
        done = subprocess.run([*command, *lock.INSTALL, str(locked)], capture_output=True, text=True, timeout=120)
        outcomes.append((done.returncode, "DO NOT MATCH THE HASHES" in done.stderr))
    assert outcomes == [(0, False), (1, True)], outcomes


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
