"""The one check of an output path, run by every command before it does any work.

An output option names either a directory the command fills (``--out`` of ``analyze``,
``intervene``, ``synthesize``, ``train``) or one file it writes (``judge
--verdicts-out``, ``models eval --out``). Left unchecked, a path of the wrong kind fails
only at the first write, after minutes of work, as ``FileExistsError``,
``NotADirectoryError`` or ``IsADirectoryError``. These functions refuse it up front with
one :class:`~core.errors.ProbeError` that names the option, the path and what is wrong:

* a directory option that exists as a file, or a file option that exists as a directory;
* a path below an existing file (``--out FILE/sub``);
* a dangling symbolic link;
* a place that cannot be written: the nearest existing directory is tried by creating
  and removing a temporary file in it, which also catches a read-only file system and
  holds for root, where permission bits say nothing.

An output file must also not be one of the command's inputs (:func:`check_not_an_input`):
``--out T`` with ``--test T`` would replace the test file with the result. The same file
reached through another name (a relative path, a symbolic or hard link) counts as the same:
paths are compared resolved and by ``(st_dev, st_ino)``. An input that is a directory (a model
directory) stands for every file in it. A command that fills a directory names the files it
writes there (:func:`check_outputs`), and each is held against every input the same way.

Nothing of a run is overwritten by another command's output. Every output path names the command
that writes it (``writer``, a :class:`core.run_dir.Writer` or the command's own name), and is held against
the layout of the results folders (:func:`core.run_dir.results_place`: run, analysis, A/B and lm-eval
folders, recognised by their files, and every name in them with the commands that write it). A path
at a place another command writes is refused, whether the file is there yet or not: ``probe report
--out RUN/run.json`` would leave the run unusable. So is an output folder that is a results folder of
another command (``probe intervene --out RUN/analysis``): it is refused, never written beside. A
rerun replacing its own output passes (``probe models eval --out RUN/eval.json``, ``probe intervene``
resuming its ``--out``), and so does a name the layout does not know, in a results folder or elsewhere.
A folder that will be replaced whole (``probe train --overwrite``) must hold no results folder at all.

They create nothing that stays, so a refused command leaves the disk as it was. Whether
an existing output may be replaced is each command's own rule (``--overwrite``, resume).

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "notes.txt").write_text("x")
    >>> check_output_dir(root / "new" / "deeper", "--out", writer="probe synthesize") == root / "new" / "deeper"
    True
    >>> check_output_dir(root / "notes.txt" / "sub", "--out", writer="probe synthesize")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --out .../notes.txt/sub: .../notes.txt is a file, not a directory
    >>> _ = (root / "run.json").write_text('{"settings": {}}')
    >>> check_output_file(root / "run.json", "--out", writer="probe report")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --out .../run.json: is the run record of the run folder ..., written by probe run, ...
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from core.errors import ProbeError
from core.run_dir import results_below, results_place

Inputs = Mapping[str, str | os.PathLike[str] | None]
MAX_DIR_FILES = 10_000  # files of one input directory compared (a model directory holds tens)


def check_output_dir(
    path: str | os.PathLike[str], flag: str, inputs: Inputs | None = None, *, writer: str, replaced: bool = False
) -> Path:
    """``path`` as a :class:`Path` if ``writer`` (the command) can create or fill a directory there, else
    :class:`ProbeError`.

    ``inputs``: ``{what: path}`` the command reads; a directory option naming one of them is refused.
    ``replaced``: the folder will be replaced whole, so it must hold no results folder (module doc).
    """
    check_not_an_input(path, flag, inputs or {})
    checked = _checked(Path(path), flag, partial(_check_dir, writer=writer))
    if replaced and checked.is_dir():
        held = results_below(checked)
        if held is not None:
            raise ProbeError(
                f"{flag} {path}: holds the results folder {held}, which replacing the folder would delete; "
                f"name another {flag}"
            )
    return checked


def check_output_file(path: str | os.PathLike[str], flag: str, inputs: Inputs | None = None, *, writer: str) -> Path:
    """``path`` as a :class:`Path` if ``writer`` (the command) can write a file there (creating its parents), else
    :class:`ProbeError`.

    ``inputs``: ``{flag: path}`` of the files the command reads; an output that is one of them is refused.
    """
    checked = _checked(Path(path), flag, partial(_check_file, writer=writer))
    check_not_an_input(checked, flag, inputs or {})
    return checked


def check_outputs(flag: str, where: str | os.PathLike[str], files: Iterable[Path], inputs: Inputs) -> None:
    """Refuse when any of the ``files`` a command writes into its output directory ``where`` (option ``flag``) is one
    of its ``inputs``; see the module doc.

    >>> import tempfile, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (run / "test.jsonl").write_text("{}")
    >>> (run / "eval.json").symlink_to(run / "test.jsonl")
    >>> check_outputs("--out", run, [run / "eval.json"], {"--data": run / "test.jsonl"})
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --out ...: its file eval.json is the same file as --data .../test.jsonl; ...
    """
    for path in files:
        found = _input_at(path, inputs)
        if found is not None:
            raise ProbeError(
                f"{flag} {where}: its file {Path(path).relative_to(where)} is the same file as {found}; writing it "
                "would overwrite the input: name another output directory"
            )


def check_not_an_input(path: str | os.PathLike[str], flag: str, inputs: Inputs) -> None:
    """Refuse an output file that is one of ``inputs`` ({flag: path}; None for an input not given; a directory for
    every file in it): writing it would destroy it."""
    found = _input_at(Path(path), inputs)
    if found is not None:
        raise ProbeError(
            f"{flag} {path}: is the same file as {found}; writing it would overwrite the input: name another output"
            " file"
        )


def check_not_holding_an_input(out: str | os.PathLike[str], flag: str, inputs: Inputs) -> None:
    """Refuse an output folder that will be replaced whole (``probe train --overwrite``) while it holds one of
    ``inputs`` ({flag: path}; None for an input not given), or is one: the run would delete what it reads.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (out / "sft.jsonl").write_text("{}")
    >>> check_not_holding_an_input(out, "--out", {"--data": out / "sft.jsonl"})
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --out ...: holds --data .../sft.jsonl, which replacing the folder would delete; ...
    """
    root = Path(out).resolve()
    for name, source in inputs.items():
        if source is None or not Path(source).exists():
            continue
        where = Path(source).resolve()
        if where == root or where.is_relative_to(root):
            raise ProbeError(
                f"{flag} {out}: holds {name} {source}, which replacing the folder would delete; move it out of "
                f"{flag}, or name another {flag}"
            )


def _input_at(path: Path, inputs: Inputs) -> str | None:
    """'FLAG PATH' of the input ``path`` is (through any link), or None."""
    for flag, source in inputs.items():
        if source is None:
            continue
        same = next((f for f in _files_of(Path(source)) if _same_file(path, f)), None)
        if same is not None:
            return f"{flag} {source if same == Path(source) else same}"
    return None


def _files_of(source: Path) -> list[Path]:
    """``source`` itself, or the files directly in it when it is a directory."""
    try:
        if source.is_dir():
            return sorted(f for f in itertools.islice(source.iterdir(), MAX_DIR_FILES) if f.is_file())
    except (OSError, ValueError):
        return []
    return [source]


def _same_file(a: Path, b: Path) -> bool:
    """The same file: by ``(st_dev, st_ino)`` when both exist (any link), else by the resolved path."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symbolic-link loop (Python < 3.13)
        return False


