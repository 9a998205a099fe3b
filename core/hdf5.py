"""HDF5 files other than a run's activations (maps, weight change, attribution): written whole, read through one check.

**Writing.** HDF5 keeps dirty metadata in its caches and retries writing them on every later
close; when the disk is full that means a cascade of ``Exception ignored`` tracebacks and, at
interpreter exit, a crash inside the library. So :func:`write_hdf5` never lets HDF5 touch the
disk: the file is built in memory (h5py on a :class:`io.BytesIO`), closed, and its bytes are
written by :func:`core.atomic.write_atomic`. A full disk is then a plain ``OSError`` from one
``write`` call, the temporary file is removed, and the file that was there is kept.

**Reading.** :func:`read_hdf5` opens a file the toolkit wrote and turns every way it can be wrong
(missing, not HDF5, truncated, a dataset or attribute missing or of the wrong kind, text that is
not UTF-8) into one :class:`~core.errors.ProbeError` naming the file and what to do.
(:mod:`probes.store` reads ``activations.h5`` through a guard process instead, because that file
is large and written incrementally.)

Example:
    >>> import tempfile, pathlib, numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.h5"
    >>> write_hdf5(path, lambda f: f.create_dataset("x", data=np.arange(3)))
    >>> with read_hdf5(path, "test file", "write it again") as f:
    ...     array(f, "x", ndim=1).tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from core.atomic import write_atomic
from core.errors import ProbeError

__all__ = ["array", "first_line", "json_attr", "read_hdf5", "text_attr", "write_hdf5"]

READ_FAULTS = (KeyError, ValueError, TypeError, OSError, IndexError, AttributeError, RecursionError)
"""What h5py, numpy and json raise on a file whose contents are not what the reader expects."""


def first_line(exc: BaseException) -> str:
    """An exception as one short line: h5py's messages run over several."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


def write_hdf5(path: str | Path, fill: Callable[[h5py.File], Any], *, durable: bool = True) -> None:
    """Build an HDF5 file in memory with ``fill`` and put it at ``path`` atomically (see the module doc)."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as handle:
        fill(handle)
    write_atomic(path, lambda handle: handle.write(buffer.getbuffer()), durable=durable)


@contextmanager
def read_hdf5(path: str | Path, what: str, remedy: str) -> Iterator[h5py.File]:
    """``path`` open for reading; any fault while it is open is one ProbeError naming the file.

    ``what`` names the kind of file (``"weight-change file"``), ``remedy`` says how to make a good one.
    A :class:`ProbeError` raised by the caller's own checks passes through unchanged.
    """
    p = Path(path)
    if not p.is_file():
        raise ProbeError(f"{p}: no {what} here; {remedy}")
    try:
        handle = h5py.File(p, "r")
    except OSError as exc:
        raise ProbeError(f"{p}: not a readable HDF5 file ({first_line(exc)}); {remedy}") from None
    try:
        with handle:
            yield handle
    except READ_FAULTS as exc:
        raise ProbeError(f"{p}: not a {what} as this toolkit writes it ({first_line(exc)}); {remedy}") from None


def text_attr(node: h5py.HLObject, name: str) -> str:
    """The text attribute ``name`` of a group or file; one that is missing, not text or not UTF-8 raises ValueError."""
    if name not in node.attrs:
        raise KeyError(f"no attribute {name!r} at {node.name}")
    value = node.attrs[name]
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str):
        raise TypeError(f"attribute {name!r} at {node.name} holds {type(value).__name__}; expected text")
    try:
        value.encode("utf-8")  # h5py hands invalid UTF-8 over as lone surrogates
    except UnicodeEncodeError:
        raise ValueError(f"attribute {name!r} at {node.name} is not valid UTF-8 text") from None
    return value


def json_attr(node: h5py.HLObject, name: str) -> Any:
    """The JSON text attribute ``name``, parsed (faults as :func:`text_attr`, or ValueError for bad JSON)."""
    return json.loads(text_attr(node, name))


def array(group: h5py.Group, name: str, ndim: int, kind: str = "fiu") -> np.ndarray:
    """The dataset ``name`` of ``group`` read whole, checked to be ``ndim``-dimensional numbers of ``kind``."""
    item = group.get(name)
    if not isinstance(item, h5py.Dataset):
        raise KeyError(f"no dataset {name!r} in {group.name}")
    if item.ndim != ndim or item.dtype.kind not in kind:
        raise TypeError(f"{item.name} holds {item.dtype} of shape {item.shape}; expected {ndim}-d numbers")
    return np.asarray(item[()])
