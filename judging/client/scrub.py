"""Server text made safe to cut, print, log and keep: no secret in it, no terminal control.

Everything an endpoint sends that the toolkit may show or store (an error message, a status
line's reason, the start of a malformed body, a reply's content) goes through
:meth:`Scrubber.scrub` first, and only then is it cut to length. Masking after the cut let
an echoed key that straddled the cut through (154 of a 164-character key, issue 22).

``scrub`` does, in this order:

1. removes ANSI CSI and OSC escape sequences, every other C0/C1 control character except
   newline and tab, and invisible format characters (bidi overrides, zero-width spaces), so
   nothing reaches a terminal that moves the cursor, retitles the window or hides text, and
   a key cannot hide from step 3 behind characters that print as nothing;
2. replaces ``scheme://user:password@`` in any URL by ``scheme://***@``;
3. masks each secret (the API key, a URL's password and ``user:password``) in each of its
   :func:`encodings` (as it is, percent-encoded in part or in full, JSON-escaped, base64 standard, url-safe and
   unpadded, as an ``Authorization: Basic`` header carries it, its UTF-8 in hexadecimal, and every
   character ``\\u``-escaped, each of the last two in lower and upper case) wherever any
   :data:`MIN_SECRET_RUN` or more consecutive characters of it appear; a shorter one wherever
   it appears whole.

Example:
    >>> s = Scrubber(["sk-0123456789abcdef"])
    >>> s.scrub("bad key sk-0123456789abcdef!")
    'bad key ***!'
    >>> s.scrub("ends with 89abcdef, starts with sk-01234")
    'ends with ***, starts with ***'
    >>> s.scrub("\\x1b[31mred\\x1b[0m \\x1b]0;title\\x07http://bob:hunter2@host/v1")
    'red http://***@host/v1'
    >>> Scrubber(["bob:hunter2"]).scrub("Authorization: Basic Ym9iOmh1bnRlcjI=")
    'Authorization: Basic ***'
    >>> s.scrub("echoed as 736b2d30313233343536373839616263646566 and \\\\u0073\\\\u006b\\\\u002d\\\\u0030")
    'echoed as *** and ***'
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

import numpy as np

MIN_SECRET_RUN = 8
"""A run of this many characters of a secret is masked wherever it appears."""
MASK = "***"

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, screen clears
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: window title, hyperlinks, clipboard
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # other two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]|\x9d[^\x07\x9c]*(?:\x07|\x9c)?"  # the same, introduced by a C1 byte
)
_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]"
)
_URL_CREDENTIALS = re.compile(r"://[^\s/?#@]+@")  # anchored on "://", so linear on any text
_PRIME = np.uint64(1_000_003)
_BLOCK = 1 << 20  # characters hashed at a time: small temporaries, and the GIL is free between blocks


class Scrubber:
    """Masks ``secrets`` (empty ones are ignored) and removes control sequences from text.

    Runs of a secret are found by comparing a rolling hash of every 8-character window of the
    text with the hashes of the secret's windows (numpy, linear time, in blocks that leave the
    GIL free between them): seconds for a reply at the 16 MiB cap whatever it holds, where a
    regular expression took minutes on adversarial text. A hash collision can only mask 8
    harmless characters more.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        kept = {encoded for s in secrets if s for encoded in encodings(s)}
        self._short = sorted((s for s in kept if len(s) < MIN_SECRET_RUN), key=len, reverse=True)
        long = [s for s in kept if len(s) >= MIN_SECRET_RUN]
        self._hashes = np.unique(np.concatenate([_window_hashes(s) for s in long])) if long else None

    def scrub(self, text: str) -> str:
        text = _CONTROLS.sub("", _ESCAPES.sub("", text))
        return self._mask(without_url_credentials(text))

    def _mask(self, text: str) -> str:
        for secret in self._short:
            text = text.replace(secret, MASK)
        if self._hashes is None or len(text) < MIN_SECRET_RUN:
            return text
        starts = np.concatenate(
            [
                np.flatnonzero(np.isin(_window_hashes(text[at : at + _BLOCK + MIN_SECRET_RUN - 1]), self._hashes)) + at
                for at in range(0, len(text), _BLOCK)
            ]
        )
        if not len(starts):
            return text
        cover = np.zeros(len(text) + 1, np.int64)
        cover[starts] += 1
        cover[starts + MIN_SECRET_RUN] -= 1
        hidden = np.concatenate(([0], (np.cumsum(cover[:-1]) > 0).astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(hidden)).reshape(-1, 2)  # [start, end) of each masked run
        pieces, at = [], 0
        for start, end in edges.tolist():
            pieces += [text[at:start], MASK]
            at = end
        return "".join(pieces) + text[at:]


def _window_hashes(text: str) -> np.ndarray:
    """A 64-bit polynomial hash of every ``MIN_SECRET_RUN``-character window of ``text`` (wrapping arithmetic)."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.uint64)
    n = len(codes) - MIN_SECRET_RUN + 1
    hashes = np.zeros(max(n, 0), np.uint64)
    for offset in range(MIN_SECRET_RUN if n > 0 else 0):
        hashes = hashes * _PRIME + codes[offset : offset + n]
    return hashes


def encodings(secret: str) -> set[str]:
    """``secret`` as it may come back from an endpoint: as it is, percent-encoded (as in a URL or a
    form, and with every byte percent-encoded), JSON-escaped, its UTF-8 in base64 (standard, url-safe, each with and
    without padding) and in hexadecimal, and each character ``\\u``-escaped (hex digits in lower and upper case)."""
    raw = secret.encode("utf-8", "surrogatepass")
    b64 = {base64.b64encode(raw).decode("ascii"), base64.urlsafe_b64encode(raw).decode("ascii")}
    escaped = {json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    every_escaped = "".join(f"\\u{unit:04x}" for unit in _utf16_units(secret))
    return (
        {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
        | escaped
        | b64
        | {text.rstrip("=") for text in b64}
        | {raw.hex(), raw.hex().upper(), every_escaped, every_escaped.upper().replace("\\U", "\\u")}
        | {"".join(f"%{byte:02x}" for byte in raw), "".join(f"%{byte:02X}" for byte in raw)}
    )


def _utf16_units(text: str) -> list[int]:
    """The UTF-16 code units of ``text``: what a ``\\uXXXX`` escape spells (a surrogate pair past U+FFFF)."""
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def without_url_credentials(text: str) -> str:
    """``text`` with ``user:password@`` of any URL in it replaced by ``***@``."""
    return _URL_CREDENTIALS.sub("://" + MASK + "@", text)