def _checked(p: Path, flag: str, check: Callable[[Path, str], None]) -> Path:
    try:
        if "\x00" in str(p):
            raise ValueError("embedded null byte")
        check(p, flag)
    except (OSError, ValueError, RuntimeError) as exc:  # a name too long, a NUL byte, a link loop: unusable
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ProbeError(f"{flag} {p}: not a usable path ({detail})") from None
    return p


def _check_place(p: Path, flag: str, writer: str, noun: str) -> None:
    """Refuse a path at a place of a results folder that ``writer`` does not write (module doc)."""
    found = results_place(p)
    if found is not None and writer not in found.writers:
        raise ProbeError(f"{flag} {p}: {found.describe()}, not an output of {writer}: name another {noun}")


def _check_dir(p: Path, flag: str, writer: str) -> None:
    _refuse_dangling(p, flag)
    _check_place(p, flag, writer, "folder")
    if p.exists() and not p.is_dir():
        raise ProbeError(f"{flag} {p}: exists and is not a directory; expected a directory (or a path to create one)")
    _writable_parent(p, flag)


def _check_file(p: Path, flag: str, writer: str) -> None:
    _refuse_dangling(p, flag)
    _check_place(p, flag, writer, "file")
    if p.is_dir():
        raise ProbeError(f"{flag} {p}: is a directory; expected a file name (e.g. {p / 'out.jsonl'})")
    if p.exists() and not p.is_file():
        raise ProbeError(f"{flag} {p}: exists and is not a regular file")
    _writable_parent(p.parent, flag, p)


def _refuse_dangling(p: Path, flag: str) -> None:
    if p.is_symlink() and not p.exists():
        raise ProbeError(
            f"{flag} {p}: a symbolic link to a missing target ({os.readlink(p)}); remove it or name another path"
        )


def _writable_parent(start: Path, flag: str, shown: Path | None = None) -> None:
    """The nearest existing directory at or above ``start`` must be a directory we can create files in."""
    shown = shown or start
    here = start
    while not here.exists() and not here.is_symlink() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        kind = (
            "a symbolic link to a missing target"
            if here.is_symlink() and not here.exists()
            else "a file, not a directory"
        )
        raise ProbeError(f"{flag} {shown}: {here} is {kind}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe-write-check-", dir=here)
    except OSError as exc:
        raise ProbeError(
            f"{flag} {shown}: cannot write in {here} ({exc.strerror or exc}); choose a writable place"
        ) from None
    os.close(fd)
    os.unlink(probe)
