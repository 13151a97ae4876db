"""Stopping a FLARE participant and every process it started, by PID: used by `site-agent start` and the loopback
launcher alike. FLARE's job workers run in sessions of their own and outlive a client killed alone."""

from __future__ import annotations

import os
import signal

import psutil


def stop_process_tree(group_leader: int, processes: list[psutil.Process], grace: float) -> None:
    """SIGTERM to `group_leader`'s process group and to each of `processes`; SIGKILL to what is left after `grace`."""
    try:
        os.killpg(group_leader, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in processes:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace)
    kill_processes(alive)


def kill_processes(processes: list[psutil.Process]) -> None:
    """SIGKILL each process (gone ones are skipped) and wait for them to end."""
    for proc in processes:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=10.0)
