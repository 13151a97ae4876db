"""`site-agent request` and `site-agent install-kit`: the hospital makes its own key, and assembles its own kit.

Distributed provisioning, FLARE's (`nvflare cert request`, `nvflare package`) with our policy layer on top:

1. `site-agent request` makes the site's (or an admin's) private key and a certificate request in a folder at the
   hospital (FLARE's request folder: the key 0600, the folder owner-only). Only `<name>.request.zip` (the CSR and
   who asks) goes to the federation lead; the key never leaves the folder.
2. The lead's `fl-provision approve` signs it and returns `<name>.approved.zip`: FLARE's signed zip (the
   certificate, the root CA) and our kit policy (site_agent.kit.kit_policy), signed with the same root CA key.
3. `site-agent install-kit` checks, before anything is written, that the root CA is the one whose fingerprint the
   lead gave out of band, that the kit policy is signed by it and made for this request (project, name, request id,
   certificate), then lets FLARE assemble the kit (which checks its own signature and that the folder's key is the
   certificate's), writes the policy into it and leaves it owner-only. `--renew KIT` puts a renewed certificate
   and key into an existing kit instead, keeping its local/ (the privacy policy, ledger and audit log).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from site_agent.kit.kit_policy import (
    APPROVAL_FILE,
    SIGNATURE_FILE,
    KitApproval,
    apply_site_policy,
    fingerprint,
    same_fingerprint,
    sha256_hex,
    verify_approval,
)
from site_agent.kit.startup import KitError

REQUEST_FILE = "request.json"
APPROVED_SUFFIX = ".approved.zip"
SIGNED_SUFFIX = ".signed.zip"  # FLARE's signed zip, inside ours
EXIT_REFUSED = 2
REQUESTABLE_ROLES = ("lead", "org_admin", "member")  # FLARE 2.9's `nvflare cert request` refuses any other


def nvflare(*args: str) -> str:
    """Run FLARE's own command line (beside this Python); its output, or KitError with what FLARE said."""
    command = [str(Path(sys.executable).with_name("nvflare")), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        said = "\n".join(line for line in (done.stdout + done.stderr).splitlines() if line.strip())
        raise KitError(f"nvflare {args[0]} {args[1] if len(args) > 1 else ''} refused it:\n{said}")
    return done.stdout


def make_private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def make_request(out: Path, project: str, name: str, org: str, kind: str = "client",
                 role: str | None = None) -> Path:
    """FLARE's request folder at `out` (the private key inside, 0600); returns the request zip to send."""
    if kind == "admin" and role not in REQUESTABLE_ROLES:
        raise KitError(f"an admin's request cannot ask for role {role!r}: FLARE's distributed provisioning issues "
                       f"admin certificates for {', '.join(REQUESTABLE_ROLES)} only (project_admin, which may "
                       "operate every site, is not given to anyone by a request); ask the federation lead which role "
                       "the project gives you")
    out = make_private_dir(Path(out))
    participant: dict[str, Any] = {"name": name, "type": kind, "org": org}
    if role:
        participant["role"] = role
    definition = out / "participant.yml"
    definition.write_text(yaml.safe_dump({"name": project, "participants": [participant]}, sort_keys=False))
    nvflare("cert", "request", "-p", str(definition), "--out", str(out))
    return out / f"{name}.request.zip"


@dataclass(frozen=True)
class Approval:
    """An approved zip, opened: FLARE's signed zip and our kit policy, checked against the root CA's fingerprint."""

    signed_zip: bytes
    signed: dict[str, Any]  # FLARE's signed.json
    root_ca: bytes
    approval: KitApproval


def read_approval(path: Path, expected_fingerprint: str) -> Approval:
    """Open `path` and check it: the root CA it carries is the one of `expected_fingerprint`, and our kit policy is
    signed by that CA and made for the certificate it comes with. KitError names what is wrong."""
    try:
        with zipfile.ZipFile(path) as outer:
            inner_name = next(n for n in outer.namelist() if n.endswith(SIGNED_SUFFIX))
            signed_zip, data, signature = (outer.read(inner_name), outer.read(APPROVAL_FILE),
                                           outer.read(SIGNATURE_FILE))
        with zipfile.ZipFile(io.BytesIO(signed_zip)) as inner:
            signed = json.loads(inner.read("signed.json"))
            root_ca, certificate = inner.read(signed["rootca_file"]), inner.read(signed["cert_file"])
    except (OSError, zipfile.BadZipFile, StopIteration, KeyError, ValueError) as exc:
        raise KitError(f"{path}: not an approval made by fl-provision approve ({exc!r}); ask the federation lead "
                       f"for the {APPROVED_SUFFIX} file of your request") from exc
    actual = fingerprint(root_ca)
    if not same_fingerprint(expected_fingerprint, actual):
        raise KitError(f"{path}: its root CA has fingerprint {actual}, not {expected_fingerprint} as the federation "
                       "lead told you; do not install it, and ask the lead (by phone or in person) which is right")
    approval = verify_approval(data, signature, root_ca, str(path))
    mismatch = [f"{key} {approval_value!r} != {signed_value!r}" for key, approval_value, signed_value in (
        ("project", approval.project, signed.get("project")), ("name", approval.name, signed.get("name")),
        ("request", approval.request_id, signed.get("request_id")),
        ("certificate", approval.certificate_sha256, sha256_hex(certificate)))
        if approval_value != signed_value]
    if mismatch:
        raise KitError(f"{path}: its kit policy was made for another approval ({'; '.join(mismatch)}); ask the "
                       "federation lead to approve the request again")
    return Approval(signed_zip, signed, root_ca, approval)


def check_request_dir(request_dir: Path, approval: Approval, source: Path) -> None:
    """The approval answers the request made in `request_dir`: same project, name and request id."""
    path = Path(request_dir) / REQUEST_FILE
    try:
        request = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise KitError(f"{path}: unreadable ({exc}); give --request-dir the folder `site-agent request` made") from exc
    signed = approval.approval
    if request.get("project") != signed.project:
        raise KitError(f"{source}: signed for project {signed.project!r}, but your request in {request_dir} was for "
                       f"project {request.get('project')!r}; ask the lead of {request.get('project')!r} to approve it")
    if (request.get("name"), request.get("request_id")) != (signed.name, signed.request_id):
        raise KitError(f"{source}: answers the request of {signed.name!r} ({signed.request_id}), not the one in "
                       f"{request_dir} ({request.get('name')!r}, {request.get('request_id')}); give the folder of "
                       "that request")


def owner_only(root: Path) -> None:
    """`root` and everything under it readable by its owner only, whatever the umask: group and other bits cleared,
    the owner's kept (folders stay enterable, start scripts executable)."""
    for path in [root, *(root.rglob("*") if root.is_dir() else [])]:
        if not path.is_symlink():
            os.chmod(path, path.stat().st_mode & 0o700)


def install_kit(approved: Path, request_dir: Path, expected_fingerprint: str, workspace: Path) -> Path:
    """Assemble the kit under `workspace` (FLARE's layout: <project>/prod_NN/<name>) and write its policy."""
    approval = read_approval(approved, expected_fingerprint)
    check_request_dir(request_dir, approval, approved)
    workspace = make_private_dir(Path(workspace))
    with tempfile.TemporaryDirectory(dir=workspace) as scratch:
        inner = Path(scratch) / f"{approval.approval.name}{SIGNED_SUFFIX}"
        inner.write_bytes(approval.signed_zip)
        nvflare("package", str(inner), "-w", str(workspace), "--request-dir", str(request_dir),
                "--fingerprint", fingerprint(approval.root_ca))
    kit = (workspace / approval.approval.project / f"prod_{approval.signed['ca_info']['provision_version']}"
           / approval.approval.name)
    if approval.approval.site is not None:
        apply_site_policy(kit, approval.approval.site)
    owner_only(kit)
    return kit


RENEWED_FILES = ("client.crt", "client.key", "rootCA.pem")


def renew_kit(approved: Path, request_dir: Path, expected_fingerprint: str, kit: Path) -> Path:
    """Put the renewed certificate and its key into `kit`, keeping everything else of it (local/ above all)."""
    approval = read_approval(approved, expected_fingerprint)
    check_request_dir(request_dir, approval, approved)
    kit = Path(kit)
    current = kit / "startup" / "rootCA.pem"
    if not current.is_file():
        raise KitError(f"{kit}: not a startup kit (no startup/rootCA.pem); give --renew the kit folder to renew")
    if current.read_bytes() != approval.root_ca:
        raise KitError(f"{approved}: signed by another root CA than the kit {kit} trusts; a renewal keeps the CA "
                       "(install a new kit with --workspace instead)")
    if approval.approval.name != _kit_name(kit):
        raise KitError(f"{approved}: made for {approval.approval.name!r}, but the kit {kit} is {_kit_name(kit)!r}; "
                       "renew each kit with its own request")
    with tempfile.TemporaryDirectory(dir=kit.parent) as scratch:
        fresh = install_kit(approved, request_dir, expected_fingerprint, Path(scratch))
        for name in RENEWED_FILES:
            target = kit / "startup" / name
            staged = target.with_name(f".{name}.renewed")
            shutil.copy2(fresh / "startup" / name, staged)
            os.chmod(staged, 0o600)
            os.replace(staged, target)
    return kit


def _kit_name(kit: Path) -> str:
    config = kit / "startup" / "fed_client.json"
    if not config.is_file():
        raise KitError(f"{config}: not found; --renew renews a site kit")
    return str(json.loads(config.read_text())["client"]["fqsn"])


def _request(args: argparse.Namespace) -> int:
    out = Path(args.out or f"{args.name}-request")
    try:
        request_zip = make_request(out, args.project, args.name, args.org, "admin" if args.role else "client",
                                   args.role)
    except KitError as exc:
        print(f"site-agent request: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"request for {args.name} ({'admin, role ' + args.role if args.role else 'site'}) of project "
          f"{args.project}: {request_zip}")
    print(f"  send {request_zip.name} to the federation lead; keep {out} here, owner-only: it holds the private key "
          f"({out / (args.name + '.key')}), which never leaves this machine")
    return 0


def _install(args: argparse.Namespace) -> int:
    try:
        if args.renew:
            kit = renew_kit(args.approved, args.request_dir, args.fingerprint, args.renew)
            print(f"renewed {kit}: its certificate and key replaced, local/ untouched; restart the site "
                  "(site-agent start, or the service) to connect with the new certificate")
        else:
            kit = install_kit(args.approved, args.request_dir, args.fingerprint, args.workspace)
            print(f"kit installed: {kit}\n  next: site-agent check --kit {kit}")
    except KitError as exc:
        print(f"site-agent install-kit: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def register(subparsers: Any) -> None:
    """`request` and `install-kit` (the site's own key, the kit from the lead's approval)."""
    request = subparsers.add_parser(
        "request", help="make this site's (or an admin's) private key and a certificate request for the lead",
        description="Make the private key here, owner-only, and a request for the federation lead to sign.")
    request.add_argument("--project", required=True, help="the federation's project name (the lead tells you)")
    request.add_argument("--name", required=True, help="the site's name as the lead's project.yml lists it")
    request.add_argument("--org", required=True, help="your organisation, as the lead's project.yml lists it")
    request.add_argument("--role", help=f"an admin's FLARE role ({', '.join(REQUESTABLE_ROLES)}): makes an admin's "
                                        "request instead of a site's")
    request.add_argument("--out", help="the request folder (default ./NAME-request); keep it: it holds the key")
    request.set_defaults(func=_request)
    install = subparsers.add_parser(
        "install-kit", help="build this site's startup kit from the lead's approval of its request")
    install.add_argument("approved", type=Path, help=f"the {APPROVED_SUFFIX} file the lead returned")
    install.add_argument("--request-dir", type=Path, required=True, help="the folder `site-agent request` made")
    install.add_argument("--fingerprint", required=True,
                         help="the root CA's SHA-256 fingerprint, as the lead gave it to you out of band")
    where = install.add_mutually_exclusive_group(required=True)
    where.add_argument("--workspace", type=Path, help="where the kit is built (<project>/prod_NN/<name> inside)")
    where.add_argument("--renew", type=Path, metavar="KIT",
                       help="an installed kit whose certificate and key this approval renews (local/ kept)")
    install.set_defaults(func=_install)
