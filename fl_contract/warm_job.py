"""The warm job process: a Python that imports torch, MONAI, FLARE's job-process modules and our task modules while
no job is waiting, then becomes the next job's process (`python -m fl_contract.warm_job --fd N`, started by
`fl_contract.job_launcher`).

It reads two JSON lines from the socket it inherits as fd N: first the modules to import ahead (it stops importing
when a job comes), then, when FLARE launches a job, the job's command line (FLARE's `python -m <worker module>
...`), environment and working folder. It applies those and runs the worker module as `__main__` with `runpy`,
exactly as `python -m` would, so the job's argument parsing, exit codes, logs and parent-process watch are FLARE's
own. Its process title becomes FLARE's
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
import select
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import setproctitle

READY = "warm job process ready"
"""Printed to stderr (the FLARE parent's log) once the modules are imported: benchmarks wait for it."""


class Channel:
    """The launcher's socket read as JSON lines, and whether something (a line, or its end) is waiting."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""

    def pending(self) -> bool:
        return b"\n" in self.buffer or bool(select.select([self.sock], [], [], 0)[0])

    def read(self) -> Any:
        """The next line, decoded; None once the launcher closed the socket without one."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)


def preload(modules: list[str], stop: Callable[[], bool]) -> tuple[int, list[str]]:
    """Import `modules` in order (FLARE's worker module first: `become_job` runs it afresh) until `stop()` says a job
    came: a job sent right after the parent started runs at once and imports the rest itself, as a cold process
    would. Returns how many were imported and the failures."""
    imported, failed = 0, []
    for name in modules:
        if stop():
            break
        try:
            importlib.import_module(name)
            imported += 1
        except Exception as exc:  # a preload is only a head start: the job imports it itself
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return imported, failed


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
    with socket.socket(fileno=args.fd) as sock:
        channel = Channel(sock)
        first = channel.read()
        if first is None:
            return
        started = time.monotonic()
        imported, failed = preload(first["preload"], channel.pending)
        for failure in failed:
            print(f"warm job process {os.getpid()}: could not import {failure} ahead; the job imports it itself",
                  file=sys.stderr, flush=True)
        print(f"{READY} (pid {os.getpid()}, {imported} of {len(first['preload'])} modules in "
              f"{time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)
        request = channel.read()
    if request is not None:
        become_job(request)


if __name__ == "__main__":
    main()
