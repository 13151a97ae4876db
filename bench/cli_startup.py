"""Command-line start-up: each everyday command as a whole process, against `python -c pass`, interleaved.

    .venv/bin/python bench/cli_startup.py [--repeats 9] [--write-readme]

Goal (issue 9): every command under 1 s on a 2-core machine; the ratio to a bare interpreter says how much of that
is ours. Each run starts a fresh interpreter, so the page cache is warm after the first round (the first round is
discarded).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from interleaved import Times, main, ratio_table

BIN = Path(sys.executable).parent
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "fl-job list": [str(BIN / "fl-job"), "list"],
    "fl-job --help": [str(BIN / "fl-job"), "--help"],
    "fl-job export brats-segmentation --help": [str(BIN / "fl-job"), "export", "brats-segmentation", "--help"],
    "site-agent --help": [str(BIN / "site-agent"), "--help"],
    "fl-provision --help": [str(BIN / "fl-provision"), "--help"],
}


def measure(repeats: int) -> Times:
    times: Times = {name: [] for name in COMMANDS}
    for round_ in range(repeats + 1):
        for name, command in COMMANDS.items():
            started = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            if round_:
                times[name].append(time.perf_counter() - started)
    return times


def table(times: Times, repeats: int) -> str:
    return ratio_table({f"`{name}`": values for name, values in times.items()}, repeats, "`python -c pass`",
                       "command", 3)


if __name__ == "__main__":
    main(__doc__.splitlines()[0], "cli_startup", 9, measure, table)
