"""Distributed provisioning through the product's commands: the lead's workspace never holds a participant's key,
and every attempt to get a kit the lead did not approve for this request is refused, named, with a non-zero exit.

The federation itself (it trains, renews and revokes) is in tests/federation/test_distributed_federation.py.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from support import ADMIN, SITES, distributed_demo_federation

from provisioning.cli import main as fl_provision
from provisioning.distributed import LeadWorkspace, certificate_lines
from server_app.admission import PARTICIPANTS_FILE, Participants, read_participants
from site_agent.cli import main as site_agent
from site_agent.kit.enrolment import EXIT_REFUSED
from site_agent.kit.kit_policy import fingerprint
from site_agent.kit.preflight import WARN, check_certificate
from site_agent.kit.startup import SiteKit


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return distributed_demo_federation(tmp_path_factory.mktemp("distributed"))


def _key_material(key_file: Path) -> list[bytes]:
    """A private key as it could be stored: its PEM body lines and its DER bytes."""
    pem = key_file.read_bytes()
    key = serialization.load_pem_private_key(pem, password=None)
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    body = [line for line in pem.splitlines() if line and not line.startswith(b"-----")]
    return [der, *body[1:-1]]


def _contents(label: str, data: bytes) -> list[tuple[str, bytes]]:
    """A file's bytes and, for a zip, every member's, down to zips inside zips."""
    found = [(label, data)]
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as bundle:
            for name in bundle.namelist():
                found += _contents(f"{label}!{name}", bundle.read(name))
    return found


def test_the_leads_workspace_holds_no_participants_key(built):
    files = [found for path in built.lead.rglob("*") if path.is_file()
             for found in _contents(str(path), path.read_bytes())]
    keys = {name: _key_material(built.request_dir(name) / f"{name}.key") for name in [*SITES, ADMIN]}
    keys["server"] = _key_material(built.server_kit() / "startup" / "server.key")
    assert len(files) > 8
    for path, data in files:
        assert b"PRIVATE KEY" not in data, path
        for name, material in keys.items():
            assert not any(piece in data for piece in material), f"{path} holds {name}'s key"
    for name in [*SITES, ADMIN]:
        key = built.federation.kit(name) / "startup" / "client.key"
        assert key.read_bytes() == (built.request_dir(name) / f"{name}.key").read_bytes()  # made there, kept there
        assert key.stat().st_mode & 0o077 == 0 and built.request_dir(name).stat().st_mode & 0o077 == 0
    assert not (built.lead / "rootCA.key").exists() and (built.ca / "rootCA.key").is_file()


def test_the_server_pins_every_approved_certificate(built):
    listed = read_participants(built.server_kit() / "local" / PARTICIPANTS_FILE)
    assert listed.sites == frozenset(SITES) and listed.admins == frozenset({ADMIN})
    records = json.loads((built.lead / "certificates.json").read_text())
    assert listed.certificates == {r["name"]: r["serial"] for r in records if r["status"] == "approved"}
    assert read_participants(built.lead / PARTICIPANTS_FILE) == listed


def _request(home: Path, project: str, name: str, org: str, *extra: str) -> Path:
    assert site_agent(["request", "--project", project, "--name", name, "--org", org, "--out", str(home),
                       *extra]) == 0
    return home / f"{name}.request.zip"


def _approve(built, request_zip: Path, lead: Path | None = None, ca: Path | None = None) -> int:
    return fl_provision(["approve", str(request_zip), "--workspace", str(lead or built.lead),
                         "--ca-dir", str(ca or built.ca)])


def test_a_request_the_project_does_not_list_is_refused_by_name(built, tmp_path, capsys):
    project = built.federation.project
    cases = [
        (_request(tmp_path / "a", project, "site-9", "site_9"), "'site-9' is not a participant of project"),
        (_request(tmp_path / "b", "another-project", "site-1", "site_1"),
         "a request for project 'another-project', not"),
        (_request(tmp_path / "c", project, "site-1", "someone_else"),
         "'site-1' gives org 'someone_else', the project lists 'site_1'"),
        (_request(tmp_path / "d", project, ADMIN, "coordinating_centre", "--role", "member"),
         f"admin '{ADMIN}' asks for role 'member', the project gives it 'lead'"),
    ]
    tampered = tmp_path / "tampered.request.zip"  # another org's request, edited to the org the project lists
    with zipfile.ZipFile(cases[2][0]) as source, zipfile.ZipFile(tampered, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            target.writestr(name, data.replace(b"someone_else", b"site_1") if name == "request.json" else data)
    cases.append((tampered, "site.yaml field 'org' does not match request metadata"))
    before = (built.lead / "certificates.json").read_bytes()
    for request_zip, message in cases:
        capsys.readouterr()
        assert _approve(built, request_zip) == 1
        assert message in capsys.readouterr().err, request_zip
    assert (built.lead / "certificates.json").read_bytes() == before  # nothing recorded, nothing signed


def test_a_project_admin_request_and_a_foreign_ca_are_refused(built, tmp_path, capsys):
    assert site_agent(["request", "--project", "p", "--name", "x@y.org", "--org", "o", "--role", "project_admin",
                       "--out", str(tmp_path / "r")]) == EXIT_REFUSED
    assert "cannot ask for role 'project_admin'" in capsys.readouterr().err and not (tmp_path / "r").exists()
    other = tmp_path / "other"
    assert fl_provision(["init", "--workspace", str(other / "lead"), "--ca-dir", str(other / "ca"), "--name",
                         built.federation.project]) == 0
    capsys.readouterr()
    request_zip = _request(tmp_path / "s1", built.federation.project, "site-1", "site_1")
    assert _approve(built, request_zip, ca=other / "ca") == 1
    assert "holds another root CA than" in capsys.readouterr().err
    assert _approve(built, request_zip, ca=tmp_path / "empty") == 1
    assert "no rootCA.key; mount the medium" in capsys.readouterr().err


@contextmanager
def _approved_again(built, out: Path, *approve_options: str) -> Iterator[tuple[Path, Path]]:
    """A fresh request of site-1 (in its own folder) and the lead's approval of it, copied out of the workspace;
    the workspace's record is put back afterwards, so the module's federation keeps its pins."""
    saved = {name: (built.lead / name).read_bytes() for name in ("certificates.json", PARTICIPANTS_FILE)}
    request = out / "site-1-request"
    request_zip = _request(request, built.federation.project, "site-1", "site_1")
    assert fl_provision(["approve", str(request_zip), "--workspace", str(built.lead), "--ca-dir", str(built.ca),
                         *approve_options]) == 0
    approved = shutil.copy(built.lead / "approved" / "site-1.approved.zip", out / "site-1.approved.zip")
    try:
        yield Path(approved), request
    finally:
        for name, data in saved.items():
            (built.lead / name).write_bytes(data)


@pytest.fixture()
def site_1_approval(built, tmp_path):
    with _approved_again(built, tmp_path) as approval:
        yield approval


def test_a_certificate_near_its_end_is_warned_with_the_renewal_commands(built, tmp_path):
    with _approved_again(built, tmp_path, "--valid-days", "10") as (approved, request):
        assert _install(approved, request, built.fingerprint, tmp_path / "kits") == 0
        lines = {line.split()[0]: line for line in certificate_lines(LeadWorkspace(built.lead))
                 if " approved " in line}
        assert "renew: ask it for a new request" in lines["site-1"]  # the lead's list flags it too
        assert "renew" not in lines["site-2"] and "days left" in lines["site-2"]
    kit = SiteKit.open(next((tmp_path / "kits").rglob("fed_client.json")).parent.parent)
    result = check_certificate(kit)
    assert result.status == WARN and ("(9 days)" in result.detail or "(10 days)" in result.detail)
    assert (f"site-agent request --project {built.federation.project} --name site-1 --org site_1 --out NEW_FOLDER"
            in result.fix and f"--renew {kit.root}" in result.fix)


def _install(approved: Path, request: Path, fingerprint: str, workspace: Path) -> int:
    return site_agent(["install-kit", str(approved), "--request-dir", str(request), "--fingerprint", fingerprint,
                       "--workspace", str(workspace)])


def _rewrite(approved: Path, out: Path, member: str, change) -> Path:
    """A copy of `approved` with one member changed (`member` inside FLARE's signed zip when it has a '/')."""
    inner_name, _, inner_member = member.partition("/")
    with zipfile.ZipFile(approved) as source, zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name == inner_name and not inner_member:
                data = change(data)
            elif name == inner_name:
                buffer = io.BytesIO()
                with zipfile.ZipFile(io.BytesIO(data)) as inner, zipfile.ZipFile(buffer, "w") as rewritten:
                    for entry in inner.namelist():
                        value = inner.read(entry)
                        rewritten.writestr(entry, change(value) if entry == inner_member else value)
                data = buffer.getvalue()
            target.writestr(name, data)
    return out


def test_an_approval_installs_only_as_signed_and_only_with_its_own_key(built, site_1_approval, tmp_path, capsys):
    approved, request = site_1_approval
    policy_changed = _rewrite(approved, tmp_path / "p.approved.zip", "kit_policy.json",
                              lambda d: d.replace(b'"stream_logs": false', b'"stream_logs": true'))
    signed_changed = _rewrite(approved, tmp_path / "s.approved.zip", "site-1.signed.zip/signed.json",
                              lambda d: d.replace(b'"org": "site_1"', b'"org": "elsewhere"'))
    other_key = tmp_path / "other-key"
    shutil.copytree(request, other_key)
    _request(tmp_path / "spare", built.federation.project, "site-1", "site_1")
    shutil.copy(tmp_path / "spare" / "site-1.key", other_key / "site-1.key")
    cases = [
        (policy_changed, request, built.fingerprint, "the kit policy's signature does not verify with the root CA"),
        (signed_changed, request, built.fingerprint, "Signed approval metadata signature is invalid"),
        (approved, other_key, built.fingerprint, "The local private key does not match the signed certificate"),
        (approved, built.request_dir("site-2"), built.fingerprint, "answers the request of 'site-1'"),
        (approved, request, "SHA256:" + ":".join(["AB"] * 32), "as the federation lead told you; do not install"),
    ]
    for index, (candidate, request_dir, given, message) in enumerate(cases):
        capsys.readouterr()
        assert _install(candidate, request_dir, given, tmp_path / f"kit-{index}") == EXIT_REFUSED, message
        assert message in capsys.readouterr().err
        assert not list((tmp_path / f"kit-{index}").rglob("client.crt")), message  # no kit left behind
    assert _install(approved, request, built.fingerprint, tmp_path / "good") == 0
    site_2 = built.federation.kit("site-2")
    before = (site_2 / "startup" / "client.crt").read_bytes()
    capsys.readouterr()
    assert site_agent(["install-kit", str(approved), "--request-dir", str(request), "--fingerprint",
                       built.fingerprint, "--renew", str(site_2)]) == EXIT_REFUSED
    assert "made for 'site-1', but the kit" in capsys.readouterr().err
    assert (site_2 / "startup" / "client.crt").read_bytes() == before  # nothing of site-2's kit replaced


def test_an_approval_of_another_project_is_refused(built, tmp_path, capsys):
    other = tmp_path / "other"
    assert fl_provision(["init", "--workspace", str(other / "lead"), "--ca-dir", str(other / "ca"), "--name",
                         "other-project", "--sites", "site-1"]) == 0
    foreign = _request(tmp_path / "foreign", "other-project", "site-1", "site_1")
    assert _approve(built, foreign, lead=other / "lead", ca=other / "ca") == 0
    other_fingerprint = fingerprint((other / "lead" / "rootCA.pem").read_bytes())
    approved = other / "lead" / "approved" / "site-1.approved.zip"
    capsys.readouterr()
    assert _install(approved, built.request_dir("site-1"), built.fingerprint, tmp_path / "k1") == EXIT_REFUSED
    assert "as the federation lead told you" in capsys.readouterr().err
    assert _install(approved, built.request_dir("site-1"), other_fingerprint, tmp_path / "k2") == EXIT_REFUSED
    assert (f"signed for project 'other-project', but your request in {built.request_dir('site-1')} was for project "
            f"'{built.federation.project}'") in capsys.readouterr().err


def test_a_renewal_pins_the_new_certificate_and_a_revocation_refuses_the_old_for_good(built, site_1_approval,
                                                                                     capsys):
    records = json.loads((built.lead / "certificates.json").read_text())
    site_1 = [r for r in records if r["name"] == "site-1"]
    assert [r["status"] for r in site_1] == ["replaced", "approved"]
    old, new = site_1[0]["serial"], site_1[1]["serial"]
    listed = read_participants(built.lead / PARTICIPANTS_FILE)
    assert listed.certificates["site-1"] == new
    assert "a renewal replaced it" in str(listed.refusal("site-1", "regular", old))
    assert listed.refusal("site-1", "regular", new) is None

    assert fl_provision(["revoke", "site-1", "--workspace", str(built.lead)]) == 0
    listed = read_participants(built.lead / PARTICIPANTS_FILE)
    assert "site-1" not in listed.sites and listed.revoked == {new: "site-1"}
    capsys.readouterr()
    assert fl_provision(["revoke", "site-1", "--workspace", str(built.lead)]) == 1
    assert "'site-1' holds no approved certificate" in capsys.readouterr().err
    readmitted = Participants(listed.project, listed.sites | {"site-1"}, listed.admins,
                              certificates={"site-1": "f00d"}, revoked=listed.revoked)
    assert "was revoked by the federation lead" in str(readmitted.refusal("site-1", "regular", new))
    assert "presented no certificate" in str(readmitted.refusal("site-1", "regular", ""))
