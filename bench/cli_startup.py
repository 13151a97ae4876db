"""Command-line start-up: each everyday command as a whole process, against `python -c pass`, interleaved.

    .venv/bin/python bench/cli_startup.py [--repeats 9] [--write-readme]

Goal (issue 9): every command under 1 s on a 2-core machine; the ratio to a bare interpreter says how much of that
is ours. Each run starts a fresh interpreter, so the page cache is warm after the first round (the first round is
discarded).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from readme_section import write_section

BIN = Path(sys.executable).parent
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "fl-job list": [str(BIN / "fl-job"), "list"],
    "fl-job --help": [str(BIN / "fl-job"), "--help"],
    "fl-job export brats-segmentation --help": [str(BIN / "fl-job"), "export", "brats-segmentation", "--help"],
    "site-agent --help": [str(BIN / "site-agent"), "--help"],
    "fl-provision --help": [str(BIN / "fl-provision"), "--help"],
}


def measure(repeats: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for round_ in range(repeats + 1):
        for name, command in COMMANDS.items():
            started = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            if round_:
                times[name].append(time.perf_counter() - started)
    return times


def table(times: dict[str, list[float]], repeats: int) -> str:
    base = statistics.median(times["python -c pass"])
    lines = [f"{repeats} interleaved runs each; Python {sys.version.split()[0]}.", "",
             "| command | median (s) | ratio to `python -c pass` | max (s) |", "| --- | ---: | ---: | ---: |"]
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(f"| `{name}` | {median:.3f} | {median / base:.1f}x | {max(values):.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--write-readme", action="store_true", help="replace the results table in bench/README.md")
    args = parser.parse_args()
    text = table(measure(args.repeats), args.repeats)
    print(text)
    if args.write_readme:
        write_section("cli_startup", text)


if __name__ == "__main__":
    main()
