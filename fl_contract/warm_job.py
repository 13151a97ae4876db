"""The warm job process: a Python that imports torch, MONAI, FLARE's job-process modules and our task modules while
no job is waiting, then becomes the next job's process (`python -m fl_contract.warm_job --fd N`, started by
`fl_contract.job_launcher`).

It reads two JSON lines from the socket it inherits as fd N: first the modules to import ahead, then, when FLARE
launches a job, the job's command line (FLARE's `python -m <worker module> ...`), environment and working folder.
It applies those and runs the worker module as `__main__` with `runpy`, exactly as `python -m` would, so the job's
argument parsing, exit codes, logs and parent-process watch are FLARE's own. Its process title becomes FLARE's
command line, so `ps` (and tools that find job processes by it) see the job as they see FLARE's. A socket closed
with no job (the FLARE parent stopped) ends it.

It never runs code a job brought: what it imports ahead is the kit's list, read before any job is known (the kit's
launcher also refuses to hand it a job with a `custom/` folder). A module that fails to import ahead is reported on
stderr and left to the job, which then imports it, or fails, as a cold process would.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import socket
import sys
import time
from typing import Any

import setproctitle

READY = "warm job process ready"
"""Printed to stderr (the FLARE parent's log) once the modules are imported: benchmarks wait for it."""


def preload(modules: list[str]) -> list[str]:
    """Import `modules` (FLARE's worker module among them: `become_job` runs it afresh); returns the failures."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a preload is only a head start: the job imports it itself
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed


def become_job(request: dict[str, Any]) -> None:
    """Apply the job's working folder, environment and command line (`python -m MODULE ARGS...`) and run MODULE as
    `__main__`; its `sys.exit(rc)` ends this process with FLARE's return code. The imported worker module leaves
    `sys.modules` first (its dependencies stay): `runpy` warns about a `__main__` module found already imported."""
    argv: list[str] = request["argv"]
    module = argv[2]
    setproctitle.setproctitle(" ".join(argv))  # first: it needs the environment block it started with
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.modules.pop(module, None)
    sys.argv = [argv[0], *argv[3:]]  # runpy puts the module's file in argv[0], as `python -m` does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fd", type=int, required=True, help="the socket the launcher talks to this process on")
    args = parser.parse_args()
    with socket.socket(fileno=args.fd) as channel, channel.makefile("rb") as lines:
        first = lines.readline()
        if not first:
            return
        started = time.monotonic()
        modules = json.loads(first)["preload"]
        failed = preload(modules)
        for failure in failed:
            print(f"warm job process {os.getpid()}: could not import {failure} ahead; the job imports it itself",
                  file=sys.stderr, flush=True)
        print(f"{READY} (pid {os.getpid()}, {len(modules) - len(failed)} modules in "
              f"{time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)
        request = lines.readline()
    if request:
        become_job(json.loads(request))


if __name__ == "__main__":
    main()
