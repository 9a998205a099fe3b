"""The install lock: every direct and transitive dependency pinned, with the sha256 of every file it may come from.

``python tools/lock.py`` (``make lock``) installs ``.[test,eval,text]`` into a fresh virtualenv with nothing but
``torch==2.13.0`` pinned ahead (an unpinned torch pulls a multi-GB CUDA build), freezes it, and writes
``requirements.lock``: a pip requirements file in hash-checking form, which ``make setup`` (and so ``make demo``,
``make test`` and CI) installs with ``pip install --require-hashes``. ``--keep-pins`` keeps the versions pinned now
and makes the hashes anew.

Each pin lists the sha256 of every file that may stand for it (:func:`hashes`):

* the file this machine's pip installs, with its configured find-links and indexes (``pip install --dry-run
  --report``: pip's own choice and pip's own hash);
  a pin asked for with extras by a dependency is written with them (``typepy[datetime]==...``), as pip's
  hash-checking mode wants;
* every file of that version on PyPI that this interpreter and platform can install (PyPI's JSON simple index,
  PEP 691), so that a machine with only PyPI installs the same versions, each file checked;

unless this machine installs a build of its own, not on PyPI: torch's CPU wheel. Then that file alone is listed, since
the builds differ (PyPI's Linux torch is the CUDA build, whose CUDA packages the lock does not hold) and pip, in
hash-checking mode, prefers an index's file whose hash the lock lists to a find-links file: with PyPI's hash listed,
this machine would install the CUDA build. A machine with only PyPI then stops at torch in one pip line (its file's
hash is not listed); it needs torch's CPU wheel (PyTorch's own CPU index) or a lock made there.

Its header carries a digest of pyproject's dependency declarations; ``tests/test_lock.py`` fails when the two disagree.

Example:
    >>> text = "# header\\nnumpy==2.4.6 \\\\\\n    --hash=sha256:" + "ab" * 32 + "\\n"
    >>> parse_lock(text)["numpy"].version
    '2.4.6'
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
EXTRAS = "test,eval,text"
TORCH = "torch==2.13.0"
DIGEST_LINE = "# pyproject-digest: "
PYPI = "https://pypi.org/simple"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([A-Za-z0-9._,-]+)\])?==([^\s;#\\]+)$")
HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")
# How make setup installs the lock: every file checked against the lock's hashes, nothing that the lock does not list
INSTALL = ("--require-hashes", "-r")


@dataclass
class Pin:
    """One locked package: its name as written, its version, and the sha256 of each file that may install it."""

    name: str
    version: str
    hashes: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)

    def requirement(self) -> str:
        return (
            f"{self.name}[{','.join(self.extras)}]=={self.version}" if self.extras else f"{self.name}=={self.version}"
        )


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


def parse_lock(text: str, name: str = LOCK.name) -> dict[str, Pin]:
    """``{normalized name: Pin}`` of every entry (a pin and its ``--hash`` options, joined across ``\\`` line ends);
    an entry that is not ``name==version`` followed by sha256 hashes raises ValueError naming its line."""
    pins: dict[str, Pin] = {}
    for number, entry in _entries(text):
        head, *options = entry.split()
        match = PIN.match(head)
        if not match:
            raise ValueError(f"{name}:{number}: {head!r} is not an exact name==version pin")
        found = [HASH.match(option) for option in options]
        if not all(found):
            raise ValueError(f"{name}:{number}: {head}: expected only --hash=sha256:<64 hex digits> after the pin")
        extras = match[2].split(",") if match[2] else []
        key = normalize(match[1])
        if key in pins:  # the same pin again, with the extras that dependencies ask of it (render)
            extras = sorted({*pins[key].extras, *extras})
        pins[key] = Pin(match[1], match[3], [m[1] for m in found if m], extras)
    return pins


def _entries(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each entry, continuation lines joined; comments and blank lines left out."""
    entries: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        body = line.strip()
        if pending is None and (not body or body.startswith("#")):
            continue
        start, so_far = pending or (number, "")
        joined = f"{so_far} {body.removesuffix(chr(92)).strip()}".strip()
        pending = (start, joined) if body.endswith("\\") else None
        if pending is None:
            entries.append((start, joined))
    if pending is not None:
        entries.append(pending)
    return entries


