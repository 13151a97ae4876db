"""`fl-provision`: the federation lead's one command. Startup kits (mutual-TLS certificates, roles) for the server,
every site and every admin, each with the security policy of `provisioning.policy` written into its `local/`.

Certificates and kits are made by FLARE's own `nvflare provision`; this command only chooses the participants and
then writes, per kit: `local/resources.json` (exact class allow-list in enforce mode; the warm job launcher of
`fl_runtime.job_launcher`; sites: the site guard; server: job and snapshot storage inside the federation's
workspace), `local/authorization.json` (no role has the byoc right) and, at sites, the default privacy policy
`local/site_policy.json`. Everything it writes, private keys included (the root CA's is in
`<workspace>/<project>/state/cert.json`), is left readable by its owner only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jobs.registry import server_allow_list
from provisioning.policy import (
    COMM_CONFIG,
    DEFAULT_ACCEPTED_ROLES,
    SERVER_ADMIN_TIMEOUT_S,
    SERVER_HEARTBEAT_TIMEOUT_S,
    SERVER_JOB_LAUNCHER,
    authorization_policy,
    job_launcher_component,
    job_recovery_component,
    job_scheduler,
    site_admission_component,
    site_kit_policy,
)
from server_app.admission import PARTICIPANTS_FILE, Participants, write_participants
from site_agent.kit.enrolment import owner_only
from site_agent.kit.kit_policy import apply_site_policy

TEMPLATE = Path(__file__).with_name("project.yml")
ADMIN_ROLES = ("project_admin", "org_admin", "lead", "member", "super")


@dataclass(frozen=True)
class Federation:
    """The provisioned kits of one federation."""

    project: str
    kits_dir: Path
    server: str
    sites: list[str]
    admins: dict[str, str] = field(default_factory=dict)  # name -> role
    kit_paths: dict[str, Path] = field(default_factory=dict)  # kits elsewhere than kits_dir (each made where it runs)

    def kit(self, name: str) -> Path:
        return self.kit_paths.get(name, self.kits_dir / name)

    @property
    def ca_state(self) -> Path:
        """FLARE's provisioning state: it holds the root CA's private key, which signs every kit of this project."""
        return self.kits_dir.parent / "state"


def load_template(path: Path | None) -> dict[str, Any]:
    project: dict[str, Any] = yaml.safe_load(Path(path or TEMPLATE).read_text())
    return project


SCHEMES = ("http", "grpc")
STATIC_FILE_BUILDER = "nvflare.lighter.impl.static_file.StaticFileBuilder"


def scheme_of(project: dict[str, Any]) -> str:
    """FLARE's transport between sites and server, as the project's StaticFileBuilder sets it (FLARE: http)."""
    builder: dict[str, Any] = next((b for b in project.get("builders", []) if b.get("path") == STATIC_FILE_BUILDER), {})
    return str(builder.get("args", {}).get("scheme", "http"))


def customise(project: dict[str, Any], name: str | None = None, sites: list[str] | None = None,
              admins: dict[str, str] | None = None, port: int | None = None,
              scheme: str | None = None) -> dict[str, Any]:
    """Replace the template's project name, sites, admins, server port or transport scheme; a new site gets an org
    named after it."""
    project = dict(project)
    if scheme:
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; FLARE's transports here are {list(SCHEMES)}")
        project["builders"] = [{**b, "args": {**b.get("args", {}), "scheme": scheme}}
                               if b.get("path") == STATIC_FILE_BUILDER else b for b in project.get("builders", [])]
    participants = list(project["participants"])
    server = next(p for p in participants if p["type"] == "server")
    if name:
        project["name"] = name
    if port:
        server = {**server, "fed_learn_port": port}
        server.pop("admin_port", None)
    if sites is not None:
        participants = [p for p in participants if p["type"] != "client"] + [
            {"name": s, "type": "client", "org": re.sub(r"\W", "_", s)} for s in sites]
    if admins is not None:
        for role in admins.values():
            if role not in ADMIN_ROLES:
                raise ValueError(f"unknown admin role {role!r}; FLARE roles are {list(ADMIN_ROLES)}")
        org = server["org"]
        participants = [p for p in participants if p["type"] != "admin"] + [
            {"name": n, "type": "admin", "org": org, "role": r} for n, r in admins.items()]
    project["participants"] = [server if p["type"] == "server" else p for p in participants]
    return project


def _latest_prod_dir(workspace: Path, project: str) -> Path:
    prods = sorted((workspace / project).glob("prod_*"), key=lambda p: int(p.name.split("_")[1]))
    if not prods:
        raise RuntimeError(f"nvflare provision wrote no kits under {workspace / project}")
    return prods[-1]


def _write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n")


def _job_launcher(resources: dict[str, Any], launcher: str, classes: list[str]) -> None:
    """FLARE's `process_launcher` component replaced by the warm launcher (fl_runtime.job_launcher)."""
    resources["components"] = [job_launcher_component(launcher, classes) if c.get("id") == "process_launcher" else c
                               for c in resources["components"]]


