"""Site-side admission control, configured by site IT in `local/resources.json` (a job cannot switch it off).

Refuses to deploy a job when
- its submitter's role is not one the site accepts: FLARE lets a `super` admin bypass the site's
  `authorization.json`, so the site must check the role itself;
- it was built for another `site_agent` version than the one installed here: job arguments must match the
  installed classes, and the site runs exactly the agent its IT installed and checked.

It acts only on the deploy command (`submit_job` sent by the server); the scheduler's resource check must pass,
or the job waits in SUBMITTED forever. The refusal reason reaches the admin in the job's status.
"""

from __future__ import annotations

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext

from fl_contract.version import AGENT_VERSION, AGENT_VERSION_KEY

DEPLOY_COMMAND = "submit_job"


def admission_refusal(role: str, job_meta: dict, accepted_roles: list[str], installed_version: str = AGENT_VERSION) -> str:
    """The reason to refuse a job, or "" to admit it."""
    if role not in accepted_roles:
        return f"this site accepts jobs only from roles {accepted_roles}; the job was submitted by role {role!r}"
    job_version = job_meta.get(AGENT_VERSION_KEY)
    if job_version is None:
        return f"the job does not record the site_agent version it was built for (meta field {AGENT_VERSION_KEY!r}); build it with the jobs/ definitions"
    if job_version != installed_version:
        return (f"the job was built for site_agent {job_version} but this site runs site_agent {installed_version}; "
                f"rebuild the job with site_agent {installed_version} or ask site IT to install {job_version}")
    return ""


class SiteGuard(FLComponent):
    def __init__(self, accepted_submitter_roles: list[str] | None = None):
        super().__init__()
        self.accepted_submitter_roles = list(accepted_submitter_roles or ["project_admin", "lead"])

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type != EventType.AUTHORIZE_COMMAND_CHECK:
            return
        if fl_ctx.get_prop(FLContextKey.COMMAND_NAME) != DEPLOY_COMMAND:
            return
        items = fl_ctx.get_prop(FLContextKey.SECURITY_ITEMS, {}) or {}
        role = items.get(FLContextKey.SUBMITTER_ROLE, "")
        meta = items.get(FLContextKey.JOB_META, {}) or {}
        reason = admission_refusal(role, meta, self.accepted_submitter_roles)
        if reason:
            self.log_error(fl_ctx, f"refused job {meta.get('job_id', '')}: {reason}")
            fl_ctx.set_prop(FLContextKey.AUTHORIZATION_RESULT, False, sticky=False)
            fl_ctx.set_prop(FLContextKey.AUTHORIZATION_REASON, reason, sticky=False)


SITE_GUARD_PATH = f"{SiteGuard.__module__}.{SiteGuard.__qualname__}"
"""How `local/resources.json` names the guard: written by provisioning, checked by `site-agent check`."""
