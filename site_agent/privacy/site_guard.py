"""Site-side admission control, configured by site IT in `local/resources.json` (a job cannot switch it off).

The rules are the site's privacy policy (`local/site_policy.json`, site_agent.privacy.policy), read afresh for every
decision. FLARE lets a `super` admin bypass the site's `authorization.json`, but it asks every component of the site
before running an admin command (EventType.AUTHORIZE_COMMAND_CHECK), whatever the role, so the guard decides:

- shell commands (FLARE's `shell_commands` category: ls, cat, head, tail, grep, pwd) are refused unless the
  admin's role is in the policy's `shell_command_roles`;
- every other admin command FLARE forwards to a site (sys_info, report_env, configure_site_log, show_stats, ...,
  policy.SITE_COMMANDS; and any command this agent does not know) is refused unless `admin_command_roles` names
  the role for it. Each attempt, allowed or refused, goes to the audit log;
- deploying a job (`submit_job`, sent by the server) is refused when its submitter's role is not accepted, it was
  built for another `site_agent` version, its declared kind or privacy (fl_contract.job_privacy) is weaker than the
  policy, or its spend would exceed the site's budget. What the job carries (code, classes, dataset keys) is
  checked next, by the site's deployer (site_agent.privacy.job_contents). The refusal reason reaches the admin in the
  job's status, and never quotes a path of the site.

When the job starts, FLARE asks the same guard, in the job's process, about every component it builds
(EventType.BEFORE_BUILD_COMPONENT): the site task must be the one the declared kind runs here (`kind_tasks`,
written by provisioning), send what the declaration says, and take the declared parameters. The policy and budget
are checked again there, and the job's spend is charged to the ledger (site_agent.privacy.ledger). The scheduler's
resource check is left alone (the job would wait in SUBMITTED forever).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.fl_exception import UnsafeComponentError
from nvflare.apis.job_def import JobMetaKey
from nvflare.apis.workspace import Workspace
from nvflare.security.security import COMMAND_CATEGORIES, CommandCategory

from fl_contract.job_privacy import JOB_KIND_KEY, SitePrivacy, release_of
from fl_contract.version import AGENT_VERSION, AGENT_VERSION_KEY
from site_agent.privacy.accounting import job_spend
from site_agent.privacy.audit import (
    COMMAND_ALLOWED,
    COMMAND_REFUSED,
    JOB_END,
    JOB_REFUSED,
    JOB_REFUSED_AT_START,
    JOB_SEEN,
    JOB_STARTED,
    AuditLog,
)
from site_agent.privacy.job_contents import class_path, declaration_refusal
from site_agent.privacy.ledger import Ledger
from site_agent.privacy.policy import (
    PolicyInForce,
    SitePolicy,
    command_refusal,
    job_refusal,
    privacy_refusal,
    role_refusal,
    shell_refusal,
)

DEPLOY_COMMAND = "submit_job"
SCHEDULER_COMMAND = "check_resources"
"""The server's scheduler asks every site for resources before it deploys; refusing it would leave jobs waiting."""
SHELL_COMMANDS = frozenset(c for c, category in COMMAND_CATEGORIES.items()
                           if category == CommandCategory.SHELL_COMMANDS)
"""FLARE's own list of the commands that read a site's files."""


def admission_refusal(role: str, job_meta: dict[str, Any], policy: SitePolicy,
                      installed_version: str = AGENT_VERSION) -> str:
    """The reason to refuse a job at deploy (the budget aside), or "" to admit it."""
    reason = role_refusal(policy, role)
    if reason:
        return reason
    job_version = job_meta.get(AGENT_VERSION_KEY)
    if job_version is None:
        return (f"the job does not record the site_agent version it was built for (meta field {AGENT_VERSION_KEY!r}); "
                "build it with the jobs/ definitions")
    if job_version != installed_version:
        return (f"the job was built for site_agent {job_version} but this site runs site_agent {installed_version}; "
                f"rebuild the job with site_agent {installed_version} or ask site IT to install {job_version}")
    try:
        return privacy_refusal(policy, SitePrivacy.from_meta(job_meta))
    except ValueError as exc:
        return str(exc)


def component_refusal(component: dict[str, Any], privacy: SitePrivacy, kind_tasks: dict[str, str]) -> str:
    """Why a component the job builds here contradicts its declaration, or "" when it does not."""
    path = class_path(component)
    if path not in kind_tasks.values():
        return ""
    reason = declaration_refusal(component, privacy, kind_tasks)
    if reason:
        return reason
    module, _, name = path.rpartition(".")
    release = release_of(getattr(importlib.import_module(module), name))
    if release != privacy.release:
        return f"the job declares that its site task sends {privacy.release!r}; {path} sends {release!r}"
    return ""


def site_relative(text: str, kit_root: Path) -> str:
    """`text` with the site's own folders written relative to its kit: what leaves the site names no local path."""
    return text.replace(f"{kit_root}/", "").replace(str(kit_root), "the site's kit")


def _local_dir(fl_ctx: FLContext) -> Path:
    return Path(Workspace(fl_ctx.get_prop(FLContextKey.WORKSPACE_ROOT)).get_site_config_dir())


def _site(fl_ctx: FLContext) -> PolicyInForce:
    return PolicyInForce.read(_local_dir(fl_ctx))


