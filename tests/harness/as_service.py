"""Run a kit the way the systemd unit `site-agent service` writes runs it, on a machine without systemd, for tests
(HarnessFederation.start_site_agent in tests/harness/federation.py runs it by its path):

    python tests/harness/as_service.py KIT

The unit's own `ExecStart` runs, and ends the way systemd's `Restart=on-failure` would end it: an exit 0 or a
`RestartPreventExitStatus` (a refused kit) stays down, any other exit starts it again after `RestartSec`. A site
whose `site-agent start` gives up on a slow registration (exit 69) therefore comes back as it does at a hospital,
instead of staying down as a single start does. SIGTERM or SIGKILL to this process and its children (the loopback
federation's stop and kill, by PID) end it all.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from site_agent.kit.service import unit_for


def unit_settings(unit: str) -> dict[str, list[str]]:
    """A unit file's `Key=value` lines, every value of each key in order (comments and sections left out)."""
    settings: dict[str, list[str]] = {}
    for line in unit.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            settings.setdefault(key, []).append(value)
    return settings


@dataclass(frozen=True)
class Service:
    """What systemd reads from the unit to start the kit and to decide on a restart."""

    command: list[str]
    restart_s: float
    final_statuses: frozenset[int]

    @classmethod
    def for_kit(cls, kit: Path) -> Service:
        _, unit = unit_for(kit)
        settings = unit_settings(unit)
        if settings.get("Restart") != ["on-failure"]:
            raise ValueError(f"the unit for {kit} does not say Restart=on-failure; this runner follows only that")
        prevented = [int(status) for value in settings.get("RestartPreventExitStatus", []) for status in value.split()]
        return cls(shlex.split(settings["ExecStart"][0]), float(settings["RestartSec"][0]),
                   frozenset([0, *prevented]))


def run(service: Service) -> int:
    """Start the command, and again after `restart_s` whenever it fails (a signal that ends the command alone, as
    the kernel's OOM killer does, is a failure too); the first final status is returned."""
    while True:
        status = subprocess.call(service.command)
        if status in service.final_statuses:
            return status
        print(f"as_service: {service.command[0]} exited with {status}; starting it again in {service.restart_s:g} s "
              "(Restart=on-failure)", file=sys.stderr, flush=True)
        time.sleep(service.restart_s)


def main() -> None:
    sys.exit(run(Service.for_kit(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