def write_site_policy(kit: Path, accepted_roles: list[str], stream_logs: bool = False,
                      warm_jobs: bool = True) -> None:
    """The site kit policy (provisioning.policy.site_kit_policy) written into the site kit at `kit`."""
    apply_site_policy(kit, site_kit_policy(accepted_roles, stream_logs, warm_jobs))


def write_server_policy(kit: Path, storage: Path, participants: Participants, warm_jobs: bool = True) -> None:
    """Server resources: exact allow-list, storage in the workspace, heartbeat timeout, recovery, the scheduler's
    retry interval, the warm job launcher unless not asked for, and the admission of only the project's participants
    (their list in `local/participants.json`)."""
    resources = json.loads((kit / "local" / "resources.json.default").read_text())
    resources["class_list_enforcement_mode"] = "enforce"
    resources["class_allow_list"] = server_allow_list()
    resources["snapshot_persistor"]["args"]["storage"]["args"]["root_dir"] = str(storage / "snapshots")
    for component in resources["components"]:
        if component["id"] == "job_manager":
            component["args"]["uri_root"] = str(storage / "jobs")
    resources["components"] = [job_scheduler(c) if c.get("id") == "job_scheduler" else c
                               for c in resources["components"]
                               if c.get("id") not in ("job_recovery", "site_admission")]
    resources["components"] += [job_recovery_component(), site_admission_component()]
    if warm_jobs:
        _job_launcher(resources, SERVER_JOB_LAUNCHER, server_allow_list())
    for server in resources.get("servers", []):
        server["heart_beat_timeout"] = SERVER_HEARTBEAT_TIMEOUT_S
        server["admin_timeout"] = SERVER_ADMIN_TIMEOUT_S
    _write_json(kit / "local" / "resources.json", resources)
    _write_json(kit / "local" / "comm_config.json", COMM_CONFIG)
    _write_json(kit / "local" / "authorization.json", authorization_policy())
    write_participants(kit / "local", participants)


def make_owner_only(federation: Federation, server_storage: Path) -> None:
    """Everything provisioning wrote, owner-only whatever the umask: every kit (keys, certificates, configs, the
    sites' policies), the CA state (`state/cert.json` holds the root CA's private key, which FLARE writes
    world-readable: anyone who reads it can sign a site or admin certificate the whole federation trusts), the
    project file, and the server's storage folder (its jobs, snapshots and checkpoints go there).

    """
    server_storage.mkdir(mode=0o700, parents=True, exist_ok=True)
    project = federation.kits_dir.parent  # the CA state and every provisioning's kits
    roots = [project.parent / "project.yml", project, server_storage]
    for root in roots:
        owner_only(root)


def provision(project: dict[str, Any], workspace: Path, accepted_roles: list[str] | None = None,
              server_storage: Path | None = None, stream_site_logs: bool = False, new_ca: bool = False,
              warm_jobs: bool = True) -> Federation:
    """Provision `project` into `workspace` and write our policy into every kit (`warm_jobs` False: FLARE's own
    job launcher instead of the warm one).

    Kits made before and a missing CA state mean the state was moved offline: FLARE would silently make a new root CA
    that none of the existing kits trusts, so that needs `new_ca`.
    """
    workspace = Path(workspace).resolve()
    state = workspace / project["name"] / "state" / "cert.json"
    if not new_ca and not state.is_file() and any((workspace / project["name"]).glob("prod_*")):
        raise RuntimeError(f"{state} is missing but kits of {project['name']} exist in "
                           f"{workspace / project['name']}: restore the CA state from its offline copy to add or "
                           "re-issue kits under the same root CA, or "
                           "pass --new-ca to make a new root CA (every participant then needs its new kit)")
    workspace.mkdir(parents=True, exist_ok=True)
    project_file = workspace / "project.yml"
    project_file.write_text(yaml.safe_dump(project, sort_keys=False))
    nvflare = Path(sys.executable).with_name("nvflare")
    completed = subprocess.run([str(nvflare), "provision", "-p", str(project_file), "-w", str(workspace), "--force"],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"nvflare provision failed for {project_file}:\n{completed.stdout}\n{completed.stderr}")
    kits_dir = _latest_prod_dir(workspace, project["name"])
    participants = project["participants"]
    server = next(p["name"] for p in participants if p["type"] == "server")
    sites = [p["name"] for p in participants if p["type"] == "client"]
    admins = {p["name"]: p["role"] for p in participants if p["type"] == "admin"}
    listed = Participants(project["name"], frozenset(sites), frozenset(admins),
                          frozenset(p["name"] for p in participants if p["type"] == "relay"))
    storage = Path(server_storage) if server_storage else kits_dir / server / "storage"
    write_server_policy(kits_dir / server, storage, listed, warm_jobs)
    for site in sites:
        write_site_policy(kits_dir / site, accepted_roles or DEFAULT_ACCEPTED_ROLES, stream_site_logs, warm_jobs)
    federation = Federation(project["name"], kits_dir, server, sites, admins)
    make_owner_only(federation, storage)
    return federation


