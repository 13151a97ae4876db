"""Replace one benchmark's results between its markers in bench/README.md (`--write-readme`)."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).with_name("README.md")


def write_section(name: str, text: str) -> None:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    content = README.read_text()
    if start not in content:
        raise SystemExit(f"{README} has no {start} marker; add the section first")
    head, rest = content.split(start, 1)
    README.write_text(f"{head}{start}\n{text}\n{end}{rest.split(end, 1)[1]}")
