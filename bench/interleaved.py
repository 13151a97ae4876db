"""What the benchmarks that time whole processes share: a table of medians with each row's ratio to a baseline row,
and the command line that prints it (and with --write-readme puts it between its markers in bench/README.md)."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

from readme_section import write_section

Times = dict[str, list[float]]


def ratio_table(times: Times, repeats: int, baseline: str, column: str, digits: int) -> str:
    """Markdown: each row's median, its ratio to the `baseline` row's median and its maximum, in seconds."""
    base = statistics.median(times[baseline])
    lines = [f"{repeats} interleaved runs each; Python {sys.version.split()[0]}.", "",
             f"| {column} | median (s) | ratio to {baseline} | max (s) |", "| --- | ---: | ---: | ---: |"]
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.{digits}f} | {median / base:.2f}x | {max(values):.{digits}f} |")
    return "\n".join(lines)


def main(description: str, section: str, repeats: int, measure: Callable[[int], Times],
         table: Callable[[Times, int], str]) -> None:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--write-readme", action="store_true", help="replace the results table in bench/README.md")
    args = parser.parse_args()
    text = table(measure(args.repeats), args.repeats)
    print(text)
    if args.write_readme:
        write_section(section, text)
