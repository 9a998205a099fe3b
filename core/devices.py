"""A ``--device`` checked against this machine before anything is loaded.

``check_device("cuda:1", "--device")`` returns the normalised name when this machine has that
device, and otherwise raises one :class:`~core.errors.ProbeError` naming the flag and what the
machine does have, e.g. ``--device cuda:1: CUDA is not available on this machine; available
here: cpu``. Checking costs a torch import and a driver query, no model and no memory.

Example:
    >>> check_device("CPU", "--device")
    'cpu'
"""

from __future__ import annotations

import re

from core.errors import ProbeError

DEVICE_NAMES = re.compile(r"^(?P<kind>cpu|cuda|mps|auto)(?::(?P<index>\d{1,6}))?$")


def cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def available_devices(allow_auto: bool = False) -> str:
    """What this machine offers, in words: ``cpu, cuda:0 to cuda:3 (cuda = cuda:0), auto``."""
    found = ["cpu"]
    count = cuda_count()
    if count == 1:
        found.append("cuda (cuda:0)")
    elif count > 1:
        found.append(f"cuda:0 to cuda:{count - 1} (cuda = cuda:0)")
    if mps_available():
        found.append("mps")
    if allow_auto:
        found.append("auto")
    return ", ".join(found)


def check_device(device: str, flag: str = "--device", *, allow_auto: bool = False) -> str:
    """``device`` lower-cased and checked against this machine; one ProbeError naming ``flag`` otherwise.

    ``allow_auto``: the command takes ``auto`` (one model spread over the visible devices with
    ``device_map="auto"``; on a CPU-only machine that is the CPU).
    """
    name = str(device).strip().lower()
    match = DEVICE_NAMES.match(name)
    expected = "cpu, cuda, cuda:N, mps" + (" or auto" if allow_auto else "")
    if (
        match is None
        or (match["index"] is not None and match["kind"] != "cuda")
        or (match["kind"] == "auto" and not allow_auto)
    ):
        raise ProbeError(
            f"{flag} {_shown(device)}: expected {expected}; available here: {available_devices(allow_auto)}"
        )
    kind, index = match["kind"], match["index"]
    if kind == "cuda":
        return _check_cuda(int(index) if index is not None else None, flag, allow_auto)
    if kind == "mps" and not mps_available():
        raise ProbeError(
            f"{flag} mps: MPS (Apple GPU) is not available on this machine; "
            f"available here: {available_devices(allow_auto)}"
        )
    return kind


def _check_cuda(index: int | None, flag: str, allow_auto: bool) -> str:
    count = cuda_count()
    shown = "cuda" if index is None else f"cuda:{index}"
    if count == 0:
        raise ProbeError(
            f"{flag} {shown}: CUDA is not available on this machine; available here: {available_devices(allow_auto)}"
        )
    if index is not None and index >= count:
        raise ProbeError(
            f"{flag} {shown}: this machine has {count} CUDA device{'s' if count > 1 else ''}; "
            f"available here: {available_devices(allow_auto)}"
        )
    return shown


def _shown(value: object) -> str:
    """The value as typed, quoted and cut when it is long or holds odd characters."""
    text = str(value)
    return repr(text if len(text) <= 40 else text[:40] + "...")
