"""FLARE's own admin console, driven through a terminal from the admin kit as an admin types into it: log in,
submit an exported job folder, list jobs, abort the running job, download what it left (docs/admin-guide.md shows
this exchange)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
from support import ADMIN

pytestmark = pytest.mark.federation

PROMPT = "> "
CONFIRM = r"\(y/N\): "  # abort_job asks before it acts


class Console:
    """The console as `startup/fl_admin.sh` starts it (with this environment's python), in a pseudo-terminal."""

    def __init__(self, admin_kit: Path, transcript: Path):
        self.child = pexpect.spawn(sys.executable, ["-m", "nvflare.fuel.hci.tools.admin", "-m", str(admin_kit),
                                                    "-s", "fed_admin.json"],
                                   cwd=str(admin_kit), encoding="utf-8", timeout=60, dimensions=(60, 200))
        self.child.logfile_read = transcript.open("w")

    def login(self, username: str) -> str:
        self.child.expect("User Name: ")
        self.child.sendline(username)
        self.child.expect(PROMPT)
        return self.child.before

    def run(self, command: str) -> str:
        """Type a command (confirming when asked) and return what the console printed before its next prompt."""
        self.child.sendline(command)
        printed = ""
        while self.child.expect([PROMPT, CONFIRM]) == 1:
            printed += self.child.before
            self.child.sendline("y")
        return printed + self.child.before

    def wait_for_status(self, job_id: str, status: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = self.run("list_jobs")
            row = next((line for line in listed.splitlines() if job_id in line), "")
            if status in row:
                return row
            time.sleep(1)
        raise AssertionError(f"job {job_id} not {status} within {timeout:.0f} s:\n{listed}")

    def close(self) -> None:
        self.child.sendline("bye")
        self.child.expect(pexpect.EOF)
        self.child.close()


def _wait_for_round(server_log: Path, round_number: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server_log.is_file() and f"round {round_number}/" in server_log.read_text():
            return
        time.sleep(1)
    raise AssertionError(f"{server_log} did not reach round {round_number} within {timeout:.0f} s")


def test_admin_submits_lists_aborts_and_downloads_from_flare_console(running_federation, tmp_path):
    exported = subprocess.run([sys.executable, "-m", "federation_tools.job_cli", "export", "fedavg-linear",
                               "--out", str(tmp_path), "--num-rounds", "1000"],
                              capture_output=True, text=True, check=True)
    job_dir = tmp_path / "fedavg-linear"
    assert f"submit_job {job_dir}" in exported.stdout
    admin_kit = running_federation.federation.kit(ADMIN)
    server_kit = running_federation.federation.kit(running_federation.federation.server)

    def server_job_log(job_id: str) -> Path:
        return server_kit / job_id / "log.txt"

    console = Console(admin_kit, tmp_path / "console.txt")
    try:
        assert "Type ? to list commands" in console.login(ADMIN)

        submitted = console.run(f"submit_job {job_dir}")
        job_id = re.search(r"Submitted job: ([0-9a-f-]{36})", submitted).group(1)
        running = console.wait_for_status(job_id, "RUNNING", timeout=120)
        _wait_for_round(server_job_log(job_id), 2, timeout=120)  # so that the download holds completed rounds
        aborted = console.run(f"abort_job {job_id}")
        finished = console.wait_for_status(job_id, "FINISHED:ABORTED", timeout=120)
        downloaded = console.run(f"download_job {job_id}")
    finally:
        console.close()

    assert re.search(r"\| fedavg-linear +\|", running)  # the column is as wide as the longest job name listed
    assert "Abort signal has been sent to the server app." in aborted
    assert "FINISHED:ABORTED" in finished
    transfer = admin_kit / "transfer" / job_id
    assert f"content downloaded to {transfer}" in downloaded
    results = json.loads((transfer / "workspace" / "app_server" / "results.json").read_text())
    assert results["status"] == "aborted" and results["rounds"]  # the completed rounds are kept
    assert (transfer / "workspace" / "app_server" / "global_model.pt").is_file()
