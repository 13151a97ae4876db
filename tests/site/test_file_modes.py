"""Owner-only files whatever the umask: what provisioning and `site-agent configure` write, and the `site-agent check`
row that fails, with the fix, on anything in a kit readable by group or others."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import SITES

from federation_tools.loopback import free_port
from provisioning.provision import Federation, customise, load_template, provision
from site_agent.kit.preflight import FAIL, OK, check_file_modes
from site_agent.kit.site_config import write_site_config
from site_agent.kit.start import FlareClient
from site_agent.kit.startup import SiteKit
from site_agent.privacy.policy import SitePolicy, write_policy


@pytest.fixture(scope="module")
def federation(tmp_path_factory) -> Iterator[Federation]:
    umask = os.umask(0o022)  # what most shells start with
    try:
        workspace = tmp_path_factory.mktemp("modes")
        yield provision(customise(load_template(None), sites=SITES[:1], port=free_port()), workspace,
                        server_storage=workspace / "server-storage")
    finally:
        os.umask(umask)


def _open_paths(root: Path) -> list[str]:
    return [str(p) for p in [root, *root.rglob("*")] if not p.is_symlink() and p.stat().st_mode & 0o077]


def test_provisioning_leaves_every_kit_the_ca_state_and_the_server_storage_owner_only(federation):
    workspace = federation.kits_dir.parents[1]

    assert (workspace / "server-storage").is_dir()
    assert _open_paths(workspace) == []
    assert (federation.kit("site-1") / "startup" / "start.sh").stat().st_mode & 0o700 == 0o700  # still runnable


def test_configure_and_policy_edits_write_owner_only_files(federation):
    umask = os.umask(0o022)
    try:
        config = write_site_config(federation.kit("site-1"), {"linear": "/data/linear"})
        policy = write_policy(federation.kit("site-1") / "local", SitePolicy())
    finally:
        os.umask(umask)

    assert config.stat().st_mode & 0o777 == 0o600 and policy.stat().st_mode & 0o777 == 0o600


def test_the_check_row_names_what_others_can_read_and_the_fix(federation, tmp_path):
    kit = SiteKit.open(federation.kit("site-1"))
    assert check_file_modes(kit).status == OK

    job_log = kit.root / "job-1" / "log.txt"
    job_log.parent.mkdir(mode=0o700)
    job_log.write_text("case 12 is broken")
    job_log.chmod(0o644)
    records = tmp_path / "records"
    records.mkdir(mode=0o755)
    write_policy(kit.root / "local", SitePolicy(records_dir=str(records)))
    try:
        result = check_file_modes(kit)
    finally:
        write_policy(kit.root / "local", SitePolicy())
        job_log.chmod(0o600)

    assert result.status == FAIL
    assert "2 files or folders readable by group or others" in result.detail
    assert str(job_log) in result.detail and str(records) in result.detail
    assert f"chmod -R go-rwx {kit.root} {records}" in result.fix and "umask 077" in result.fix


def test_site_agent_start_runs_flare_with_umask_077(federation):
    """The real FLARE client, started as `site-agent start` starts it from a shell with umask 022 (no server runs:
    the client writes its log, then gives up)."""
    kit = SiteKit.open(federation.kit("site-1"))
    log = kit.root / "log.txt"
    log.unlink(missing_ok=True)
    umask = os.umask(0o022)
    try:
        client = FlareClient(kit, "site_1")
    finally:
        os.umask(umask)
    try:
        deadline = time.monotonic() + 60
        while not log.is_file() and client.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        client.stop(grace=2.0)

    assert log.is_file() and log.stat().st_mode & 0o777 == 0o600
