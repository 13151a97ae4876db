"""How long a job process takes to exit once its work is done, with and without the quick exit
(fl_contract/process_exit.py), interleaved.

    .venv/bin/python bench/process_exit.py [--repeats 5] [--write-readme]

Each run starts an interpreter that imports what a segmentation job process imports (FLARE's worker module, the
site's segmentation task: torch and MONAI), prints a timestamp and exits; the time from the timestamp to the end of
the process is the exit. FLARE marks a job finished only after the job processes at every site and the server have
exited, so this is paid at the end of every job (and at every stop of a site or the server).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from readme_section import write_section

IMPORTS = "import nvflare.private.fed.app.client.worker_process, site_agent.tasks.segmentation"
ARMS = {
    "quick exit (the agent's)": f"{IMPORTS}; import time; print(time.time(), flush=True)",
    "CPython's own exit": (f"{IMPORTS}; import atexit, time; from fl_contract import process_exit; "
                           "atexit.unregister(process_exit._collect_then_freeze); print(time.time(), flush=True)"),
}


def measure(repeats: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(repeats):
        for arm, program in ARMS.items():
            done = subprocess.run([sys.executable, "-c", program], check=True, capture_output=True, text=True)
            times[arm].append(time.time() - float(done.stdout.split()[-1]))
    return times


def table(times: dict[str, list[float]], repeats: int) -> str:
    base = statistics.median(times["CPython's own exit"])
    lines = [f"{repeats} interleaved runs each; Python {sys.version.split()[0]}.", "",
             "| exit | median (s) | ratio to CPython's own | max (s) |", "| --- | ---: | ---: | ---: |"]
    for arm, values in times.items():
        median = statistics.median(values)
        lines.append(f"| {arm} | {median:.2f} | {median / base:.2f}x | {max(values):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write-readme", action="store_true", help="replace the results table in bench/README.md")
    args = parser.parse_args()
    text = table(measure(args.repeats), args.repeats)
    print(text)
    if args.write_readme:
        write_section("process_exit", text)


if __name__ == "__main__":
    main()
