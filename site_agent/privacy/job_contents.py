"""What a job carries to this site, checked when the server deploys it, before any of it is written or built.

FLARE 2.9's deploy path at a site (`nvflare/private/fed/client/training_cmds.py`, DeployProcessor): the site's guard
is asked first (EventType.AUTHORIZE_COMMAND_CHECK), with the job's meta only (site_agent.privacy.site_guard); then the
site's `app_deployer` component (SystemComponents.APP_DEPLOYER, configured in `local/resources.json`) receives the
meta and the app as zip bytes. `SiteDeployer` is that component: it reads the zip's listing and configuration in
memory, so a refused job leaves nothing at the site, and only an admitted app goes on to FLARE's own AppDeployer.
Its reason goes back to the server, which records it in the job's meta (`job_deploy_detail`) within seconds.

Whoever submits, `super` included: FLARE lets `super` past the byoc right and, for a job with a `custom/` folder,
skips the class allow-list; here a job that carries code is refused for every role, so the allow-list applies to
every job that runs. Refused at deploy, each reason naming the file, class or key:
- any file but `config/*.json` (and FLARE's signature files, which the admin client adds to every folder): a
  `custom/` folder, a script anywhere;
- a launcher spec that chooses an image or a Python path (FLARE counts those as custom code);
- every class the site configuration names that the site's allow-list does not name exactly, and a component
  named by short class name (FLARE resolves those by scanning packages);
- a site task other than the one the declared kind runs here, or arguments that differ from the declaration;
- a dataset key the site does not map in its `site_agent.json`.

Left to the start of the job (site_guard, EventType.BEFORE_BUILD_COMPONENT): what the site task class sends (its
RELEASE attribute). Reading it imports the task's module, and with it torch, into the client's main process, which
would then carry ~400 MB for its lifetime. A job whose meta misstates it is refused there, before any data is read.
No reason quotes a site-local path.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nvflare.apis.app_validation import AppValidationKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.workspace import Workspace
from nvflare.lighter.tool_consts import NVFLARE_SIG_FILE, NVFLARE_SUBMITTER_CRT_FILE
from nvflare.private.fed.utils.app_authz import AppAuthzService
from nvflare.private.fed.utils.app_deployer import AppDeployer

from fl_contract.job_params import job_params
from fl_contract.job_privacy import PARAMETERS, SitePrivacy
from fl_contract.params import JobParams, ParameterError
from site_agent.kit.site_config import SiteConfig, SiteConfigError
from site_agent.privacy.accounting import job_spend
from site_agent.privacy.audit import JOB_ACCEPTED, JOB_REDEPLOYED, JOB_REFUSED, AuditLog
from site_agent.privacy.policy import PolicyInForce

CLIENT_CONFIG = "config/config_fed_client.json"
SIGNATURE_FILES = frozenset({NVFLARE_SIG_FILE, NVFLARE_SUBMITTER_CRT_FILE})
_CONFIG_FILE = re.compile(r"config/[^/]+\.json")
_SHOWN = 5


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def file_refusal(names: list[str]) -> str:
    """The app's entries that are not configuration (relative to the app folder), named, or ""."""
    extra = sorted(n for n in names if not n.endswith("/") and not _CONFIG_FILE.fullmatch(n)
                   and n.rpartition("/")[2] not in SIGNATURE_FILES)
    if not extra:
        return ""
    return (f"the job carries files other than configuration ({_listed(extra)}); this site runs only installed "
            "code: a job may hold meta.json and app/config/*.json, never a custom/ folder or a script")


def launcher_refusal(job_meta: dict[str, Any], site_name: str) -> str:
    """A launcher spec that would run code the site did not install (FLARE's own rule for custom code)."""
    if AppAuthzService.derive_local_app_info({}, job_meta, site_name).get(AppValidationKey.BYOC):
        return ("the job's meta chooses a container image, Python path or node command (launcher_spec) for this "
                "site; this site runs only its installed agent")
    return ""


