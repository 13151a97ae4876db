"""FLARE's job scheduler, naming the sites a waiting job waits for.

FLARE's `DefaultJobScheduler` records why it could not start a job in the job's meta (`schedule_history`), as a
count: "connected sites (2) < min_sites (3)". The admin then cannot tell which site is missing. This subclass,
configured by `fl-provision` as the server kit's `job_scheduler` (with its retry interval), adds the names: the
sites the job is deployed to (every site the project lists, from `local/participants.json`, for a job deployed to
all) that are not connected now. `fl-job submit` prints that entry while the job waits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvflare.apis.fl_context import FLContext
from nvflare.apis.job_def import ALL_SITES, SERVER_SITE_NAME, Job
from nvflare.app_common.job_schedulers.job_scheduler import DefaultJobScheduler
from nvflare.private.fed.utils.fed_utils import extract_participants

from server_app.admission import PARTICIPANTS_FILE, ParticipantsList

SCHEDULED = "scheduled"


def expected_sites(deploy_map: dict[str, Any], listed: frozenset[str]) -> set[str]:
    """The sites a job is deployed to: those its deploy map names, every listed site for FLARE's '@ALL'."""
    expected: set[str] = set()
    for deployments in deploy_map.values():
        for site in extract_participants(deployments):
            if site.upper() == ALL_SITES:
                expected |= listed
            elif site != SERVER_SITE_NAME:
                expected.add(site)
    return expected


class NamingJobScheduler(DefaultJobScheduler):
    """DefaultJobScheduler whose "cannot schedule" entries end with "; not connected: site-3, ..."."""

    def __init__(self, participants_file: str = PARTICIPANTS_FILE, **scheduler_args: Any):
        super().__init__(**scheduler_args)
        self.participants_file = participants_file
        self._participants: ParticipantsList | None = None

    def _missing_sites(self, job: Job, fl_ctx: FLContext) -> list[str]:
        engine = fl_ctx.get_engine()
        if self._participants is None:
            local = Path(engine.get_workspace().get_site_config_dir())
            self._participants = ParticipantsList(local / self.participants_file, self.logger.warning)
        participants = self._participants.current()
        listed = participants.sites if participants is not None else frozenset()
        connected = {client.name for client in engine.get_clients()}
        return sorted(expected_sites(job.deploy_map or {}, listed) - connected)

    def _update_schedule_history(self, job: Job, result: str, fl_ctx: FLContext) -> None:
        if result != SCHEDULED:
            missing = self._missing_sites(job, fl_ctx)
            if missing:
                result = f"{result}; not connected: {', '.join(missing)}"
        super()._update_schedule_history(job, result, fl_ctx)
