"""The pages a consortium files with its records: one self-contained HTML file each (images embedded as PNG, no
script, no style sheet or font fetched), every value from a results.json escaped here and nowhere else."""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 72em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: right; }
th { background: #f0f0f0; } tr th:first-child { text-align: left; }
tr.federation td, tr.federation th { font-weight: bold; border-top: 2px solid #444; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; } dt { font-weight: bold; }
dd { margin: 0; font-family: monospace; overflow-wrap: anywhere; } small { color: #555; white-space: nowrap; }
"""


def text(value: object) -> str:
    return html.escape(str(value))


def definitions(pairs: Iterable[tuple[str, object]]) -> str:
    """A definition list (the model's provenance): name, then its value in monospace."""
    return "<dl>" + "".join(f"<dt>{text(k)}</dt><dd>{text(v)}</dd>" for k, v in pairs) + "</dl>"


def table(head: Sequence[str], rows: Iterable[tuple[str, Sequence[str]]], total: str = "") -> str:
    """A table of rows (name, cells already rendered by `cell`); the row named `total` is set off as the pooled one."""
    lines = ["<table><tr>" + "".join(f"<th>{text(h)}</th>" for h in head) + "</tr>"]
    for name, cells in rows:
        css = ' class="federation"' if total and name == total else ""
        lines.append(f"<tr{css}><th>{text(name)}</th>{''.join(cells)}</tr>")
    return "\n".join(lines) + "</table>"


def cell(value: float | None, digits: int, detail: str = "") -> str:
    """A number (or "-" for none) with an optional small second line."""
    if value is None or value != value:  # missing or NaN
        return "<td>-</td>"
    return f"<td>{value:.{digits}f}{f'<br><small>{text(detail)}</small>' if detail else ''}</td>"


def image(png: bytes, alt: str) -> str:
    return f'<img alt="{text(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def bullets(items: Sequence[str], empty: str) -> str:
    """A list of already-escaped items, or `empty` (plain text) when there are none."""
    return "<ul>" + ("".join(f"<li>{item}</li>" for item in items) or f"<li>{text(empty)}</li>") + "</ul>"


def document(title: str, sections: Iterable[str]) -> str:
    """The whole page: `sections` are HTML fragments made with the functions above."""
    body = "\n".join(sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{text(title)}</title>
<style>{STYLE}</style></head><body>
<h1>{text(title)}</h1>
{body}
</body></html>
"""
