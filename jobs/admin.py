"""The admin's side through the FLARE API: submit a job folder, follow it, download its results."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvflare.fuel.flare_api.flare_api import Session

from server_app.recovery import REASON_KEY, RESUMED_AS_KEY
from server_app.results import RESULTS_FILE

COMPLETED = "FINISHED:COMPLETED"
DOWNLOADABLE = (COMPLETED, "FINISHED:ABORTED", "FINISHED:EXECUTION_EXCEPTION")


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    status: str
    meta: dict[str, Any]
    result_dir: Path | None

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED

    def server_app_dir(self) -> Path:
        if self.result_dir is None:
            raise RuntimeError(f"job {self.job_id} has no downloaded results (status {self.status})")
        return self.result_dir / "workspace" / "app_server"

    def results(self) -> dict[str, Any]:
        """The workflow's results.json when it was downloaded (empty otherwise)."""
        path = self.result_dir / "workspace" / "app_server" / RESULTS_FILE if self.result_dir else None
        return dict(json.loads(path.read_text())) if path is not None and path.is_file() else {}

    def refusal(self) -> str:
        """Why the job did not finish: the workflow's own reason (naming each site's outcome) when it recorded one,
        and what FLARE recorded in the job meta (refusals at deploy, failed sites)."""
        keys = ("schedule_history", "job_deploy_detail", "failed_clients", "status")
        reasons = [str(self.results()["error"])] if self.results().get("error") else []
        return "; ".join(reasons + [f"{k}: {self.meta[k]}" for k in keys if self.meta.get(k)])


def submit_and_wait(session: Session, job_dir: Path, timeout: float = 600.0, download: bool = True,
                    progress: Callable[[str], None] | None = print) -> JobOutcome:
    job_id = session.submit_job(str(job_dir))
    (progress or (lambda _: None))(f"submitted {Path(job_dir).name} as job {job_id}")
    return follow_job(session, job_id, timeout, download, progress)


def follow_job(session: Session, job_id: str, timeout: float = 600.0, download: bool = True,
               progress: Callable[[str], None] | None = print) -> JobOutcome:
    """Wait for the job to finish, following it when the server resumed it as another job after a restart, and
    download what it left (results.json records the completed rounds and the reason of an early stop)."""
    say = progress or (lambda _: None)
    last_status = None
    deadline = time.monotonic() + timeout
    while True:
        meta = session.get_job_meta(job_id)
        status = meta.get("status", "")
        if status != last_status:
            say(f"job {job_id}: {status}")
            last_status = status
        if status.startswith("FINISHED") and meta.get(RESUMED_AS_KEY):
            say(f"job {job_id}: {meta.get(REASON_KEY, 'interrupted')}; resumed as job {meta[RESUMED_AS_KEY]}")
            job_id, last_status = str(meta[RESUMED_AS_KEY]), None
            continue
        if status.startswith("FINISHED"):
            break
        if time.monotonic() > deadline:
            session.abort_job(job_id)
            raise TimeoutError(f"job {job_id} did not finish within {timeout:.0f} s (last status {status}); it was aborted")
        time.sleep(1.0)
    result_dir = _download(session, job_id) if download and status in DOWNLOADABLE else None
    return JobOutcome(job_id, status, meta, result_dir)


def _download(session: Session, job_id: str) -> Path | None:
    try:
        return Path(session.download_job_result(job_id))
    except Exception:  # a job that never ran has nothing to download; its meta says why
        return None