def read_lock(lock: Path = LOCK) -> dict[str, Pin]:
    return parse_lock(lock.read_text(encoding="utf-8"), lock.name)


def read_pins(lock: Path = LOCK) -> dict[str, str]:
    """``{normalized name: version}`` of every pin; a line that is not a pin raises ValueError."""
    return {name: pin.version for name, pin in read_lock(lock).items()}


def recorded_digest(lock: Path = LOCK) -> str | None:
    for line in lock.read_text(encoding="utf-8").splitlines():
        if line.startswith(DIGEST_LINE):
            return line[len(DIGEST_LINE) :].strip()
    return None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _frozen(venv: Path) -> list[Pin]:
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
            version = match[3].split("+")[0]  # torch's +cpu: the CPU build comes from the same pin as in the Makefile
            pins.append(Pin(match[1], version))
    return sorted(pins, key=lambda p: p.name.lower())


def machine_choice(python: Path | str, pins: list[Pin]) -> dict[str, tuple[str, list[str]]]:
    """``{normalized name: (sha256, extras)}``: the file this machine's pip would install for each pin (its configured
    find-links and indexes; nothing is installed), and the extras that the project's dependencies ask of it (pip's
    hash-checking mode wants ``name[extra]==version`` for a dependency asked for with extras)."""
    with tempfile.TemporaryDirectory(prefix="probe-lock-") as tmp:
        wanted = Path(tmp) / "pins.txt"
        wanted.write_text("".join(f"{p.name}=={p.version}\n" for p in pins), encoding="utf-8")
        resolved = _dry_run(python, Path(tmp) / "tree.json", ["-c", str(wanted), TORCH, f"{ROOT}[{EXTRAS}]"])
        alone = _dry_run(python, Path(tmp) / "pins.json", ["--no-deps", "-r", str(wanted)])
    extras = extras_asked(resolved, {normalize(_project_name()): set(EXTRAS.split(","))})
    return {
        normalize(item["metadata"]["name"]): (
            item["download_info"]["archive_info"]["hashes"]["sha256"],
            sorted(extras.get(normalize(item["metadata"]["name"]), set())),
        )
        for item in alone
    }


def extras_asked(tree: list[dict[str, Any]], roots: dict[str, set[str]]) -> dict[str, set[str]]:
    """``{normalized name: extras}`` that the resolved ``tree`` (pip's report) asks of each package, starting from the
    extras of ``roots``: each package's requirements whose markers hold for it, followed to a fixed point."""
    from packaging.requirements import Requirement

    requires = {normalize(i["metadata"]["name"]): i["metadata"].get("requires_dist") or [] for i in tree}
    asked: dict[str, set[str]] = {name: set(extras) for name, extras in roots.items()}
    pending = [*requires]
    while pending:
        name = pending.pop()
        for text in requires.get(name, []):
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not any(marker.evaluate({"extra": e}) for e in [*asked.get(name, ()), ""]):
                continue
            child = normalize(requirement.name)
            if not set(requirement.extras) <= asked.setdefault(child, set()):
                asked[child] |= set(requirement.extras)
                pending.append(child)
    return {name: extras for name, extras in asked.items() if extras and name not in roots}


def _project_name() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"])


def _dry_run(python: Path | str, report: Path, args: list[str]) -> list[dict[str, Any]]:
    dry_run = ["install", "-q", "--dry-run", "--ignore-installed", "--report", str(report)]
    subprocess.run([python, "-m", "pip", *dry_run, *args], check=True)
    chosen: list[dict[str, Any]] = json.loads(report.read_text(encoding="utf-8"))["install"]
    return chosen