def running_server_hint(federation: Federation) -> str | None:
    """After a re-provisioning (kits were made before, so a server may run from one of them): how it admits the
    new participants without a restart."""
    if federation.kits_dir.name == "prod_00":
        return None
    return (f"a running server admits new participants once {PARTICIPANTS_FILE} is copied from "
            f"{federation.kit(federation.server) / 'local'} into its kit's local/ (no restart; docs/admin-guide.md)")


def _parse_admins(values: list[str] | None) -> dict[str, str] | None:
    if not values:
        return None
    admins = {}
    for value in values:
        name, _, role = value.partition(":")
        admins[name] = role or "project_admin"
    return admins


def add_project_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose the project and every kit's policy, shared by central and distributed provisioning."""
    parser.add_argument("--project", type=Path, help="project.yml (default: the template in provisioning/project.yml)")
    parser.add_argument("--workspace", type=Path, required=True, help="where the kits are written (keep it private)")
    parser.add_argument("--name", help="project name (names the root CA)")
    parser.add_argument("--sites", help="comma-separated site names, replacing the template's")
    parser.add_argument("--admin", action="append", metavar="NAME[:ROLE]",
                        help="admin (repeatable), replacing the template's")
    parser.add_argument("--port", type=int, help="server port for sites and admins")
    parser.add_argument("--scheme", choices=SCHEMES,
                        help="FLARE's transport (default http, which site-agent check can time; grpc for sites that "
                             "reach the server only through an HTTP proxy)")
    parser.add_argument("--accepted-roles", default=",".join(DEFAULT_ACCEPTED_ROLES),
                        help="submitter roles sites accept (written into each site's local/site_policy.json)")
    parser.add_argument("--stream-site-logs", action="store_true",
                        help="let sites stream job and error logs to the server (off: logs may name local files)")
    parser.add_argument("--flare-job-launcher", action="store_true",
                        help="start every job process as FLARE does, a fresh Python, instead of from a warm process "
                             "that imported torch and the tasks ahead (faster start, one idle process per kit)")


def project_from_options(args: argparse.Namespace) -> dict[str, Any]:
    return customise(load_template(args.project), args.name, args.sites.split(",") if args.sites else None,
                     _parse_admins(args.admin), args.port, args.scheme)


def main(argv: list[str] | None = None) -> int:
    """`fl-provision`: after writing the kits it says which kit goes to whom and that the root CA's key must leave this
    machine, since that key signs every kit of the project."""
    parser = argparse.ArgumentParser(prog="fl-provision", description=__doc__.split("\n\n")[0],
                                     epilog="Distributed provisioning, where each participant makes its own key: "
                                            "fl-provision init | approve | revoke | server-kit | certificates "
                                            "(fl-provision init --help; docs/admin-guide.md)")
    add_project_options(parser)
    parser.add_argument("--server-storage", type=Path,
                        help="job/snapshot storage on the server (default: inside its kit)")
    parser.add_argument("--new-ca", action="store_true",
                        help="make a new root CA although kits exist and the CA state is absent "
                             "(every kit is replaced)")
    args = parser.parse_args(argv)
    project = project_from_options(args)
    try:
        federation = provision(project, args.workspace, args.accepted_roles.split(","), args.server_storage,
                               args.stream_site_logs, args.new_ca, not args.flare_job_launcher)
    except RuntimeError as exc:
        print(f"fl-provision: {exc}", file=sys.stderr)
        return 1
    print(f"provisioned {federation.project}: kits in {federation.kits_dir}")
    print(f"  server: {federation.kit(federation.server)}")
    if hint := running_server_hint(federation):
        print(f"          {hint}")
    for site in federation.sites:
        print(f"  site:   {federation.kit(site)}  (give it to {site}'s IT with docs/site-it-guide.md)")
    for admin, role in federation.admins.items():
        print(f"  admin:  {federation.kit(admin)}  (role {role})")
    print(f"\nThe root CA's private key, and every participant's, is in {federation.ca_state / 'cert.json'} "
          f"(owner-only). It signs every kit of {federation.project}: move {federation.ca_state} offline (an encrypted "
          "medium in a safe) once the kits are made, and bring it back only to add or re-issue a kit "
          "(docs/admin-guide.md).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
