"""`fl-provision init | approve | revoke | server-kit | certificates`: the lead signs requests and never holds a
participant's key (distributed provisioning; central `fl-provision --workspace` makes every key itself).

FLARE's distributed provisioning (`nvflare cert init`, `nvflare cert approve`) with our policy layer on top:

- `init` makes the root CA in `--ca-dir` (a folder meant for a removable medium: only `approve` and `server-kit`
  need it, nothing else does) and the lead's workspace: the project (who may be approved), FLARE's profile, the
  root CA's certificate, the kit options, and the record of every certificate.
- `approve` refuses a request whose project, name, kind, org or role the project does not list, signs it with
  FLARE's command, signs our site kit policy (site_agent.kit.kit_policy) with the same CA key, and returns
  `<name>.approved.zip`. A request for a name approved before is a renewal: the new certificate is pinned and the
  old one refused from then on, no other participant touched.
- `revoke` takes a name off the list and records its certificate as revoked: the server refuses it at its next
  heartbeat, and that certificate is refused even if the name is approved again.
- `server-kit` makes the server's key in the server's folder (never in the workspace) and its kit with our policy.

Every change to who may join is written to `<workspace>/participants.json`, the server's list
(server_app.admission); `--server-kit` copies it into a running server's kit at once, which re-reads it (no
restart). The workspace holds certificates and requests' metadata only, never a private key.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import io
import json
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from provisioning.policy import site_kit_policy
from provisioning.provision import add_project_options, project_from_options, scheme_of, write_server_policy
from server_app.admission import PARTICIPANTS_FILE, Participants, certificate_serial, write_participants
from site_agent.kit.enrolment import (
    APPROVED_SUFFIX,
    SIGNED_SUFFIX,
    install_kit,
    make_private_dir,
    make_request,
    nvflare,
    owner_only,
)
from site_agent.kit.kit_policy import APPROVAL_FILE, SIGNATURE_FILE, KitApproval, fingerprint, sha256_hex
from site_agent.kit.startup import EXPIRY_WARNING_DAYS, KitError
from site_agent.privacy.policy import write_private as make_private

COMMANDS = ("init", "approve", "revoke", "server-kit", "certificates")
CA_KEY = "rootCA.key"
CA_CERT = "rootCA.pem"
_KINDS = {"client": "site", "admin": "user", "server": "server"}  # project.yml's type -> FLARE's request kind


class LeadError(ValueError):
    """A request, workspace or CA the lead cannot use; the message names it and the fix."""


@dataclass(frozen=True)
class LeadWorkspace:
    """The lead's folder in distributed mode: what may be approved, and what was."""

    root: Path

    @property
    def project_file(self) -> Path:
        return self.root / "project.yml"

    @property
    def profile(self) -> Path:
        return self.root / "profile.yml"  # FLARE's: project name, scheme, connection security, server

    @property
    def root_ca(self) -> Path:
        return self.root / CA_CERT

    @property
    def options_file(self) -> Path:
        return self.root / "kit_options.json"

    @property
    def certificates_file(self) -> Path:
        return self.root / "certificates.json"

    @property
    def participants_file(self) -> Path:
        return self.root / PARTICIPANTS_FILE

    @property
    def approved_dir(self) -> Path:
        return self.root / "approved"

    def project(self) -> dict[str, Any]:
        if not self.project_file.is_file():
            raise LeadError(f"{self.root}: no project.yml; make the workspace first with fl-provision init")
        content: dict[str, Any] = yaml.safe_load(self.project_file.read_text())
        return content

    def options(self) -> dict[str, Any]:
        content: dict[str, Any] = json.loads(self.options_file.read_text())
        return content

    def records(self) -> list[dict[str, Any]]:
        if not self.certificates_file.is_file():
            return []
        content: list[dict[str, Any]] = json.loads(self.certificates_file.read_text())
        return content

    def save_records(self, records: list[dict[str, Any]]) -> None:
        make_private(self.certificates_file, json.dumps(records, indent=2) + "\n")


