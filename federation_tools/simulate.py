"""Run an exported job folder in FLARE's simulator under the same policy a provisioned site enforces.

The simulator copies `<workspace>/local/` to every simulated site and the server, so the union of the site and
server allow-lists goes there (enforced), with one `site_agent.json` whose dataset paths use `{site_name}` and,
for jobs whose server needs local models, the server's `server_app.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from jobs.registry import server_allow_list, site_allow_list
from server_app.server_config import write_server_config
from site_agent.kit.site_config import write_site_config


@dataclass(frozen=True)
class SimulationRun:
    returncode: int
    workspace: Path

    @property
    def server_app_dir(self) -> Path:
        return self.workspace / "server" / "simulate_job" / "app_server"

    @property
    def server_log(self) -> Path:
        return self.workspace / "server" / "log.txt"

    def aborted(self) -> bool:
        """FLARE's simulator can exit 0 after an abort: look for it in the server log."""
        if not self.server_log.is_file():
            return True  # the server never started
        log = self.server_log.read_text(errors="replace")
        return self.returncode != 0 or "Abort signal" in log or "panic" in log.lower()


def write_simulation_policy(workspace: Path, datasets: dict[str, str], server_models: dict[str, str] | None = None,
                            device: str = "auto") -> None:
    local = Path(workspace) / "local"
    local.mkdir(parents=True, exist_ok=True)
    resources = {
        "format_version": 2,
        "class_list_enforcement_mode": "enforce",
        "class_allow_list": sorted(set(site_allow_list()) | set(server_allow_list())),
    }
    (local / "resources.json").write_text(json.dumps(resources, indent=2))
    write_site_config(workspace, datasets, device)
    if server_models:
        write_server_config(workspace, server_models, device)


def site_threads(num_sites: int) -> int:
    """CPU threads for each simulated site: this machine's cores shared among the sites, which all train on it at once
    (torch's default, every core for every site, makes the sites wait on each other's threads)."""
    return max(1, len(os.sched_getaffinity(0)) // num_sites)


def simulate(job_dir: Path, workspace: Path, sites: list[str], datasets: dict[str, str],
             server_models: dict[str, str] | None = None, timeout: float | None = None) -> SimulationRun:
    """Run `job_dir` with simulated `sites`; `datasets` maps dataset keys to folders (may contain `{site_name}`),
    `server_models` the server's model keys to folders (e.g. FedKT-CSD's autoencoder). Each site gets
    `site_threads` CPU threads unless OMP_NUM_THREADS is set. FLARE's simulator runs with its race between the
    sites' start-ups closed (federation_tools.flare_simulator)."""
    workspace = Path(workspace).resolve()
    write_simulation_policy(workspace, datasets, server_models)
    command = [sys.executable, "-m", "federation_tools.flare_simulator", str(job_dir), "-w", str(workspace),
               "-c", ",".join(sites), "-n", str(len(sites)), "-t", str(len(sites))]
    env = {"OMP_NUM_THREADS": str(site_threads(len(sites))), **os.environ}
    completed = subprocess.run(command, timeout=timeout, check=False, env=env)
    return SimulationRun(completed.returncode, workspace)
