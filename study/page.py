"""The page the replication report is written on: its style, a badge per verdict, sections and figures.

:class:`Page` collects the body (sections with stable ids, a note where a part is missing) and the
figures (each a ``<div class=figure data-figure=NAME>`` with its own small script), then
:meth:`Page.document` wraps them with the style and plotly.js, inlined once in the head, so the file
opens offline. :func:`e` escapes every text that came from a file, and :meth:`Page.link` writes a link to
a file only as a relative path with every byte but letters, digits, ``-._~/`` percent-encoded, so no
folder name (``javascript:…``, ``//host``, ``\\host``) can make it a link with a scheme or a host.

Example:
    >>> from study.verdicts import Verdict
    >>> print(verdict_html(Verdict(2, "not run", "no evaluation", "probe models eval")))
    <span class="verdict v-not-run" data-claim="2" data-status="not run">not run</span>
    <span class=why>(probe models eval)</span>
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from study.verdicts import Verdict

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1280px;color:#222;line-height:1.4;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f6f6f6}code,pre{background:#f4f4f4;padding:0 3px}pre{padding:.6em;white-space:pre-wrap}
nav a{margin-right:.8em}.note{color:#555;font-size:.92em}.missing{color:#8a4b00}
.verdict{font-weight:600;padding:1px 6px;border-radius:4px;white-space:nowrap}
.v-supported{background:#d9f2d9}.v-not-supported{background:#eee}.v-contradicted{background:#f7d4d4}
.v-cannot-be-tested-here{background:#fff0c2}.v-not-run{background:#e3e9f7}
.card{border:1px solid #888;border-radius:6px;padding:.5em 1em;margin:.8em 0}.up{color:#a11}.down{color:#116}
.figure{margin:.6em 0 1.2em}.vcell{min-width:9em;max-width:32em;word-break:break-word}.why{font-size:.92em}
details{margin:.4em 0 1em}summary{cursor:pointer;color:#1f4f8f}
"""


def e(value: Any) -> str:
    """Any value as escaped HTML text."""
    return html.escape(str(value))


def status_class(status: str) -> str:
    """'cannot be tested here' -> 'v-cannot-be-tested-here', the badge's colour."""
    return "v-" + status.replace(" ", "-")


def verdict_html(verdict: Verdict, parenthesis: bool = True) -> str:
    """The status as a badge, then its parenthesis ('cannot be tested here (why)', 'not run (command)')
    as plain text."""
    badge = (
        f'<span class="verdict {status_class(verdict.status)}" data-claim="{verdict.claim}" '
        f'data-status="{e(verdict.status)}">{e(verdict.status)}</span>'
    )
    rest = verdict.describe()[len(verdict.status) :].strip() if parenthesis else ""
    return badge + (f" <span class=why>{e(rest)}</span>" if rest else "")


class Page:
    """Collects the body and the figures (each a div plus its script); ``where``:
    the folder the file goes to (for relative links)."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.parts: list[str] = []
        self.figures: list[str] = []

    def add(self, *parts: str) -> None:
        self.parts.extend(parts)

    def figure(self, name: str, fig: Any) -> None:
        if fig is None:
            return
        self.figures.append(name)
        body = fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=f"fig-{name}",
            config={"displaylogo": False, "responsive": True},
        )
        self.add(f'<div class=figure data-figure="{e(name)}">{body}</div>')

    def section(self, key: str, title: str) -> None:
        self.add(f'<section id="{key}"><h2>{e(title)}</h2>')

    def end(self) -> None:
        self.add("</section>")

    def link(self, target: Path) -> str:
        """A link to the file ``target``: its path relative to the page's folder, percent-encoded (module doc)."""
        relative = os.path.relpath(target.resolve(), self.where.resolve())
        return f'<a href="{e(relative_href(relative))}">{e(relative)}</a>'

    def absent(self, what: str, command: str) -> None:
        """A part the run lacks, said where it would have been, with the command that adds it."""
        self.add(f"<p class=missing>Not in this run: {e(what)}. Add it with <code>{e(command)}</code>.</p>")

    def document(self, title: str) -> str:
        """The whole file: style and plotly.js (once) in the head, then the body."""
        from plotly.offline import get_plotlyjs

        return "\n".join(
            [
                f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(title)}</title>"
                f"<style>{STYLE}</style>",
                f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>',
                *self.parts,
                f"<p class=note>figures: {len(self.figures)}</p></body></html>",
            ]
        )


def seconds(value: Any) -> str:
    """'45 s', '12.5 min', or '—' for no number."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    return f"{value / 60:.1f} min" if value >= 90 else f"{value:.0f} s"


def relative_href(relative: str) -> str:
    """A relative path as an ``href`` that cannot carry a scheme or a host.

    >>> relative_href("javascript:alert(1)/plots/x.html")
    'javascript%3Aalert%281%29/plots/x.html'
    >>> relative_href("/x")
    './/x'
    """
    href = quote(os.fsencode(relative), safe="/")
    return f"./{href}" if href.startswith("/") else href