def _server(project: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in project["participants"] if p["type"] == "server")


def init(workspace: Path, ca_dir: Path, project: dict[str, Any], accepted_roles: list[str],
         stream_site_logs: bool = False, warm_jobs: bool = True) -> LeadWorkspace:
    """The root CA in `ca_dir` and the lead's workspace; refuses to replace either."""
    lead = LeadWorkspace(Path(workspace).resolve())
    if lead.project_file.exists() or (Path(ca_dir) / CA_KEY).exists():
        raise LeadError(f"{lead.root} or {ca_dir} already holds a federation; a second root CA would leave every "
                        "approved kit untrusted (use another folder for another federation)")
    make_private_dir(lead.root)
    server = _server(project)
    profile = {"name": project["name"], "scheme": scheme_of(project), "connection_security": "mtls",
               "server": {"host": server["name"], "fed_learn_port": server["fed_learn_port"]}}
    make_private(lead.profile, yaml.safe_dump(profile, sort_keys=False))
    make_private(lead.project_file, yaml.safe_dump(project, sort_keys=False))
    make_private(lead.options_file, json.dumps({"accepted_roles": accepted_roles, "stream_site_logs":
                                                stream_site_logs, "warm_jobs": warm_jobs}, indent=2) + "\n")
    nvflare("cert", "init", "--profile", str(lead.profile), "-o", str(make_private_dir(Path(ca_dir))))
    shutil.copy(Path(ca_dir) / CA_CERT, lead.root_ca)
    lead.save_records([])
    write_participants(lead.root, participants(lead))
    return lead


def _check_ca(lead: LeadWorkspace, ca_dir: Path) -> Path:
    """The CA folder, once it is this federation's (its certificate is the workspace's)."""
    key = Path(ca_dir) / CA_KEY
    if not key.is_file():
        raise LeadError(f"{ca_dir}: no {CA_KEY}; mount the medium that holds the federation's root CA and give its "
                        "folder with --ca-dir")
    if (Path(ca_dir) / CA_CERT).read_bytes() != lead.root_ca.read_bytes():
        raise LeadError(f"{ca_dir}: holds another root CA than {lead.root_ca} (fingerprint "
                        f"{fingerprint((Path(ca_dir) / CA_CERT).read_bytes())}, the federation's is "
                        f"{fingerprint(lead.root_ca.read_bytes())}); give the CA folder of this federation")
    return Path(ca_dir)


