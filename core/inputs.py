"""The one reader of JSON and JSONL input files, with one error type.

Every file a user hands the toolkit (data rows, responses, neuron sets) is read here,
so that every way a file can be wrong ends in the same
:class:`~core.errors.DataError` naming the file, the 1-based line and what was
expected, and never in a ``UnicodeDecodeError``, ``RecursionError`` or ``ValueError``
traceback. What it decides, once for every reader:

* **Encoding.** UTF-8 only. Bytes that are not UTF-8 name their line and column. A UTF-8
  byte-order mark is accepted and dropped (editors on Windows write one, and ``cat`` of
  two such files puts one at the start of a later line); a UTF-16 or UTF-32 mark gets
  advice on converting the file.
* **Lines.** Numbered as an editor numbers them (``\\n``, ``\\r\\n`` or ``\\r``); lines of
  JSON whitespace only are skipped but still counted.
* **The path.** A missing path, a directory, a pipe and an unreadable file each get their
  own message; a pipe is refused because readers go over a file twice (kind detection,
  then rows; the line of a refused row).
* **Values.** Nesting deeper than :data:`MAX_DEPTH`, numbers Python will not convert
  (more than 4300 digits) and lone UTF-16 surrogate escapes (``"\\ud800"``, not a
  character: writing such a string back as UTF-8 fails) are refused at read time, so a
  value that loads can also be written, tokenized and compared later.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "rows.jsonl"
    >>> _ = path.write_bytes(b'\\xef\\xbb\\xbf{"a": 1}\\n\\n[2]\\n{"b": "\\xff"}\\n')
    >>> rows = iter_jsonl(path)
    >>> next(rows), next(rows)
    ((1, {'a': 1}), (3, [2]))
    >>> next(rows)
    Traceback (most recent call last):
    ...
    core.errors.DataError: ...rows.jsonl:4: not UTF-8 text (byte 0xff at column 8); expected UTF-8 JSON:
    re-save the file as UTF-8 (e.g. iconv -t UTF-8)
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.errors import DataError

MAX_DEPTH = 64
_BOM = "\ufeff"
_WIDE_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep; expected plain rows (a few levels of objects and lists)"


def check_input_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` as a :class:`Path` if it is a readable regular file, else :class:`DataError` saying why."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise DataError(str(p), None, f"no such {what}") from None
    except NotADirectoryError:
        raise DataError(str(p), None, f"no such {what} (a parent of it is a file, not a directory)") from None
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DataError(str(p), None, f"cannot read the {what} ({detail})") from None
    if stat.S_ISDIR(mode):
        raise DataError(str(p), None, f"is a directory; expected a {what}")
    if not stat.S_ISREG(mode):
        raise DataError(str(p), None, f"is not a regular file (a pipe or device); expected a {what} saved on disk")
    return p


def iter_jsonl(path: str | os.PathLike[str], what: str = "JSONL file") -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for every line of a JSON-lines file that is not blank."""
    p = check_input_file(path, what)
    try:
        with p.open("rb") as handle:
            number = 0
            for chunk in handle:
                for raw in chunk.splitlines():
                    number += 1
                    if number == 1:
                        _refuse_wide_encoding(p, raw)
                    value = _line_value(p, number, raw)
                    if value is not _BLANK:
                        yield number, value
    except OSError as exc:
        raise DataError(str(p), None, f"cannot read the {what} ({exc.strerror or exc})") from None


def read_json(path: str | os.PathLike[str], what: str = "JSON file") -> Any:
    """The one JSON value a whole file holds; errors name the line as :func:`json.loads` counts it."""
    p = check_input_file(path, what)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise DataError(str(p), None, f"cannot read the {what} ({exc.strerror or exc})") from None
    _refuse_wide_encoding(p, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(str(p), line, _not_utf8(data[exc.start], column)) from None
    text = text.removeprefix(_BOM)
    if not text.strip(" \t\r\n"):
        raise DataError(str(p), None, f"is empty; expected a {what}")
    return _parse(p, None, text, data, f"expected a {what}")


def json_depth_ok(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests at most ``limit`` lists/objects deep (iterative: any depth is safe to ask)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for quoting a user's value in a one-line error."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


class _Blank:
    """Marks a line with no value (only JSON whitespace)."""


_BLANK = _Blank()


def _line_value(path: Path, number: int, raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(str(path), number, _not_utf8(raw[exc.start], exc.start + 1)) from None
    text = text.removeprefix(_BOM)
    if not text.strip(" \t\r\n"):
        return _BLANK
    return _parse(path, number, text, raw, "expected one JSON value per line")


def _parse(path: Path, line: int | None, text: str, raw: bytes, expected: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        where = line if line is not None else exc.lineno
        raise DataError(str(path), where, f"malformed JSON ({exc.msg} at column {exc.colno}); {expected}") from None
    except RecursionError:
        raise DataError(str(path), line, _TOO_DEEP) from None
    except ValueError:
        raise DataError(
            str(path), line, "a number with more than 4300 digits; expected numbers of ordinary size"
        ) from None
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and not json_depth_ok(value):
        raise DataError(str(path), line, _TOO_DEEP)
    if _SURROGATE_ESCAPE.search(raw):
        bad = _lone_surrogate(value)
        if bad is not None:
            raise DataError(
                str(path),
                line,
                f"the escape \\u{ord(bad):04x} is half of a UTF-16 surrogate pair, not a character; "
                "expected valid Unicode text",
            )
    return value


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in any string or key of ``value`` (depth already bounded)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return item[exc.start]
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _refuse_wide_encoding(path: Path, head: bytes) -> None:
    for mark, name in _WIDE_BOMS:
        if head.startswith(mark):
            raise DataError(
                str(path),
                1,
                f"is {name} text (it starts with a {name} byte-order mark); expected UTF-8: "
                f"re-save it as UTF-8 (e.g. iconv -f {name} -t UTF-8)",
            )


def _not_utf8(byte: int, column: int) -> str:
    return (
        f"not UTF-8 text (byte 0x{byte:02x} at column {column}); expected UTF-8 JSON: "
        "re-save the file as UTF-8 (e.g. iconv -t UTF-8)"
    )
