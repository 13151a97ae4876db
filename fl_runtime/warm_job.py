"""The warm job process: a fork server that imports torch, MONAI, FLARE's job-process modules and our task modules
once, then forks each job's process from itself (`python -m fl_runtime.warm_job --fd N`, started by
`fl_runtime.job_launcher`), so no job process imports them again.

It talks JSON lines on the socket it inherits as fd N. The launcher sends first the modules to import ahead, then,
for each job FLARE launches, the job's command line (FLARE's `python -m <worker module> ...`), environment, working
folder and the modules of the classes the job names. It imports those of the job's modules it has not imported yet
(a job sent while it imports ahead waits only for the module being imported, not for the rest of the list), forks,
answers with the child's pid, and reports the child's exit code when it ends; the rest of the list is imported
while no job waits. The child starts a session of its own (FLARE kills a job's process group), applies the job's
working folder and environment and runs the worker module as `__main__` with `runpy`, exactly as `python -m` would,
so the job's argument parsing, exit codes, logs and parent-process watch are FLARE's own; its process title becomes
FLARE's command line, so `ps` (and tools that find job processes by it) see the job as they see FLARE's.

A fork copies only the forking thread: this process runs no thread of its own and no torch computation, so no lock
or thread pool is caught half-way (numpy's and scipy's OpenBLAS pools, started by their import, rebuild themselves
in the child). A socket closed (the FLARE parent stopped or died) ends it at once, running jobs or not: each job's
FLARE worker watches its parent process, this one, and stops when it is gone, as it does when FLARE's parent goes.

It never runs code a job brought: what it imports ahead is the kit's list, read before any job is known, and a job's
modules are those of the kit's list the job's config names (the kit's launcher refuses to hand it a job with a
`custom/` folder). A module that fails to import is reported on stderr and left to the job, which then imports it,
or fails, as a cold process would.
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
from typing import Any

import setproctitle

READY = "warm job process ready"
"""Printed to stderr (the FLARE parent's log) once the modules are imported: benchmarks wait for it."""

EXIT_POLL_S = 0.25
"""How often the server looks for ended jobs while it has any (an ended job's code reaches FLARE this late)."""


class Channel:
    """The socket between launcher and warm process, as JSON lines each way."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""

    def pending(self, timeout: float | None = 0.0) -> bool:
        """Whether a line (or the socket's end) is waiting, after waiting up to `timeout` s (None: until one is)."""
        return b"\n" in self.buffer or bool(select.select([self.sock], [], [], timeout)[0])

    def read(self) -> Any:
        """The next line, decoded; None once the other side closed the socket without one."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")


class ForkServer:
    """The warm process's state: the modules still to import ahead and the jobs it forked that have not ended."""

    def __init__(self, channel: Channel, modules: list[str]):
        self.channel = channel
        self.waiting = list(modules)
        self.total = len(modules)
        self.failed = 0
        self.children: set[int] = set()
        self.started = time.monotonic()

    def import_module(self, name: str) -> None:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a preload is only a head start: the job imports it itself
            self.failed += 1
            print(f"warm job process {os.getpid()}: could not import {name} ahead ({type(exc).__name__}: {exc}); "
                  "the job imports it itself", file=sys.stderr, flush=True)

    def import_next(self) -> None:
        """Import the next module of the list; say so on stderr once the list is done."""
        self.import_module(self.waiting.pop(0))
        if not self.waiting:
            print(f"{READY} (pid {os.getpid()}, {self.total - self.failed} of {self.total} modules in "
                  f"{time.monotonic() - self.started:.1f} s)", file=sys.stderr, flush=True)

    def report_ended(self) -> None:
        """Reap the jobs that ended and send each one's exit code (negative: the signal that ended it)."""
        while self.children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            self.children.discard(pid)
            self.channel.send({"exited": pid, "code": os.waitstatus_to_exitcode(status)})

    def serve(self) -> dict[str, Any] | None:
        """Import ahead while idle, fork each job the launcher sends and report its end. Returns the job's request
        in the forked child, None in this process once the launcher closed the socket."""
        while True:
            self.report_ended()
            if self.waiting and not self.channel.pending():
                self.import_next()
                continue
            if not self.channel.pending(EXIT_POLL_S if self.children else None):
                continue
            request: dict[str, Any] | None = self.channel.read()
            if request is None:
                return None
            for name in request["modules"]:
                if name in self.waiting:
                    self.waiting.remove(name)
                    self.import_module(name)
            try:
                pid = self.fork()
            except OSError as exc:
                self.channel.send({"job": request["job"], "error": f"fork failed: {exc}"})
                continue
            if pid == 0:
                return request
            self.children.add(pid)
            self.channel.send({"job": request["job"], "pid": pid})

    def fork(self) -> int:
        """Fork a child in a session of its own, returning once it is in it: FLARE may kill the job's process group
        as soon as it has the pid, and until then the child is in this process's group."""
        settled, in_session = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(settled)
            os.close(in_session)
            raise
        if pid == 0:
            os.close(settled)
            os.setsid()
            os.close(in_session)
            return 0
        os.close(in_session)
        os.read(settled, 1)  # the child's end closes once it is in its session (or once it died)
        os.close(settled)
        return pid


def become_job(request: dict[str, Any]) -> None:
    """In the forked child, in a session of its own: the job's working folder, environment and command line
    (`python -m MODULE ARGS...`), and MODULE run as `__main__`; its `sys.exit(rc)` ends this process with FLARE's
    return code. The imported worker module leaves `sys.modules` first (its dependencies stay): `runpy` warns about a
    `__main__` module found already imported. numpy's global generator is reseeded from the system, as a fresh
    process's is, so that no two jobs share its draws (Python's `random` reseeds itself at a fork)."""
    argv: list[str] = request["argv"]
    module = argv[2]
    setproctitle.setproctitle(" ".join(argv))  # before the environment changes: it needs the block it started with
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
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
        request = ForkServer(channel, first["preload"]).serve() if first is not None else None
    if request is not None:  # the forked child, its copy of the socket closed
        become_job(request)


if __name__ == "__main__":
    main()
