"""A quick interpreter exit for every process that imports the agent (FLARE's job processes and parents, the CLIs).

Why: at shutdown CPython collects garbage again and again while it tears the modules down, each pass walking every
object still alive; with torch and MONAI imported that is millions of objects, seconds of exit on a small machine
and more under load (bench/process_exit.py measures it against a frozen heap). FLARE marks a job finished only after
its job processes have exited, at every site and the server, so each job's end waited that long, and so did every
stop of a site or server.

`install` registers, once, an exit handler that collects what is garbage then (so cyclic garbage is still finalised:
files flushed and closed) and freezes the rest (`gc.freeze`: the collector skips frozen objects). The other exit
handlers still run (logging's flush, FLARE's communicator stop); objects made after the freeze are collected as usual.
"""

from __future__ import annotations

import atexit
import gc

_installed = False


def _collect_then_freeze() -> None:
    gc.collect()
    gc.freeze()


def install() -> None:
    """Register the exit handler (idempotent)."""
    global _installed
    if not _installed:
        atexit.register(_collect_then_freeze)
        _installed = True