def index_hashes(pin: Pin, index: str = PYPI) -> list[str]:
    """The sha256 of every file of ``pin``'s version on ``index`` that this interpreter and platform can install: its
    compatible wheels, or its source archive when it has none (PEP 691 JSON, the hashes the index publishes)."""
    from packaging.tags import sys_tags
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        parse_sdist_filename,
        parse_wheel_filename,
    )
    from packaging.version import Version

    request = urllib.request.Request(
        f"{index}/{normalize(pin.name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        files = json.load(reply)["files"]
    supported, want = set(sys_tags()), Version(pin.version)
    wheels, sources = [], []
    for entry in files:
        filename, sha256 = entry["filename"], entry.get("hashes", {}).get("sha256")
        if not sha256 or entry.get("yanked"):
            continue
        if filename.endswith(".whl"):
            try:
                _, version, _, tags = parse_wheel_filename(filename)
            except InvalidWheelFilename:  # an old upload whose name no installer reads (pydantic-0.18-py36+-none-any)
                continue
            if version == want and tags & supported:
                wheels.append(sha256)
            continue
        try:
            if parse_sdist_filename(filename)[1] == want:
                sources.append(sha256)
        except InvalidSdistFilename:
            continue
    return wheels or sources


def hashes(pins: list[Pin], python: Path | str, index: str = PYPI) -> list[Pin]:
    """``pins`` with the hashes of every file that may stand for each (module doc) and the extras asked of it; a pin
    with no file is an error."""
    local = machine_choice(python, pins)
    done = []
    for pin in pins:
        sha256, extras = local.get(normalize(pin.name), ("", []))
        published = index_hashes(pin, index)
        found = sorted({*published, *([sha256] if sha256 else [])})
        if sha256 and published and sha256 not in published:
            found = [sha256]  # a build of this machine's own, not the index's (module doc)
        if not found:
            raise SystemExit(f"{pin.name}=={pin.version}: no file on {index} or on this machine fits; cannot lock it")
        done.append(Pin(pin.name, pin.version, found, extras))
    return done


def render(pins: list[Pin]) -> str:
    header = [
        "# The install lock: every package `make setup` installs, pinned, with the sha256 of each file that may",
        "# install it (pip install --require-hashes). Made by `make lock` (tools/lock.py); edit pyproject.toml,",
        "# then run `make lock` -- never this file by hand.",
        f"# made with Python {platform.python_version()} on {platform.system()} {platform.machine()}",
        f"{DIGEST_LINE}{pyproject_digest()}",
    ]
    # a pin asked for with extras is written twice, plain and with them: pip's hash-checking mode wants each
    # requirement that a dependency makes of it (with its extras or without) pinned by a line of the lock
    written: list[Pin] = []
    for pin in pins:
        written += [Pin(pin.name, pin.version, pin.hashes), pin] if pin.extras else [pin]
    entries = [" \\\n".join([p.requirement(), *(f"    --hash=sha256:{h}" for h in p.hashes)]) for p in written]
    return "\n".join(header + entries) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep-pins", action="store_true", help="keep the versions pinned now; make the hashes anew")
    parser.add_argument("--index", default=PYPI, help="the package index whose files are hashed too (PEP 691)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="probe-lock-") as tmp:
        if args.keep_pins:
            pins, python = [Pin(p.name, p.version) for p in read_lock().values()], Path(sys.executable)
        else:
            pins, python = _frozen(Path(tmp) / "venv"), Path(tmp) / "venv" / "bin" / "python"
        locked = hashes(pins, python, args.index)
    LOCK.write_text(render(locked), encoding="utf-8")
    print(f"wrote {LOCK.relative_to(ROOT)}: {len(locked)} pins, {sum(len(p.hashes) for p in locked)} hashes")


if __name__ == "__main__":
    main()