class SiteGuard(FLComponent):  # type: ignore[misc]  # FLARE ships no type information: FLComponent is Any
    """`kind_tasks`: the site task class each job kind runs, by import path (provisioning writes it from the job
    specs)."""

    def __init__(self, kind_tasks: dict[str, str]):
        super().__init__()
        self.kind_tasks = dict(kind_tasks)

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type == EventType.AUTHORIZE_COMMAND_CHECK:
            command = fl_ctx.get_prop(FLContextKey.COMMAND_NAME)
            if command == DEPLOY_COMMAND:
                self._authorize_deploy(fl_ctx)
            elif command != SCHEDULER_COMMAND:
                self._authorize_command(str(command), fl_ctx)
        elif event_type == EventType.BEFORE_BUILD_COMPONENT:
            self._check_component(fl_ctx)
        elif event_type == EventType.JOB_COMPLETED:
            AuditLog(_site(fl_ctx).records).record(JOB_END, str(fl_ctx.get_prop(FLContextKey.CURRENT_JOB_ID, "")))

    def _authorize_command(self, command: str, fl_ctx: FLContext) -> None:
        items = fl_ctx.get_prop(FLContextKey.SECURITY_ITEMS, {}) or {}
        role, user = items.get(FLContextKey.USER_ROLE, ""), items.get(FLContextKey.USER_NAME, "")
        site = _site(fl_ctx)
        if site.policy is None:
            reason = site.problem
        else:
            rule = shell_refusal if command in SHELL_COMMANDS else command_refusal
            reason = rule(site.policy, role, command)
        audit = AuditLog(site.records)
        if reason:
            audit.record(COMMAND_REFUSED, command=command, user=user, role=role, reason=reason)
            self._refuse(fl_ctx, f"refused {command!r} from {user}", reason)
        else:
            audit.record(COMMAND_ALLOWED, command=command, user=user, role=role)

    def _authorize_deploy(self, fl_ctx: FLContext) -> None:
        items = fl_ctx.get_prop(FLContextKey.SECURITY_ITEMS, {}) or {}
        role = items.get(FLContextKey.SUBMITTER_ROLE, "")
        meta: dict[str, Any] = items.get(FLContextKey.JOB_META, {}) or {}
        job_id, submitter = str(meta.get(JobMetaKey.JOB_ID, "")), str(meta.get(JobMetaKey.SUBMITTER_NAME, ""))
        site = _site(fl_ctx)
        audit = AuditLog(site.records)
        audit.record(JOB_SEEN, job_id, job_name=meta.get(JobMetaKey.JOB_NAME), job_kind=meta.get(JOB_KIND_KEY),
                     submitter=submitter, submitter_role=role, job_agent_version=meta.get(AGENT_VERSION_KEY),
                     agent_version=AGENT_VERSION)
        if site.policy is None:
            reason = site.problem
        else:
            reason = admission_refusal(role, meta, site.policy) or \
                Ledger(site.records).refusal(job_spend(SitePrivacy.from_meta(meta)), site.policy, job_id)
        if reason:  # else the deployer (privacy.job_contents) checks what the job carries and records the decision
            audit.record(JOB_REFUSED, job_id, reason=reason)
            self._refuse(fl_ctx, f"refused job {job_id}", reason)

    def _check_component(self, fl_ctx: FLContext) -> None:
        """The check on what actually runs, in the job's own process before FLARE builds the site task: the task
        built is held against the declared kind and privacy, the policy (it may have changed since deploy) is read
        again, and the spend is charged to the ledger when the job starts, not when it was only deployed."""
        component = fl_ctx.get_prop(FLContextKey.COMPONENT_CONFIG)
        if not isinstance(component, dict) or class_path(component) not in self.kind_tasks.values():
            return  # only the site task reads data and sends results
        meta = fl_ctx.get_prop(FLContextKey.JOB_META) or {}
        job_id = str(meta.get(JobMetaKey.JOB_ID) or fl_ctx.get_prop(FLContextKey.CURRENT_JOB_ID, ""))
        site = _site(fl_ctx)
        spend = None
        try:
            privacy = SitePrivacy.from_meta(meta)
            if site.policy is None:
                reason = site.problem
            else:
                reason = job_refusal(site.policy, str(meta.get(JobMetaKey.SUBMITTER_ROLE, "")), privacy) or \
                    component_refusal(component, privacy, self.kind_tasks)
                if not reason:
                    spend = job_spend(privacy)
                    reason = Ledger(site.records).charge(job_id, privacy.kind,
                                                         str(meta.get(JobMetaKey.SUBMITTER_NAME, "")),
                                                         spend, site.policy, masked=privacy.masked)
        except ValueError as exc:
            reason = str(exc)
        audit = AuditLog(site.records)
        if reason:
            audit.record(JOB_REFUSED_AT_START, job_id, reason=reason)
            self.log_error(fl_ctx, f"refused job {job_id} at start: {reason}")
            raise UnsafeComponentError(f"site policy: {reason}")
        audit.record(JOB_STARTED, job_id, epsilon=spend.epsilon if spend else None,
                     delta=spend.delta if spend else None)

    def _refuse(self, fl_ctx: FLContext, what: str, reason: str) -> None:
        self.log_error(fl_ctx, f"{what}: {reason}")
        fl_ctx.set_prop(FLContextKey.AUTHORIZATION_RESULT, False, sticky=False)
        fl_ctx.set_prop(FLContextKey.AUTHORIZATION_REASON, site_relative(reason, _local_dir(fl_ctx).parent),
                        sticky=False)


SITE_GUARD_PATH = f"{SiteGuard.__module__}.{SiteGuard.__qualname__}"
"""How `local/resources.json` names the guard: written by provisioning, checked by `site-agent check`."""