def components(config: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, dict) of every dict in a FLARE app configuration that names a class, at any depth."""
    if isinstance(config, dict):
        if any(key in config for key in ("path", "class_path", "name")) and where.rpartition(".")[2] != "args":
            yield where or "(top level)", config
        for key, value in config.items():
            yield from components(value, f"{where}.{key}" if where else str(key))
    elif isinstance(config, list):
        for index, value in enumerate(config):
            yield from components(value, f"{where}[{index}]")


def class_path(component: dict[str, Any]) -> str:
    """The class a component names (FLARE reads `path`, then `class_path`); "" for one named by short name."""
    return str(component.get("path") or component.get("class_path") or "")


def class_refusal(config: dict[str, Any], allow_list: set[str]) -> str:
    """Every class the configuration names that the allow-list does not name exactly, with where, or ""."""
    problems = []
    for where, component in components(config):
        path = class_path(component)
        if not path and ("args" in component or "id" in component):
            problems.append(f"{where} names class {component.get('name')!r} by short name (use its import path)")
        elif path and path not in allow_list:
            problems.append(f"class {path} ({where})")
    if not problems:
        return ""
    return f"not in this site's class allow-list: {_listed(problems)}"


def declaration_refusal(component: dict[str, Any], privacy: SitePrivacy, kind_tasks: dict[str, str]) -> str:
    """Why a site task component contradicts the job's declaration (kind and parameters), or ""."""
    path = class_path(component)
    expected = kind_tasks.get(privacy.kind)
    if expected != path:
        return f"the job declares kind {privacy.kind!r}, whose site task here is {expected!r}, but runs {path!r}"
    args = component.get("args", {})
    if not isinstance(args, dict) or args.get("kind") != privacy.kind or not isinstance(args.get("params"), dict):
        return (f"the site task's arguments do not carry the declared kind {privacy.kind!r} and its parameters; "
                "rebuild the job with the jobs/ definitions")
    try:
        params = job_params(privacy.kind, args["params"], JobParams)
    except ParameterError as exc:
        return f"the job's parameters are not valid here: {exc}"
    actual = SitePrivacy.declare(privacy.kind, privacy.release, dataclasses.asdict(params))
    differ = [f"{n}={getattr(actual, n)!r} (declared {getattr(privacy, n)!r})" for n in PARAMETERS
              if getattr(actual, n) != getattr(privacy, n)]
    return f"the site task's parameters differ from the job's declaration: {', '.join(differ)}" if differ else ""


def dataset_refusal(args: dict[str, Any], keys: list[str], datasets: dict[str, str]) -> str:
    """Dataset arguments whose value is not a key this site maps, named, or "" (an empty one is unused)."""
    unmapped = [f"{name}={args[name]!r}" for name in keys
                if args.get(name) not in (None, "") and (not isinstance(args[name], str) or args[name] not in datasets)]
    if not unmapped:
        return ""
    return (f"dataset key {', '.join(unmapped)} is not one this site maps (jobs name keys that site IT maps to "
            "folders in local/site_agent.json; never paths)")


def site_task_refusal(config: dict[str, Any], privacy: SitePrivacy, kind_tasks: dict[str, str],
                      dataset_keys: list[str], datasets: dict[str, str]) -> str:
    """The executors must be the declared kind's site task, as declared, reading only keys the site maps."""
    executors = [e.get("executor", {}) for e in config.get("executors", []) if isinstance(e, dict)]
    if not executors:
        return "the job's site configuration has no executor"
    for executor in executors:
        reason = declaration_refusal(executor, privacy, kind_tasks) or \
            dataset_refusal(executor.get("args", {}).get("params", {}), dataset_keys, datasets)
        if reason:
            return reason
    return ""