def _read_request(path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as request:
            content: dict[str, Any] = json.loads(request.read("request.json"))
    except (OSError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise LeadError(f"{path}: not a request made by site-agent request ({exc!r}); ask the participant to make "
                        "it again") from exc
    return content


def check_request(project: dict[str, Any], request: dict[str, Any], source: Path) -> dict[str, Any]:
    """The project's entry for the request; LeadError naming the request and what does not match otherwise."""
    if request.get("project") != project["name"]:
        raise LeadError(f"{source}: a request for project {request.get('project')!r}, not {project['name']!r}; the "
                        f"participant makes it again with --project {project['name']}")
    name = request.get("name")
    entry: dict[str, Any] | None = next((p for p in project["participants"] if p["name"] == name), None)
    if entry is None:
        raise LeadError(f"{source}: {name!r} is not a participant of project {project['name']!r}; to admit it, add "
                        f"it to the workspace's project.yml first (a decision of the federation, not of a request)")
    if _KINDS[entry["type"]] != request.get("kind"):
        raise LeadError(f"{source}: {name!r} asks for a {request.get('kind')} certificate, but the project lists it "
                        f"as a {_KINDS[entry['type']]}")
    if entry["type"] == "server":
        raise LeadError(f"{source}: the server's kit is made with fl-provision server-kit, not from a request")
    if request.get("org") != entry["org"]:
        raise LeadError(f"{source}: {name!r} gives org {request.get('org')!r}, the project lists "
                        f"{entry['org']!r}; the participant makes the request again with --org {entry['org']}")
    if entry["type"] == "admin" and request.get("cert_role") != entry["role"]:
        raise LeadError(f"{source}: admin {name!r} asks for role {request.get('cert_role')!r}, the project gives it "
                        f"{entry['role']!r}")
    return entry


def _sign(data: bytes, ca_dir: Path) -> bytes:
    key = serialization.load_pem_private_key((ca_dir / CA_KEY).read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise LeadError(f"{ca_dir / CA_KEY}: not an RSA key")
    return base64.b64encode(key.sign(data, padding.PKCS1v15(), hashes.SHA256()))


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Approved:
    path: Path
    record: dict[str, Any]
    replaced: dict[str, Any] | None  # the renewal's previous certificate


def approve(workspace: Path, request_zip: Path, ca_dir: Path, valid_days: int | None = None,
            server_kit: Path | None = None) -> Approved:
    """Check, sign and record one request; returns the approved zip for the participant."""
    lead = LeadWorkspace(Path(workspace).resolve())
    project = lead.project()
    request = _read_request(request_zip)
    entry = check_request(project, request, request_zip)
    ca = _check_ca(lead, ca_dir)
    name = entry["name"]
    with tempfile.TemporaryDirectory() as scratch:
        signed_path = Path(scratch) / f"{name}{SIGNED_SUFFIX}"
        days = ["--valid-days", str(valid_days)] if valid_days else []
        nvflare("cert", "approve", str(request_zip), "--ca-dir", str(ca), "--profile", str(lead.profile),
                "--out", str(signed_path), *days)
        signed_zip = signed_path.read_bytes()
    signed, certificate = _signed_contents(signed_zip)
    site = None
    if entry["type"] == "client":
        options = lead.options()
        site = site_kit_policy(options["accepted_roles"], options["stream_site_logs"], options["warm_jobs"])
    approval = KitApproval(project["name"], name, signed["kind"], signed["request_id"], sha256_hex(certificate), site)
    out = _bundle(make_private_dir(lead.approved_dir) / f"{name}{APPROVED_SUFFIX}", signed_zip, approval, ca)
    records = lead.records()
    replaced = next((r for r in records if r["name"] == name and r["status"] == "approved"), None)
    if replaced is not None:
        replaced.update(status="replaced", replaced_at=_now())
    record = {"name": name, "kind": signed["kind"], "org": entry["org"], "role": entry.get("role"),
              "serial": certificate_serial(certificate), "valid_until": signed["certificate"]["valid_until"],
              "approved_at": signed["approved_at"], "request_id": signed["request_id"], "status": "approved"}
    lead.save_records([*records, record])
    publish(lead, server_kit)
    return Approved(out, record, replaced)


def revoke(workspace: Path, name: str, server_kit: Path | None = None) -> dict[str, Any]:
    """Revoke `name`'s certificate: off the list, and that certificate refused for good. No CA key is needed:
    nothing is signed, the server enforces its list."""
    lead = LeadWorkspace(Path(workspace).resolve())
    records = lead.records()
    record = next((r for r in records if r["name"] == name and r["status"] == "approved"), None)
    if record is None:
        known = sorted({r["name"] for r in records if r["status"] == "approved"})
        raise LeadError(f"{name!r} holds no approved certificate in {lead.certificates_file} (approved: "
                        f"{', '.join(known) or 'none'})")
    record.update(status="revoked", revoked_at=_now())
    lead.save_records(records)
    publish(lead, server_kit)
    return record


def participants(lead: LeadWorkspace) -> Participants:
    """The server's list from the record: every approved name with its one certificate pinned, every revoked
    certificate refused."""
    records = lead.records()
    approved = {r["name"]: r for r in records if r["status"] == "approved"}
    return Participants(
        lead.project()["name"],
        frozenset(n for n, r in approved.items() if r["kind"] == _KINDS["client"]),
        frozenset(n for n, r in approved.items() if r["kind"] == _KINDS["admin"]),
        certificates={n: r["serial"] for n, r in approved.items()},
        revoked={r["serial"]: r["name"] for r in records if r["status"] == "revoked"})


def publish(lead: LeadWorkspace, server_kit: Path | None) -> None:
    """Write the server's list into the workspace, and into a server kit's local/ when given (it re-reads it)."""
    listed = participants(lead)
    write_participants(lead.root, listed)
    if server_kit is not None:
        write_participants(Path(server_kit) / "local", listed)


def server_kit(workspace: Path, ca_dir: Path, out: Path, storage: Path | None = None) -> Path:
    """The server's key, request and kit in `out` (where the server runs), its policy written, the list in force."""
    lead = LeadWorkspace(Path(workspace).resolve())
    project = lead.project()
    ca = _check_ca(lead, ca_dir)
    server = _server(project)
    out = make_private_dir(Path(out).resolve())
    request_dir = out / "request"
    request_zip = make_request(request_dir, project["name"], server["name"], server["org"], "server")
    with tempfile.TemporaryDirectory() as scratch:
        signed = Path(scratch) / f"{server['name']}{SIGNED_SUFFIX}"
        nvflare("cert", "approve", str(request_zip), "--ca-dir", str(ca), "--profile", str(lead.profile),
                "--out", str(signed))
        signed_zip = signed.read_bytes()
        _, certificate = _signed_contents(signed_zip)
        approval = KitApproval(project["name"], server["name"], "server", _read_request(request_zip)["request_id"],
                               sha256_hex(certificate), None)
        approved = _bundle(Path(scratch) / f"{server['name']}{APPROVED_SUFFIX}", signed_zip, approval, ca)
        kit = install_kit(approved, request_dir, fingerprint(lead.root_ca.read_bytes()), out)
    write_server_policy(kit, Path(storage) if storage else kit / "storage", participants(lead),
                        lead.options()["warm_jobs"])
    owner_only(kit)
    return kit


def _signed_contents(signed_zip: bytes) -> tuple[dict[str, Any], bytes]:
    """FLARE's signed.json and the certificate it names, from a signed zip."""
    with zipfile.ZipFile(io.BytesIO(signed_zip)) as inner:
        signed: dict[str, Any] = json.loads(inner.read("signed.json"))
        return signed, inner.read(signed["cert_file"])


def _bundle(out: Path, signed_zip: bytes, approval: KitApproval, ca_dir: Path) -> Path:
    """The approved zip a participant installs: FLARE's signed zip, and our approval signed with the CA key."""
    data = approval.to_bytes()
    with zipfile.ZipFile(out, "w") as bundle:
        bundle.writestr(f"{approval.name}{SIGNED_SUFFIX}", signed_zip)
        bundle.writestr(APPROVAL_FILE, data)
        bundle.writestr(SIGNATURE_FILE, _sign(data, ca_dir))
    out.chmod(0o600)
    return out


def certificate_lines(lead: LeadWorkspace, now: dt.datetime | None = None) -> list[str]:
    """One line per certificate ever approved: name, kind, status, serial, end date, and for an approved one the
    days left, flagged `renew` within EXPIRY_WARNING_DAYS (the participant is asked the same by site-agent check)."""
    now = now or dt.datetime.now(dt.UTC)
    lines = []
    for record in lead.records():
        line = (f"{record['name']:<32} {record['kind']:<6} {record['status']:<9} serial {record['serial']}  "
                f"valid until {record['valid_until']}")
        if record["status"] == "approved":
            end = dt.datetime.strptime(record["valid_until"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
            days = (end - now).days
            line += (f"  EXPIRED: {record['name']} is refused by TLS; it makes a new request" if days < 0 else
                     f"  {days} days left" + ("  renew: ask it for a new request" if days < EXPIRY_WARNING_DAYS
                                              else ""))
        lines.append(line)
    return lines


def main(argv: list[str]) -> int:
    """The distributed sub-commands; a refusal exits 1 with its reason on stderr (nothing is written)."""
    parser = argparse.ArgumentParser(prog="fl-provision", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    init_parser = commands.add_parser("init", help="make the root CA (in --ca-dir) and the lead's workspace")
    add_project_options(init_parser)
    init_parser.add_argument("--ca-dir", type=Path, required=True,
                             help="where the root CA's key goes (a removable medium kept offline)")
    approve_parser = commands.add_parser("approve", help="check and sign a participant's request")
    approve_parser.add_argument("request", type=Path, help="the participant's <name>.request.zip")
    approve_parser.add_argument("--ca-dir", type=Path, required=True, help="the root CA's folder")
    approve_parser.add_argument("--valid-days", type=int, help="certificate validity (FLARE: 1095 days)")
    revoke_parser = commands.add_parser("revoke", help="revoke a participant's certificate")
    revoke_parser.add_argument("name")
    server_parser = commands.add_parser("server-kit", help="make the server's key and kit where it runs")
    server_parser.add_argument("--ca-dir", type=Path, required=True, help="the root CA's folder")
    server_parser.add_argument("--out", type=Path, required=True, help="the server's folder (its key goes there)")
    server_parser.add_argument("--server-storage", type=Path, help="job/snapshot storage (default: in its kit)")
    commands.add_parser("certificates", help="list every certificate approved, replaced or revoked")
    for sub in (approve_parser, revoke_parser, server_parser, commands.choices["certificates"]):
        sub.add_argument("--workspace", type=Path, required=True, help="the lead's workspace (fl-provision init)")
    for sub in (approve_parser, revoke_parser):
        sub.add_argument("--server-kit", type=Path,
                         help="a server kit on this machine: its list is updated at once (no restart)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except (LeadError, KitError) as exc:
        print(f"fl-provision {args.command}: {exc}", file=sys.stderr)
        return 1


def _copy_hint(lead: LeadWorkspace, server_kit_dir: Path | None) -> str:
    if server_kit_dir is not None:
        return f"the server kit {server_kit_dir} has the new list (re-read at once)"
    return f"copy {lead.participants_file} into the server kit's local/ (it is re-read at once, no restart)"


def _run(args: argparse.Namespace) -> int:
    """Run one sub-command and say what the lead does next (the fingerprint to give, the file to return)."""
    if args.command == "init":
        lead = init(args.workspace, args.ca_dir, project_from_options(args), args.accepted_roles.split(","),
                    args.stream_site_logs, not args.flare_job_launcher)
        print(f"federation {lead.project()['name']}: workspace {lead.root}, root CA in {args.ca_dir}")
        print(f"  root CA fingerprint: {fingerprint(lead.root_ca.read_bytes())}")
        print("  tell every participant this fingerprint over another channel than the files (phone, in person); "
              "site-agent install-kit refuses a kit whose CA differs")
        print(f"  next: fl-provision server-kit; then fl-provision approve each request. Keep {args.ca_dir} offline "
              "between approvals")
        return 0
    lead = LeadWorkspace(Path(args.workspace).resolve())
    if args.command == "approve":
        done = approve(args.workspace, args.request, args.ca_dir, args.valid_days, args.server_kit)
        record = done.record
        print(f"approved {record['name']} ({record['kind']}): certificate {record['serial']}, valid until "
              f"{record['valid_until']}")
        if done.replaced is not None:
            print(f"  a renewal: its previous certificate {done.replaced['serial']} is refused from now on")
        print(f"  return {done.path} to {record['name']}; {_copy_hint(lead, args.server_kit)}")
    elif args.command == "revoke":
        record = revoke(args.workspace, args.name, args.server_kit)
        print(f"revoked {record['name']}: certificate {record['serial']} is refused from its next heartbeat on; "
              f"{_copy_hint(lead, args.server_kit)}")
    elif args.command == "server-kit":
        kit = server_kit(args.workspace, args.ca_dir, args.out, args.server_storage)
        print(f"server kit: {kit} (its key made there, not in the workspace)")
    else:
        print("\n".join(certificate_lines(lead)))
    return 0
