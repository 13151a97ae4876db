"""The site's privacy policy: `<kit>/local/site_policy.json`, written by `fl-provision`, edited by the hospital.

The site guard reads it for every job and every admin command, so an edit applies to the next job without a
restart; a job cannot change it. A missing or malformed file refuses every job (the site fails closed).

Why not FLARE's `privacy.json` scopes: a scope only attaches task filters to jobs that name it (or the default
scope); it cannot refuse a job by kind, submitter role or declared DP, count a budget across jobs, or stop admin
shell commands. Sites can still add FLARE task-result filters there; they run in addition to this policy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fl_contract.job_privacy import DP_STATISTICS, WEIGHTS, SitePrivacy

POLICY_FILE = "site_policy.json"

SHELL_COMMANDS = ("cat", "grep", "head", "ls", "pwd", "tail")
"""FLARE's remote shell commands (its `shell_commands` category): opted in by `shell_command_roles`."""
SITE_COMMANDS = ("check_status", "configure_job_log", "configure_site_log", "delete_job", "delete_workspace",
                 "report_env", "report_resources", "report_version", "reset_errors", "restart", "show_errors",
                 "show_scopes", "show_stats", "shutdown", "sys_info")
"""FLARE 2.9's other admin commands that the server forwards to a site (nvflare/private/fed/server/*_cmd*.py):
each is refused unless `admin_command_roles` names the admin's role for it. The server's own scheduler check
(`check_resources`) and a job's deployment (`submit_job`, decided by the job rules) are not admin commands."""


