"""The one exception type for user mistakes, shared by the whole pipeline.

Every stage (data_synthesis → training → probes → analysis → interventions) raises
:class:`ProbeError` (or a subclass) for bad input: a malformed file, an unknown
name, an argument out of range. The CLI turns exactly these into a one-line message
and exit status 2; anything else is a bug and keeps its traceback. It lives in
:mod:`core`, below the five stages, so that imports only ever flow downstream.
"""

from __future__ import annotations


class ProbeError(Exception):
    """A user-facing error: bad input, named precisely, with what was expected."""


class DataError(ProbeError):
    """A data file that does not match the expected schema.

    The message always names the file and (1-based) line.
    """

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class Interrupted(ProbeError):
    """Ctrl-C (SIGINT) during a long step, turned into what was kept and how to resume.

    Long-running library functions catch :class:`KeyboardInterrupt` at the level that knows
    what is on disk and re-raise this with that message; the CLI prints it and exits 130
    (not 2: it is not a user mistake). It derives from :class:`ProbeError` so that code
    which only knows "a clean one-line stop" still handles it.
    """

    exit_code = 130
