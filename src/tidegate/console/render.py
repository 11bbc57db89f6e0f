"""HTML building blocks for the console's pages: escaping, tables, forms, the layout.

Everything that comes from Kafka (topic and group names, keys, values, headers, member
ids, error messages) reaches the page only through `esc()` — there is no other way to
put text into a page here: `table()` escapes its cells unless a cell is `Markup`
(HTML built by these helpers themselves). Record keys and values are shown as text,
JSON or hex (`show_bytes`), truncated to `LIMITS["show_bytes"]`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, urlencode

from tidegate.console.params import LIMITS

__all__ = ["Markup", "esc", "fmt_bytes", "form", "layout", "link", "show_bytes", "table"]

FORMATS = ("text", "json", "hex")
NAV = (("/", "Overview"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
       ("/transactions", "Transactions"))


class Markup(str):
    """HTML that is already safe (built by this module); `esc()` leaves it alone."""


def esc(value: object) -> Markup:
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def url(path: str, **query: object) -> str:
    q = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(q) if q else "")


def seg(name: str) -> str:
    """A name as one URL path segment."""
    return quote(name, safe="")


def link(href: str, text: object, cls: str = "") -> Markup:
    c = f' class="{esc(cls)}"' if cls else ""
    return Markup(f'<a href="{esc(href)}"{c}>{esc(text)}</a>')


def badge(text: object, kind: str) -> Markup:
    return Markup(f'<span class="badge {esc(kind)}">{esc(text)}</span>')


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, id: str = "",
          empty: str = "none") -> Markup:
    body = []
    for r in rows:
        body.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(headers)}" class="empty">{esc(empty)}</td></tr>')
    ident = f' id="{esc(id)}"' if id else ""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return Markup(f"<table{ident}><thead><tr>{head}</tr></thead><tbody>"
                  + "".join(body) + "</tbody></table>")


def form(action: str, fields: Mapping[str, object], button: str, *, csrf: str,
         cls: str = "", method: str = "post") -> Markup:
    """A form of hidden fields and one button; POST forms carry the CSRF token."""
    hidden = dict(fields)
    if method == "post":
        hidden["csrf"] = csrf
    inputs = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
                     for k, v in hidden.items())
    c = f' class="{esc(cls)}"' if cls else ""
    return Markup(f'<form method="{method}" action="{esc(action)}"{c}>{inputs}'
                  f'<button type="submit">{esc(button)}</button></form>')


def fmt_bytes(n: int) -> str:
    if n < 0:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def fmt_ms(ms: int) -> str:
    if ms < 0:
        return "-"
    s = ms / 1000
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def opt(n: int) -> str:
    return "-" if n < 0 else str(n)


def show_bytes(data: bytes | None, fmt: str) -> Markup:
    """A key or value as text (UTF-8, undecodable bytes replaced), pretty JSON (text if
    it is not JSON) or hex, escaped, cut at LIMITS["show_bytes"]."""
    if data is None:
        return Markup('<span class="null">null</span>')
    cap = LIMITS["show_bytes"]
    cut = len(data) > cap
    part = data[:cap]
    if fmt == "hex":
        text = part.hex(" ")
    else:
        text = part.decode("utf-8", errors="replace")
        if fmt == "json" and not cut:
            try:
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError:
                pass
    more = f' <span class="cut">(… {len(data) - cap} more bytes)</span>' if cut else ""
    return Markup(f'<pre class="v">{esc(text)}</pre>{more}')


def layout(title: str, body: Markup, *, active: str = "", read_only: bool = False,
           live: str = "", flash: str = "", flash_kind: str = "ok",
           after: Markup | None = None) -> str:
    """The whole page. `live`: a URL whose HTML replaces #live (`body`) every 1.5 s;
    `after` (forms, the chart) stays put."""
    nav = "".join(
        f'<a href="{href}" class="{"on" if href == active else ""}">{esc(text)}</a>'
        for href, text in NAV)
    ro = '<span class="badge ro">read-only</span>' if read_only else ""
    msg = f'<p class="flash {esc(flash_kind)}" id="flash">{esc(flash)}</p>' if flash else ""
    attr = f' data-live="{esc(live)}"' if live else ""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(title)} · Tidegate console</title>"
            f'<link rel="stylesheet" href="/static/console.css">'
            f'<script src="/static/console.js" defer></script></head><body>'
            f'<header><b>Tidegate</b> console {ro}<nav>{nav}</nav></header>'
            f'<main><h1>{esc(title)}</h1>{msg}<div id="live"{attr}>{body}</div>'
            f"{after or ''}</main>"
            f"</body></html>")
