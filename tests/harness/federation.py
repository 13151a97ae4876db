"""The loopback federation the tests drive: federation_tools.loopback's launcher, plus two ways of starting that
only tests need, a server whose admin server starts late (slow_start.py) and a site started as its systemd unit
starts it after a reboot (as_service.py).

Both helpers run in a process of their own by their file's path (`python -u tests/harness/slow_start.py ...`), so
the child needs nothing of pytest's sys.path; what they import of ours (site_agent) is installed.
"""

from __future__ import annotations

from pathlib import Path

from federation_tools.loopback import LoopbackFederation, Participant
from site_agent.kit.service import SERVER_MODULE

SLOW_START = Path(__file__).with_name("slow_start.py")
AS_SERVICE = Path(__file__).with_name("as_service.py")


class HarnessFederation(LoopbackFederation):
    def start_server(self, timeout: float = 60.0, wait: bool = True, entry: tuple[str, ...] = ("-m", SERVER_MODULE),
                     admin_delay_s: float = 0.0) -> Participant:
        """LoopbackFederation.start_server; a non-zero `admin_delay_s` runs slow_start.py instead of `entry`, which
        starts FLARE's admin server that much later, so that the sites knock inside FLARE's start-up window every
        time."""
        if admin_delay_s:
            entry = (str(SLOW_START), str(admin_delay_s))
        return super().start_server(timeout, wait, entry)

    def start_site_agent(self, name: str) -> Participant:
        """Start a site as its service does after a reboot: the systemd unit's `site-agent start --kit KIT
        --timeout 30` (which checks the kit and starts the FLARE client as its child), started again as the unit's
        Restart=on-failure says when it gives up (as_service.py); `wait_for_sites` waits for it to join."""
        kit = self.federation.kit(name)
        return self._run(name, kit, [self.python, "-u", str(AS_SERVICE), str(kit)])
