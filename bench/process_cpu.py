"""Where a command's CPU time goes, by the kind of process that spent it: the kits' warm job processes importing
ahead, sites' and the server's job processes, the FLARE parents, the simulator, and the rest.

    .venv/bin/python bench/process_cpu.py [--write-readme] -- bash scripts/test.sh

It runs the command and reads every process's CPU time (user + system, /proc/PID/stat) once a second until the
command ends; a process that lived less than a second between two reads is missed, and one that ends between reads
loses at most its last second. A process that has ended but is not yet reaped (a zombie) shows no command line: it
keeps the role it had (before, its whole CPU went to "everything else", which so held most of the job processes'
and simulator sites' CPU). A warm job process (`fl_runtime.warm_job`) imports ahead and forks each job's
process, whose title turns into FLARE's command line: the warm process's CPU counts as importing ahead, a forked
process's from the moment it took its title as the job's. The suite's four workers keep the 2 cores 92% busy, so
the suite's time follows its CPU: this says which part of that to cut.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from readme_section import write_section

TICKS = os.sysconf("SC_CLK_TCK")
WARM = "warm job processes importing ahead"
ROLES = (  # (text in the command line, role), the first that matches
    ("fl_runtime.warm_job", WARM),
    ("nvflare.private.fed.app.client.worker_process", "sites' job processes"),
    ("nvflare.private.fed.app.server.runner_process", "the server's job processes"),
    ("nvflare.private.fed.app.client.client_train", "FLARE site clients (parents)"),
    ("nvflare.private.fed.app.server.server_train", "FLARE servers (parents)"),
    ("simulator", "the FLARE simulator and its sites"),
    ("fl-job", "the FLARE simulator and its sites"),
    ("[pytest-xdist", "pytest workers (tests that run in the test process)"),  # the title xdist gives them
    ("site-agent", "site-agent commands"),
    ("site_agent.cli", "site-agent commands"),
    ("fl-provision", "fl-provision"),
    ("mypy", "ruff and mypy"),
    ("ruff", "ruff and mypy"),
    ("link_emulator", "the userspace link emulator"),
    ("-m pytest", "the pytest parent"),
    ("fl-demo", "fl-demo"),
)
OTHER = "everything else (other tools, the system)"
KERNEL = "kernel threads (no command line)"


def role_of(command: str) -> str:
    if not command.strip():
        return KERNEL
    return next((role for text, role in ROLES if text in command), OTHER)


@dataclass
class Seen:
    """One process (pid and start time) as last read: its CPU since the first read, and its CPU while warm."""

    role: str
    command: str = ""
    cpu: float = 0.0
    warm: float = 0.0
    base: float = 0.0


@dataclass
class Sampler:
    processes: dict[tuple[str, str], Seen] = field(default_factory=dict)

    def read(self, first: bool = False) -> None:
        """Read every process once; on the first read, what each process had spent already is left out."""
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as stat_file:
                    stat = stat_file.read()
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # ended between the listing and the read
            fields = stat[stat.rfind(")") + 2:].split()
            cpu = (int(fields[11]) + int(fields[12])) / TICKS
            key = (pid, fields[19])  # the pid and its start time: a reused pid is another process
            seen = self.processes.setdefault(key, Seen(role_of(command), base=cpu if first else 0.0))
            if command.strip():  # a process that has ended (a zombie) has none: it keeps the role it had
                seen.role, seen.command = role_of(command), command
            seen.cpu = cpu - seen.base
            if seen.role == WARM:
                seen.warm = seen.cpu

    def totals(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for seen in self.processes.values():
            totals[WARM] = totals.get(WARM, 0.0) + seen.warm
            if seen.role != WARM:
                totals[seen.role] = totals.get(seen.role, 0.0) + seen.cpu - seen.warm
        return totals

    def others(self, count: int) -> list[tuple[float, str]]:
        """The `count` commands (first 160 characters) that spent most CPU among the processes of no named role."""
        by_command: dict[str, float] = {}
        for seen in self.processes.values():
            if seen.role == OTHER:
                command = seen.command[:160]
                by_command[command] = by_command.get(command, 0.0) + seen.cpu
        return sorted(((cpu, command) for command, cpu in by_command.items()), reverse=True)[:count]


def measure(command: list[str]) -> tuple[Sampler, float, int]:
    """Run `command`, reading every process once a second; (the sampler, wall seconds, exit code)."""
    sampler = Sampler()
    sampler.read(first=True)
    started = time.monotonic()
    process = subprocess.Popen(command)
    while process.poll() is None:
        time.sleep(1.0)
        sampler.read()
    return sampler, time.monotonic() - started, process.returncode


def table(totals: dict[str, float], wall: float, command: list[str]) -> str:
    total = sum(totals.values())
    rows = [f"`{' '.join(command)}`: {wall:.0f} s wall, {total:.0f} CPU-s on {os.cpu_count()} cores "
            f"({total / wall / (os.cpu_count() or 1):.0%} busy); Python {sys.version.split()[0]}.", "",
            "| process | CPU-s | share |", "| --- | ---: | ---: |"]
    for role, cpu in sorted(totals.items(), key=lambda item: -item[1]):
        if cpu >= 0.5:
            rows.append(f"| {role} | {cpu:.0f} | {cpu / total:.0%} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-readme", action="store_true", help="replace the results table in bench/README.md")
    parser.add_argument("--others", type=int, default=0, metavar="N",
                        help="also list the N commands that spent most CPU among the processes of no named role")
    parser.add_argument("command", nargs="+", help="the command to measure (after --)")
    args = parser.parse_args()
    sampler, wall, code = measure(args.command)
    text = table(sampler.totals(), wall, args.command)
    print(text)
    for cpu, command in sampler.others(args.others):
        print(f"{cpu:8.1f} CPU-s  {command}")
    if code != 0:
        raise SystemExit(f"the command exited with {code}; nothing written")
    if args.write_readme:
        write_section("process_cpu", text)


if __name__ == "__main__":
    main()
