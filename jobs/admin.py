"""The admin's side through the FLARE API: submit a job folder, follow it, download its results."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvflare.fuel.flare_api.flare_api import Session

COMPLETED = "FINISHED:COMPLETED"


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

    def refusal(self) -> str:
        """Why the job did not run, as FLARE recorded it in the job meta (empty if it ran)."""
        keys = ("schedule_history", "job_deploy_detail", "failed_clients", "status")
        return "; ".join(f"{k}: {self.meta[k]}" for k in keys if self.meta.get(k))


def submit_and_wait(session: Session, job_dir: Path, timeout: float = 600.0, download: bool = True,
                    progress: Callable[[str], None] | None = print) -> JobOutcome:
    job_id = session.submit_job(str(job_dir))
    say = progress or (lambda _: None)
    say(f"submitted {Path(job_dir).name} as job {job_id}")
    last_status = None
    deadline = time.monotonic() + timeout
    while True:
        meta = session.get_job_meta(job_id)
        status = meta.get("status", "")
        if status != last_status:
            say(f"job {job_id}: {status}")
            last_status = status
        if status.startswith("FINISHED"):
            break
        if time.monotonic() > deadline:
            session.abort_job(job_id)
            raise TimeoutError(f"job {job_id} did not finish within {timeout:.0f} s (last status {status}); it was aborted")
        time.sleep(1.0)
    result_dir = None
    if download and status == COMPLETED:
        result_dir = Path(session.download_job_result(job_id))
    return JobOutcome(job_id, status, meta, result_dir)
