"""Shared fixtures: a real provisioned federation on 127.0.0.1 (server, 3 sites, admins), the exported jobs, and the
order in which the suite's work is handed to the xdist workers."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from support import ADMIN, provision_demo_federation, require

from federation_tools.admin import JobOutcome, follow_job, submit_and_wait
from federation_tools.loopback import LoopbackFederation
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from jobs.segmentation.spec import CPU_DEMO, SegmentationParams
from jobs.segmentation.spec import KIND as SEGMENTATION
from provisioning.provision import Federation
from site_agent.privacy.audit import AuditLog

SHARED_FEDERATION = "running_federation"
SHARED_FIXTURES = {SHARED_FEDERATION, "fedavg_run", "segmentation_run"}  # the session fixtures on that federation


def pytest_configure(config: pytest.Config) -> None:
    """One CPU thread for torch in each test process and in every process it starts (the simulator's and the loopback
    federation's sites inherit OMP_NUM_THREADS), unless OMP_NUM_THREADS is set: the suite's processes share 2 cores,
    and torch's default (every core in every process) made them wait on each other's threads (an in-process 3-round
    PLayer-FL job of 4 sites: 96 s with 2 threads, 12 s with 1)."""
    torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.needs(missing, what)`: skipped with the reason here, failed under CI=true (support.require)."""
    for marker in item.iter_markers("needs"):
        require(*marker.args)


UNITS_FILE = "units_file"  # the key in each xdist worker's input: where it writes each test's unit of work


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _units(items: list[pytest.Item]) -> dict[str, str]:
    """Each test's unit of work: the shared federation's for a test that uses one of its fixtures, directly or through
    another fixture (the fixtures it uses, not words in its module: a test that only names one stays out), else its
    module."""
    return {item.nodeid: SHARED_FEDERATION if SHARED_FIXTURES & set(getattr(item, "fixturenames", ()))
            else _module(item.nodeid) for item in items}


@pytest.hookimpl(optionalhook=True)  # an xdist hook, called in the controller for each worker it starts
def pytest_configure_node(node: Any) -> None:
    """Tell each worker where to write the units it collected: only workers collect (and know the fixtures a test
    uses); the controller's scheduler reads them back."""
    node.workerinput[UNITS_FILE] = str(_units_file(node.config))


def _units_file(config: pytest.Config) -> Path:
    if not hasattr(config, "_units_file"):
        config._units_file = Path(tempfile.mkdtemp(prefix="xdist-units-")) / "units.json"  # type: ignore[attr-defined]
    return cast(Path, config._units_file)  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "_units_file"):
        shutil.rmtree(config._units_file.parent, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist, not called
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (scripts/test.sh), except that the tests on the shared provisioned federation are one unit:
    one worker starts that federation (not each), and the job several of its tests read runs once. The scheduler
    splits the work only once every worker has collected, so the units file is there by then."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    units_file = _units_file(config)

    class ModuleScheduling(LoadScopeScheduling):
        units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:
                self.units = json.loads(units_file.read_text()) if units_file.is_file() else {}
            return self.units.get(nodeid) or _module(nodeid)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: write each test's unit for the controller (every worker collects the same tests, so
    whichever writes last writes the same), and order the units that start federations first, then the simulator's,
    then the rest, in collection order otherwise (with --no-loadscope-reorder the workers take them in this order):
    the long units start early, so the workers finish together. Tests keep their order within a unit."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    units = _units(items)
    if UNITS_FILE in workerinput:
        written = Path(f"{workerinput[UNITS_FILE]}.{workerinput['workerid']}")
        written.write_text(json.dumps(units))
        written.replace(workerinput[UNITS_FILE])  # whole, never half-written
    tier: dict[str, int] = {}
    for item in items:
        mine = 0 if item.get_closest_marker("federation") else 1 if item.get_closest_marker("simulator") else 2
        tier[units[item.nodeid]] = min(tier.get(units[item.nodeid], mine), mine)
    items.sort(key=lambda item: tier[units[item.nodeid]])


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


@dataclass(frozen=True)
class FedAvgRun:
    """The default FedAvg job, run once on the shared federation, and what the admin saw while it ran and after."""

    outcome: JobOutcome
    site_1_stats: list[str]  # FLARE's answers to `show_stats` and `show_errors` for site-1 while the job ran there
    listed: dict[str, str]  # job id -> status, listed once it finished


def _site_answer(session: Any, command: str, timeout: float = 60.0) -> str:
    """The admin command's answer once it reaches the site: while the server's job process starts, the server
    answers "Cannot find job" itself (it has not got the job's run info from it yet)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = json.dumps(session.do_command(command))
        if "invalid_job_id" not in answer or time.monotonic() > deadline:
            return answer
        time.sleep(1.0)


@pytest.fixture(scope="session")
def fedavg_run(running_federation: RunningFederation, fedavg_job_dir: Path,
               tmp_path_factory: pytest.TempPathFactory) -> FedAvgRun:
    """One run of the default FedAvg job (5 rounds) for the tests that check its weights and what the sites kept,
    and beside it a long one (200 rounds, aborted) to ask site-1 for its stats while it surely runs there: the
    default job's 5 rounds can end at site-1 before the admin's command reaches it ("Cannot find job")."""
    session = running_federation.session()
    try:
        job_id = session.submit_job(str(fedavg_job_dir))  # first: the warm processes fork it
        long_id = session.submit_job(str(export(build_job(KIND, FedAvgLinearParams(num_rounds=200)),
                                                tmp_path_factory.mktemp("long-job"))))
        site_1 = AuditLog(running_federation.federation.kit("site-1") / "local")
        deadline = time.monotonic() + 120  # the job runs at site-1: its stats are there to read
        while not any(e["event"] == "job_started" for e in site_1.entries(long_id)) and time.monotonic() < deadline:
            time.sleep(0.2)
        stats = [_site_answer(session, f"{command} {long_id} client site-1")
                 for command in ("show_stats", "show_errors")]
        session.abort_job(long_id)
        outcome = follow_job(session, job_id, timeout=300, download=True, progress=None)
        follow_job(session, long_id, timeout=120, download=False, progress=None)
        listed = {j["job_id"]: j["status"] for j in session.list_jobs()}
    finally:
        session.close()
    return FedAvgRun(outcome, stats, listed)


SEGMENTATION_DP = SegmentationParams(num_rounds=2, dp_clip_norm=0.005, dp_noise_multiplier=1.0, min_clients=3,
                                     cross_site_evaluation=True, **CPU_DEMO)


@pytest.fixture(scope="session")
def segmentation_run(running_federation: RunningFederation, tmp_path_factory: pytest.TempPathFactory) -> JobOutcome:
    """One run of the segmentation job with client-side DP (SEGMENTATION_DP) on the shared federation: the DP test
    reads its results, the inference test segments with the model it trained."""
    job_dir = export(build_job(SEGMENTATION, SEGMENTATION_DP), tmp_path_factory.mktemp("segmentation-job"))
    session = running_federation.session()
    try:
        return submit_and_wait(session, job_dir, timeout=600, progress=None)
    finally:
        session.close()
