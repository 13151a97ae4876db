"""Shared fixtures: a real provisioned federation on 127.0.0.1 (server, 3 sites, admins) and the exported jobs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import ADMIN, provision_demo_federation

from federation_tools.loopback import LoopbackFederation
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from provisioning.provision import Federation


@dataclass
class RunningFederation:
    federation: Federation
    loopback: LoopbackFederation
    workspace: Path

    def session(self, admin: str = ADMIN):
        return self.loopback.session(admin)


@pytest.fixture(scope="session")
def running_federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningFederation]:
    workspace = tmp_path_factory.mktemp("federation")
    federation = provision_demo_federation(workspace)
    loopback = LoopbackFederation(federation)
    try:
        loopback.bring_up(ADMIN)
        yield RunningFederation(federation, loopback, workspace)
    finally:
        loopback.stop(ADMIN)


@pytest.fixture(scope="session")
def fedavg_job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export(build_job(KIND, FedAvgLinearParams()), tmp_path_factory.mktemp("jobs"))