def app_refusal(app_data: bytes, privacy: SitePrivacy, local_dir: Path, kind_tasks: dict[str, str],
                dataset_keys: dict[str, list[str]]) -> str:
    """Every reason to refuse this app at this site, joined, or "" (the site's files are read, nothing written)."""
    try:
        with zipfile.ZipFile(io.BytesIO(app_data)) as archive:
            names = archive.namelist()
            raw = archive.read(CLIENT_CONFIG) if CLIENT_CONFIG in names else None
    except zipfile.BadZipFile:
        return "the job's app is not a readable archive"
    problems = [file_refusal(names)]
    try:
        config = json.loads(raw) if raw is not None else None
    except ValueError as exc:
        config, problems = None, [*problems, f"{CLIENT_CONFIG} is not valid JSON ({exc})"]
    if raw is None:
        problems.append(f"the job has no {CLIENT_CONFIG}")
    if isinstance(config, dict):
        problems += [class_refusal(config, _allow_list(local_dir)),
                     site_task_refusal(config, privacy, kind_tasks, dataset_keys.get(privacy.kind, []),
                                       _datasets(local_dir))]
    elif config is not None:
        problems.append(f"{CLIENT_CONFIG} is not a JSON object")
    return "; ".join(p for p in problems if p)


def _allow_list(local_dir: Path) -> set[str]:
    try:
        return set(json.loads((local_dir / "resources.json").read_text()).get("class_allow_list", []))
    except (OSError, ValueError):
        return set()  # refuses every class; `site-agent check` names the broken file to site IT


def _datasets(local_dir: Path) -> dict[str, str]:
    try:
        return SiteConfig.for_kit(local_dir.parent).datasets
    except SiteConfigError:
        return {}  # no key is mapped; `site-agent check` names the broken file to site IT


class SiteDeployer(AppDeployer):  # type: ignore[misc]  # FLARE ships no type information: AppDeployer is Any
    """The site's `app_deployer`: refuses a job that carries code or contradicts the site, then deploys with FLARE's.

    `kind_tasks`: the site task each job kind runs; `dataset_keys`: the site task arguments of each kind that are
    dataset keys (provisioning writes both from the job specs).
    """

    def __init__(self, kind_tasks: dict[str, str], dataset_keys: dict[str, list[str]]):
        super().__init__()
        self.kind_tasks = dict(kind_tasks)
        self.dataset_keys = {kind: list(keys) for kind, keys in dataset_keys.items()}

    def deploy(self, workspace: Workspace, job_id: str, job_meta: dict[str, Any], app_name: str, app_data: bytes,
               fl_ctx: FLContext) -> str:
        """Refuses at deploy, before FLARE unpacks the job, one that carries code or contradicts the site's policy, and
        writes every decision to the site's audit log: FLARE's own logs at the site do not say why a job was refused."""
        local_dir = Path(workspace.get_site_config_dir())
        site = PolicyInForce.read(local_dir)
        spend = None
        try:
            privacy = SitePrivacy.from_meta(job_meta)
            reason = launcher_refusal(job_meta, workspace.site_name) or \
                app_refusal(app_data, privacy, local_dir, self.kind_tasks, self.dataset_keys)
            spend = None if reason else job_spend(privacy)
        except ValueError as exc:
            reason = str(exc)
        audit = AuditLog(site.records)
        if reason:
            audit.record(JOB_REFUSED, job_id, reason=reason)
            return f"refused at deploy: {reason}"
        kept = keep_interrupted_run(Path(workspace.get_run_dir(job_id)))
        if kept is not None:
            audit.record(JOB_REDEPLOYED, job_id, kept=kept.name)
        error = str(super().deploy(workspace, job_id, job_meta, app_name, app_data, fl_ctx) or "")
        if error:
            audit.record(JOB_REFUSED, job_id, reason=error)
            return error
        audit.record(JOB_ACCEPTED, job_id, epsilon=spend.epsilon if spend else None,
                     delta=spend.delta if spend else None)
        return ""


def keep_interrupted_run(run_dir: Path) -> Path | None:
    """A job deployed here again (the server's answer to this site's restart mid-job) finds the folder its earlier
    job process ran in, whose log says why it stopped; FLARE's deployer would delete it. It is kept beside, as
    `<job id>.before-restart-N`; returns where (None when there was none)."""
    if not run_dir.is_dir():
        return None
    n = 1
    while (kept := run_dir.with_name(f"{run_dir.name}.before-restart-{n}")).exists():
        n += 1
    run_dir.rename(kept)
    return kept


SITE_DEPLOYER_PATH = f"{SiteDeployer.__module__}.{SiteDeployer.__qualname__}"
"""How `local/resources.json` names the deployer (component id `app_deployer`)."""
