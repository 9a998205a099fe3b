"""The install lock: every direct and transitive dependency pinned, and the pyproject it was made from.

``python tools/lock.py`` (``make lock``) installs ``.[test,eval,text]`` into a fresh virtualenv with nothing but
``torch==2.13.0`` pinned ahead (an unpinned torch pulls a multi-GB CUDA build), freezes it, and writes
``requirements.lock``: a pip constraints file that ``make setup``, ``make demo``, ``make test`` and CI install from.
Its header carries a digest of pyproject's dependency declarations; ``tests/test_lock.py`` fails when the two disagree.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
EXTRAS = "test,eval,text"
TORCH = "torch==2.13.0"
DIGEST_LINE = "# pyproject-digest: "
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def declared(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, object]:
    """The parts of pyproject that decide what gets installed."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    project = data["project"]
    return {
        "build-system": data["build-system"]["requires"],
        "requires-python": project["requires-python"],
        "dependencies": project["dependencies"],
        "optional-dependencies": project["optional-dependencies"],
    }


def pyproject_digest(pyproject: Path = ROOT / "pyproject.toml") -> str:
    return hashlib.sha256(json.dumps(declared(pyproject), sort_keys=True).encode()).hexdigest()


def read_pins(lock: Path = LOCK) -> dict[str, str]:
    """``{normalized name: version}`` of every pin; a line that is not ``name==version`` raises ValueError."""
    pins: dict[str, str] = {}
    for number, line in enumerate(lock.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        match = PIN.match(text)
        if not match:
            raise ValueError(f"{lock.name}:{number}: {text!r} is not an exact name==version pin")
        pins[normalize(match[1])] = match[2]
    return pins


def recorded_digest(lock: Path = LOCK) -> str | None:
    for line in lock.read_text(encoding="utf-8").splitlines():
        if line.startswith(DIGEST_LINE):
            return line[len(DIGEST_LINE) :].strip()
    return None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _frozen(venv: Path) -> list[str]:
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "-U", "pip"], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", TORCH], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", f"{ROOT}[{EXTRAS}]"], check=True)
    out = subprocess.run(
        [python, "-m", "pip", "freeze", "--all", "--exclude-editable"], check=True, capture_output=True, text=True
    ).stdout
    project = normalize(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"])
    pins = []
    for line in out.splitlines():
        match = PIN.match(line.strip())
        if match and normalize(match[1]) != project:
            version = match[2].split("+")[0]  # torch's +cpu: the CPU build comes from the same pin as in the Makefile
            pins.append(f"{match[1]}=={version}")
    return sorted(pins, key=str.lower)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="probe-lock-") as tmp:
        pins = _frozen(Path(tmp) / "venv")
    header = [
        "# The install lock: every package `make setup` installs, pinned. Made by `make lock` (tools/lock.py);",
        "# edit pyproject.toml, then run `make lock` -- never this file by hand.",
        f"# made with Python {platform.python_version()} on {platform.system()} {platform.machine()}",
        f"{DIGEST_LINE}{pyproject_digest()}",
    ]
    LOCK.write_text("\n".join(header + pins) + "\n", encoding="utf-8")
    print(f"wrote {LOCK.relative_to(ROOT)}: {len(pins)} pins")


if __name__ == "__main__":
    main()