def _field(default: Any, help: str) -> Any:
    if isinstance(default, (tuple, dict)):
        frozen = default
        return field(default_factory=lambda: frozen.copy() if isinstance(frozen, dict) else frozen,
                     metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class SitePolicy:
    """Every rule the site applies; the field names are the keys of site_policy.json."""

    allowed_job_kinds: tuple[str, ...] = _field((), "job kinds this site runs (fl-job list names them)")
    accepted_submitter_roles: tuple[str, ...] = _field(("project_admin", "lead"), "roles whose jobs this site runs")
    shell_command_roles: tuple[str, ...] = _field(
        (), "admin roles that may run FLARE's shell commands (ls, cat, tail, grep, head, pwd) at this site; "
            "empty: nobody, not even 'super'")
    admin_command_roles: dict[str, tuple[str, ...]] = _field(
        {}, f"admin roles that may run each other FLARE command that reaches this site, by command "
            f"({', '.join(SITE_COMMANDS)}); a command not listed is refused for every role, 'super' included")
    min_dp_noise_multiplier: float = _field(
        0.0, "jobs that send weights must clip (dp_clip_norm > 0) and add noise with at least this multiplier; "
             "0: client-side DP not required (such jobs are then recorded with no guarantee)")
    require_secure_aggregation: bool = _field(
        False, "jobs that send weights must mask them (secure_aggregation: the server sees only the sum of the "
               "sites' updates) among at least min_secure_aggregation_sites sites; false: plain weights allowed")
    max_release_epsilon: float = _field(10.0, "largest epsilon of one FedKT-CSD release")
    min_secure_aggregation_sites: int = _field(3, "fewest sites in a secure aggregation (its min_clients; also the "
                                                  "fewest masked vectors this site lets the server unmask)")
    share_case_metrics: bool = _field(
        False, "an evaluation job that asks for them (case_metrics) gets this site's per-case scores, as pseudonymised "
               "rows; false: only the means and quartiles leave")
    share_local_model: bool = _field(
        False, "a training job with cross_site_evaluation sends this site's final local model to the server and the "
               "other sites to be scored there (never with secure aggregation or client-side DP); false: only the "
               "global model is scored")
    min_cases: int = _field(5, "fewest cases an evaluation's quartiles and per-case rows are sent over; a site that "
                               "scored fewer sends its means and case count only, and says so")
    min_count: int = _field(5, "fewest cases (images) a data summary's released count may hold: a cell with fewer "
                               "is left out, and a quantile is sent only over at least this many cases")
    budget_epsilon: float = _field(30.0, "total epsilon all jobs may spend at this site (the ledger's sum)")
    budget_delta: float = _field(1e-4, "total delta all jobs may spend at this site")
    records_dir: str = _field("", "folder of the privacy ledger and audit log; empty: the kit's local/ folder")

    def to_json(self) -> dict[str, Any]:
        return {f.name: _to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def describe(self) -> str:
        """One line for `site-agent check`."""
        dp = (f"weights need DP noise multiplier >= {self.min_dp_noise_multiplier}" if self.min_dp_noise_multiplier > 0
              else "weights without client-side DP allowed")
        dp += "; weights must be masked" if self.require_secure_aggregation else "; plain weights allowed"
        commands = "; ".join(f"{c}: {', '.join(r) or 'nobody'}" for c, r in sorted(self.admin_command_roles.items()))
        return (f"kinds {', '.join(self.allowed_job_kinds) or 'none'}; "
                f"submitters {', '.join(self.accepted_submitter_roles)}; "
                f"shell commands: {', '.join(self.shell_command_roles) or 'nobody'}; other admin commands: "
                f"{commands or 'none'}; {dp}; release epsilon <= "
                f"{self.max_release_epsilon}; secure aggregation >= {self.min_secure_aggregation_sites} sites; "
                f"evaluation scores per case {'shared' if self.share_case_metrics else 'kept'}, quartiles and rows "
                f"over >= {self.min_cases} cases; data summaries count >= {self.min_count} cases per cell; "
                f"budget epsilon {self.budget_epsilon}, delta {self.budget_delta}")


class PolicyError(ValueError):
    """The policy file is missing or malformed; the message names the file and the field."""


def load_policy(local_dir: Path) -> SitePolicy:
    """The policy decides which jobs run, so a missing or malformed file, or an unknown or mistyped field, refuses every
    job with the file and field named instead of falling back to defaults the site never chose."""
    path = Path(local_dir) / POLICY_FILE
    try:
        values = json.loads(path.read_text())
    except FileNotFoundError:
        raise PolicyError(f"{path}: not found; every job is refused until it exists (re-provision the kit or copy "
                          "the federation's default policy there)") from None
    except json.JSONDecodeError as exc:
        raise PolicyError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(values, dict):
        raise PolicyError(f"{path}: expected a JSON object of policy fields")
    fields = {f.name: f for f in dataclasses.fields(SitePolicy)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise PolicyError(f"{path}: unknown fields {unknown}; the fields are {sorted(fields)}")
    defaults = SitePolicy()
    checked = {}
    for name, value in values.items():
        expected = getattr(defaults, name)
        if isinstance(expected, dict):
            value = _command_roles(path, value)
            ok = True
        elif isinstance(expected, tuple):
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            value = tuple(value) if ok else value
        elif isinstance(expected, str):
            ok = isinstance(value, str)
        elif isinstance(expected, bool):
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        if not ok:
            raise PolicyError(f"{path}: {name} is {value!r}; expected {_kind_of(expected)} "
                              f"({fields[name].metadata['help']})")
        checked[name] = value
    return SitePolicy(**checked)


def _to_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: list(v) for k, v in value.items()}
    return list(value) if isinstance(value, tuple) else value


def _command_roles(path: Path, value: Any) -> dict[str, tuple[str, ...]]:
    """`admin_command_roles` checked: FLARE command names (a typo must not silently leave a command open or shut)
    mapped to lists of role names."""
    if not isinstance(value, dict) or not all(isinstance(r, list) and all(isinstance(n, str) for n in r)
                                              for r in value.values()):
        raise PolicyError(f'{path}: admin_command_roles is {value!r}; expected an object such as '
                          '{"sys_info": ["project_admin"]} (command -> list of roles)')
    unknown = sorted(set(value) - set(SITE_COMMANDS))
    if unknown:
        shell = [c for c in unknown if c in SHELL_COMMANDS]
        raise PolicyError(f"{path}: admin_command_roles names {unknown}, which "
                          + (f"are shell commands (use shell_command_roles for {shell})" if shell else
                             f"are not FLARE commands that reach a site; they are {list(SITE_COMMANDS)}"))
    return {command: tuple(roles) for command, roles in value.items()}


def _kind_of(value: Any) -> str:
    if isinstance(value, tuple):
        return "a list of names"
    if isinstance(value, bool):
        return "true or false"
    return "a string" if isinstance(value, str) else "a number >= 0"


def write_policy(local_dir: Path, policy: SitePolicy) -> Path:
    """Write the policy readable by its owner only (it says what the site runs and who may look at it)."""
    path = Path(local_dir) / POLICY_FILE
    write_private(path, json.dumps(policy.to_json(), indent=2) + "\n")
    return path


def write_private(path: Path, text: str) -> None:
    """Write `path` as mode 0600 whatever the umask (created so, and narrowed if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


@dataclass(frozen=True)
class PolicyInForce:
    """A site's policy as its local/ folder holds it now; `problem` says why there is none (every job is then
    refused)."""

    local: Path
    policy: SitePolicy | None
    problem: str = ""

    @classmethod
    def read(cls, local_dir: Path) -> PolicyInForce:
        try:
            return cls(Path(local_dir), load_policy(local_dir))
        except PolicyError as exc:
            return cls(Path(local_dir), None, str(exc))

    @property
    def records(self) -> Path:
        """Where the ledger and audit log live: outside every job's workspace, local/ unless site IT chose a folder."""
        return Path(self.policy.records_dir) if self.policy and self.policy.records_dir else self.local


def shell_refusal(policy: SitePolicy, role: str, command: str) -> str:
    """Why an admin of `role` may not run shell `command` here, or "" to allow it."""
    if role in policy.shell_command_roles:
        return ""
    allowed = f"only roles {list(policy.shell_command_roles)}" if policy.shell_command_roles else "no role"
    return (f"this site does not allow remote shell commands: {allowed} may run {command!r} here "
            f"(shell_command_roles in its {POLICY_FILE}); role {role!r} was refused")


def command_refusal(policy: SitePolicy, role: str, command: str) -> str:
    """Why an admin of `role` may not run FLARE command `command` (not a shell command) here, or "" to allow it."""
    roles = policy.admin_command_roles.get(command, ())
    if role in roles:
        return ""
    allowed = f"only roles {list(roles)}" if roles else "no role"
    return (f"this site does not allow {command!r} from the federation: {allowed} may run it here "
            f"(admin_command_roles in its {POLICY_FILE}); role {role!r} was refused")


def role_refusal(policy: SitePolicy, role: str) -> str:
    if role in policy.accepted_submitter_roles:
        return ""
    return (f"this site accepts jobs only from roles {list(policy.accepted_submitter_roles)}; the job was submitted by "
            f"role {role!r}")


def privacy_refusal(policy: SitePolicy, privacy: SitePrivacy) -> str:
    """Why this site refuses a job with this declaration, or "" to admit it (budget aside)."""
    if privacy.kind not in policy.allowed_job_kinds:
        return f"this site runs only job kinds {list(policy.allowed_job_kinds)}; the job is a {privacy.kind!r} job"
    if privacy.release == WEIGHTS and policy.min_dp_noise_multiplier > 0 and not (
            privacy.dp_clip_norm > 0 and privacy.dp_noise_multiplier >= policy.min_dp_noise_multiplier):
        return (f"this site requires client-side DP on the weights it sends (dp_clip_norm > 0 and "
                f"dp_noise_multiplier >= "
                f"{policy.min_dp_noise_multiplier}); the job has dp_clip_norm={privacy.dp_clip_norm}, "
                f"dp_noise_multiplier={privacy.dp_noise_multiplier}")
    if privacy.release == WEIGHTS and policy.require_secure_aggregation:
        if not privacy.secure_aggregation:
            return ("this site sends weights only masked (require_secure_aggregation): submit the job with "
                    "secure_aggregation and an update_l2_bound")
        if privacy.min_clients < policy.min_secure_aggregation_sites:
            return _too_few_sites(policy, privacy)
    if privacy.release == DP_STATISTICS:
        if privacy.epsilon is None or privacy.delta is None or privacy.epsilon > policy.max_release_epsilon:
            return (f"this site allows a release epsilon of at most {policy.max_release_epsilon}; the job declares "
                    f"epsilon={privacy.epsilon}, delta={privacy.delta}")
        if privacy.min_clients < policy.min_secure_aggregation_sites:
            return _too_few_sites(policy, privacy)
    return ""


def _too_few_sites(policy: SitePolicy, privacy: SitePrivacy) -> str:
    return (f"this site joins secure aggregations of at least {policy.min_secure_aggregation_sites} sites; the job "
            f"needs only min_clients={privacy.min_clients}")


def job_refusal(policy: SitePolicy, role: str, privacy: SitePrivacy) -> str:
    """Why this site refuses a job submitted by `role` with this declaration, or "" to admit it (budget aside)."""
    return role_refusal(policy, role) or privacy_refusal(policy, privacy)
