"""Jobs the server was running when it died: never left RUNNING, resumed from their last completed round.

FLARE 2.9 does not restart a job's process when the server comes back: the job stays RUNNING in the job store with
no process anywhere, and `abort_job` answers that it is not running. This component, configured by `fl-provision`
in the server kit's `local/resources.json`, runs in the server's main process at start-up: it marks every job that
was RUNNING or DISPATCHED as FINISHED:ABNORMAL with the reason in its meta, and (unless switched off) clones the
resumable ones (jobs record it in their meta; a one-shot FedKT-CSD job is not: its admin resubmits it).
The clone has the same name and configuration, so its workflow finds the checkpoint the interrupted run wrote
after its last completed round (`server_app.checkpoint`) and goes on from there; the original's meta names the
clone (`resumed_as`) so the admin's tools can follow it.
"""

from __future__ import annotations

from typing import Any

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_context import FLContext
from nvflare.apis.job_def import JobMetaKey, RunStatus

from fl_contract.job_meta import RESUMABLE_KEY, RESUMED_FROM_KEY

INTERRUPTED = (RunStatus.RUNNING, RunStatus.DISPATCHED)
REASON_KEY = "interrupted"
RESUMED_AS_KEY = "resumed_as"
REASON = "the server stopped while the job was running"
_RUN_STATE_KEYS = {key.value for key in JobMetaKey} - {
    JobMetaKey.JOB_NAME.value, JobMetaKey.JOB_FOLDER_NAME.value, JobMetaKey.DEPLOY_MAP.value,
    JobMetaKey.RESOURCE_SPEC.value, JobMetaKey.MIN_CLIENTS.value, JobMetaKey.MANDATORY_CLIENTS.value,
    JobMetaKey.STUDY.value, JobMetaKey.SUBMITTER_NAME.value, JobMetaKey.SUBMITTER_ORG.value,
    JobMetaKey.SUBMITTER_ROLE.value, JobMetaKey.APPROVALS.value, JobMetaKey.DATA_STORAGE_FORMAT.value,
    JobMetaKey.CONTENT_LOCATION.value, JobMetaKey.RESULT_LOCATION.value,
}


def clone_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The meta a resumed copy keeps: what the job is and who submitted it (FLARE's own and our keys such as the
    agent version the sites check), not the interrupted run's state."""
    kept = {k: v for k, v in meta.items() if k not in _RUN_STATE_KEYS and k not in (REASON_KEY, RESUMED_AS_KEY)}
    kept[JobMetaKey.CLONED_FROM.value] = meta[JobMetaKey.JOB_ID.value]
    kept[RESUMED_FROM_KEY] = meta.get(RESUMED_FROM_KEY) or meta[JobMetaKey.JOB_ID.value]  # the first run
    return kept


class JobRecovery(FLComponent):
    """At server start-up: interrupted jobs are closed with their reason and, with `resume`, cloned to resume."""

    def __init__(self, resume: bool = True):
        super().__init__()
        self.resume = resume

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type != EventType.SYSTEM_START:
            return
        manager = fl_ctx.get_engine().job_def_manager
        for job in manager.get_jobs_by_status(list(INTERRUPTED), fl_ctx):
            meta = dict(job.meta)
            update: dict[str, Any] = {REASON_KEY: REASON}
            if self.resume and meta.get(RESUMABLE_KEY):
                clone = manager.clone(from_jid=job.job_id, meta=clone_meta(meta), fl_ctx=fl_ctx)
                update[RESUMED_AS_KEY] = clone.get(JobMetaKey.JOB_ID.value)
            else:
                update[REASON_KEY] = f"{REASON}; it does not resume by itself: submit it again"
            manager.update_meta(job.job_id, update, fl_ctx)
            manager.set_status(job.job_id, RunStatus.FINISHED_ABNORMAL, fl_ctx)
            resumed = f"; resumed as job {update[RESUMED_AS_KEY]}" if RESUMED_AS_KEY in update else ""
            self.log_warning(fl_ctx, f"job {job.job_id} ({meta.get(JobMetaKey.JOB_NAME.value)}): {update[REASON_KEY]}{resumed}")
