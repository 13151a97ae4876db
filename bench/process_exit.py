"""How long a job process takes to exit once its work is done, with and without the quick exit
(fl_runtime/process_exit.py), interleaved.

    .venv/bin/python bench/process_exit.py [--repeats 5] [--write-readme]

Each run starts an interpreter that imports what a segmentation job process imports (FLARE's worker module, the
site's segmentation task: torch and MONAI), prints a timestamp and exits; the time from the timestamp to the end of
the process is the exit. FLARE marks a job finished only after the job processes at every site and the server have
exited, so this is paid at the end of every job (and at every stop of a site or the server).
"""

from __future__ import annotations

import subprocess
import sys
import time

from interleaved import Times, main, ratio_table

IMPORTS = "import nvflare.private.fed.app.client.worker_process, site_agent.tasks.segmentation"
ARMS = {
    "quick exit (the agent's)": f"{IMPORTS}; import time; print(time.time(), flush=True)",
    "CPython's own exit": (f"{IMPORTS}; import atexit, time; from fl_runtime import process_exit; "
                           "atexit.unregister(process_exit._collect_then_freeze); print(time.time(), flush=True)"),
}


def measure(repeats: int) -> Times:
    times: Times = {arm: [] for arm in ARMS}
    for _ in range(repeats):
        for arm, program in ARMS.items():
            done = subprocess.run([sys.executable, "-c", program], check=True, capture_output=True, text=True)
            times[arm].append(time.time() - float(done.stdout.split()[-1]))
    return times


def table(times: Times, repeats: int) -> str:
    return ratio_table(times, repeats, "CPython's own exit", "exit", 2)


if __name__ == "__main__":
    main(__doc__.splitlines()[0], "process_exit", 5, measure, table)
