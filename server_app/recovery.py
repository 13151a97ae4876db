"""What the server does about faults that FLARE 2.9 leaves to the job: a restart mid-job, a site's job process dying.

Jobs the server was running when it died are never left RUNNING, and are resumed from their last completed round.

FLARE 2.9 does not restart a job's process when the server comes back: the job stays RUNNING in the job store with
no process anywhere, and `abort_job` answers that it is not running. This component, configured by `fl-provision`
in the server kit's `local/resources.json`, runs in the server's main process at start-up: it marks every job that
was RUNNING or DISPATCHED as FINISHED:ABNORMAL with the reason in its meta, and (unless switched off) clones the
resumable ones (jobs record it in their meta; a one-shot FedKT-CSD job is not: its admin resubmits it).
The clone has the same name and configuration, so its workflow finds the checkpoint the interrupted run wrote
after its last completed round (`server_app.checkpoint`) and goes on from there; the original's meta names the
clone (`resumed_as`) so the admin's tools can follow it.

A site's job process that ends with an exception, or never starts (FLARE's EXCEPTION and INFRASTRUCTURE_ERROR
reports), makes FLARE fail the whole job at once, even when the other sites could finish it. FLARE has no setting
for this, so the component replaces the server's handler of those reports (the rest stay FLARE's): the site is
reported dead to the job instead, and the job's workflow goes on without it while `min_clients` sites remain, as it
does for a site whose whole client died. A configuration error or an unsafe component (a site refusing the job at
start) still fails the job, as FLARE does.
"""

from __future__ import annotations

from typing import Any

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_context import FLContext
from nvflare.apis.job_def import JobMetaKey, RunStatus
from nvflare.fuel.common.exit_codes import ProcessExitCode
from nvflare.fuel.f3.cellnet.core_cell import make_reply
from nvflare.fuel.f3.cellnet.defs import CellChannel, CellChannelTopic
from nvflare.fuel.f3.cellnet.defs import ReturnCode as CellReturnCode
from nvflare.fuel.f3.message import Message
from nvflare.private.defs import CellMessageHeaderKeys, JobFailureMsgKey

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


SITE_JOB_FAILURES = (ProcessExitCode.EXCEPTION, ProcessExitCode.INFRASTRUCTURE_ERROR)


def tolerate_site_job_failures(server: Any) -> None:
    """Make `server` (FLARE's FederatedServer) report a site whose job process failed as dead to that job."""
    fail_job = server.process_job_failure

    def report_dead_site(request: Message) -> Message:
        payload = request.payload if isinstance(request.payload, dict) else {}
        token = request.get_header(CellMessageHeaderKeys.TOKEN)
        client = server.client_manager.clients.get(token) if token else None
        job_id = payload.get(JobFailureMsgKey.JOB_ID)
        if payload.get(JobFailureMsgKey.CODE) not in SITE_JOB_FAILURES or client is None or not job_id:
            return fail_job(request)  # FLARE's own handling, authentication included
        reason = payload.get(JobFailureMsgKey.REASON) or f"exit code {payload.get(JobFailureMsgKey.CODE)}"
        server.engine.job_runner.resolve_client_outcome(job_id, client.name)
        server.engine.notify_dead_job(job_id, client.name, f"its job process failed ({reason})")
        return make_reply(CellReturnCode.OK, "", None)

    server.cell.register_request_cb(channel=CellChannel.SERVER_MAIN, topic=CellChannelTopic.REPORT_JOB_FAILURE,
                                    cb=report_dead_site)


class JobRecovery(FLComponent):
    """At server start-up: interrupted jobs are closed with their reason and, with `resume`, cloned to resume;
    with `tolerate_site_failures`, a site's failed job process no longer fails the whole job."""

    def __init__(self, resume: bool = True, tolerate_site_failures: bool = True):
        super().__init__()
        self.resume = resume
        self.tolerate_site_failures = tolerate_site_failures

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type != EventType.SYSTEM_START:
            return
        engine = fl_ctx.get_engine()
        if self.tolerate_site_failures:
            tolerate_site_job_failures(engine.server)
        manager = engine.job_def_manager
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
