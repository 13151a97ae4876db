"""`fl-provision`: the federation lead's one command. Startup kits (mutual-TLS certificates, roles) for the server,
every site and every admin, each with the security policy of `provisioning.policy` written into its `local/`.

Certificates and kits are made by FLARE's own `nvflare provision`; this command only chooses the participants and
then writes, per kit: `local/resources.json` (exact class allow-list in enforce mode; sites: the site guard;
server: job and snapshot storage inside the federation's workspace) and `local/authorization.json` (no role has
the byoc right).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from provisioning.policy import (
    DEFAULT_ACCEPTED_ROLES,
    authorization_policy,
    server_allow_list,
    site_allow_list,
    site_guard_component,
)

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

    def kit(self, name: str) -> Path:
        return self.kits_dir / name


def load_template(path: Path | None) -> dict:
    text = Path(path or TEMPLATE).read_text()
    return yaml.safe_load(text)


def customise(project: dict, name: str | None = None, sites: list[str] | None = None, admins: dict[str, str] | None = None,
              port: int | None = None) -> dict:
    """Replace the template's project name, sites, admins or server port; a new site gets an org named after it."""
    project = dict(project)
    participants = list(project["participants"])
    server = next(p for p in participants if p["type"] == "server")
    if name:
        project["name"] = name
    if port:
        server = {**server, "fed_learn_port": port}
        server.pop("admin_port", None)
    if sites is not None:
        participants = [p for p in participants if p["type"] != "client"] + [{"name": s, "type": "client", "org": re.sub(r"\W", "_", s)} for s in sites]
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


def _write_json(path: Path, content: dict) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n")


def write_site_policy(kit: Path, accepted_roles: list[str], stream_logs: bool = False) -> None:
    """Site resources: exact allow-list, site guard, and log streaming off unless asked for.

    Site logs name local files (our errors say which case is broken), so by default they stay at the site:
    FLARE's job-log and error-log streaming to the server are switched off.
    """
    resources = json.loads((kit / "local" / "resources.json.default").read_text())
    resources["class_list_enforcement_mode"] = "enforce"
    resources["class_allow_list"] = site_allow_list()
    resources["allow_log_streaming"] = stream_logs
    resources["components"] = [
        c for c in resources.get("components", [])
        if c.get("id") != "site_guard" and (stream_logs or not c.get("path", "").endswith(".SiteLogStreamer"))
    ]
    resources["components"].append(site_guard_component(accepted_roles))
    _write_json(kit / "local" / "resources.json", resources)
    _write_json(kit / "local" / "authorization.json", authorization_policy())


def write_server_policy(kit: Path, storage: Path) -> None:
    resources = json.loads((kit / "local" / "resources.json.default").read_text())
    resources["class_list_enforcement_mode"] = "enforce"
    resources["class_allow_list"] = server_allow_list()
    resources["snapshot_persistor"]["args"]["storage"]["args"]["root_dir"] = str(storage / "snapshots")
    for component in resources["components"]:
        if component["id"] == "job_manager":
            component["args"]["uri_root"] = str(storage / "jobs")
    _write_json(kit / "local" / "resources.json", resources)
    _write_json(kit / "local" / "authorization.json", authorization_policy())


def provision(project: dict, workspace: Path, accepted_roles: list[str] | None = None, server_storage: Path | None = None,
              stream_site_logs: bool = False) -> Federation:
    """Provision `project` into `workspace` and write our policy into every kit."""
    workspace = Path(workspace).resolve()
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
    write_server_policy(kits_dir / server, Path(server_storage) if server_storage else kits_dir / server / "storage")
    for site in sites:
        write_site_policy(kits_dir / site, accepted_roles or DEFAULT_ACCEPTED_ROLES, stream_site_logs)
    return Federation(project["name"], kits_dir, server, sites, admins)


def _parse_admins(values: list[str] | None) -> dict[str, str] | None:
    if not values:
        return None
    admins = {}
    for value in values:
        name, _, role = value.partition(":")
        admins[name] = role or "project_admin"
    return admins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fl-provision", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, help="project.yml (default: the template in provisioning/project.yml)")
    parser.add_argument("--workspace", type=Path, required=True, help="where the kits are written (keep it private)")
    parser.add_argument("--name", help="project name (names the root CA)")
    parser.add_argument("--sites", help="comma-separated site names, replacing the template's")
    parser.add_argument("--admin", action="append", metavar="NAME[:ROLE]", help="admin (repeatable), replacing the template's")
    parser.add_argument("--port", type=int, help="server port for sites and admins")
    parser.add_argument("--accepted-roles", default=",".join(DEFAULT_ACCEPTED_ROLES), help="submitter roles sites accept")
    parser.add_argument("--server-storage", type=Path, help="job/snapshot storage on the server (default: inside its kit)")
    parser.add_argument("--stream-site-logs", action="store_true",
                        help="let sites stream job and error logs to the server (off: logs may name local files)")
    args = parser.parse_args(argv)
    project = customise(load_template(args.project), args.name, args.sites.split(",") if args.sites else None,
                        _parse_admins(args.admin), args.port)
    federation = provision(project, args.workspace, args.accepted_roles.split(","), args.server_storage, args.stream_site_logs)
    print(f"provisioned {federation.project}: kits in {federation.kits_dir}")
    print(f"  server: {federation.kit(federation.server)}")
    for site in federation.sites:
        print(f"  site:   {federation.kit(site)}  (give it to {site}'s IT with docs/site-it-guide.md)")
    for admin, role in federation.admins.items():
        print(f"  admin:  {federation.kit(admin)}  (role {role})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
