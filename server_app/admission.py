"""Only the provisioned project's participants join the server: sites, admins (and relays) named in its list.

FLARE's server registers any client whose certificate the federation's root CA signed, whatever its name: a kit
for `site-9` made from the same CA state (a second project.yml, or the CA key in `state/cert.json`) would join,
receive jobs and be averaged. `fl-provision` writes the project's participants into the server kit's
`local/participants.json`; this component, configured in the server kit's `local/resources.json`, puts a check in
front of FLARE's registration and heartbeat handlers:

- a registration (site, relay or admin login) under a name the list does not hold is refused before FLARE looks at
  it, with the reason in the server's log and in the refusal the client logs ("registration rejected: ...");
- a heartbeat from a site the list no longer holds is refused too, so a site taken off the list, or one that tries
  to re-activate an old token after a server restart, is out at its next heartbeat.

The name checked is the one FLARE then verifies against the certificate's common name, so a listed name on an
unlisted certificate still fails FLARE's own check. Where the list pins a name's certificate (distributed
provisioning, `fl-provision approve`: the serial of the one certificate approved for it), a registration must
present that certificate: one replaced by a renewal or revoked (`fl-provision revoke`) is refused, and a site that
registered with it is put out at its next heartbeat once the list changes. The certificate read is the one FLARE's
registration carries for its identity check (`IdentityChallengeKey.CERT` in the request's Shareable), and FLARE
then verifies that the registering client holds its key. The list is re-read whenever the file changes: adding a site
(`fl-provision` with the new site, then this one file copied to the running server's kit) needs no restart, and
running jobs are untouched. A list that cannot be read keeps the last good one in force (and the log says why);
with none read yet, every registration is refused: the server fails closed.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from nvflare.apis.event_type import EventType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_context import FLContext
from nvflare.fuel.f3.cellnet.core_cell import make_reply
from nvflare.fuel.f3.cellnet.defs import CellChannelTopic, IdentityChallengeKey
from nvflare.fuel.f3.cellnet.defs import ReturnCode as CellReturnCode
from nvflare.fuel.f3.message import Message
from nvflare.private.defs import CellMessageHeaderKeys, ClientType

from server_app.cell_handlers import current_handler, install

PARTICIPANTS_FILE = "participants.json"
_ROLES = {ClientType.REGULAR: "sites", ClientType.ADMIN: "admins", ClientType.RELAY: "relays"}
_NOUNS = {"sites": "site", "admins": "admin", "relays": "relay"}


class ParticipantsError(ValueError):
    """The participants list is missing or malformed; the message names the file and the fix."""


@dataclass(frozen=True)
class Participants:
    """Who may join: the provisioned project's sites, admins and relays, by certificate common name, and where a
    name's certificate is pinned, only with that certificate (serials as lower-case hex)."""

    project: str
    sites: frozenset[str]
    admins: frozenset[str]
    relays: frozenset[str] = frozenset()
    certificates: Mapping[str, str] = field(default_factory=dict)  # name -> the serial approved for it
    revoked: Mapping[str, str] = field(default_factory=dict)  # serial -> the name it was issued to

    def listed(self, client_type: str) -> frozenset[str]:
        """The names of FLARE client type `client_type` (a site, an admin or a relay) that may join."""
        names: frozenset[str] = getattr(self, _ROLES.get(client_type, "sites"))
        return names

    def refusal(self, name: str, client_type: str, serial: str | None = None) -> str | None:
        """Why `name` may not join, as the refused client is told (it does not learn who is listed); None if it may.

        `serial`: the serial of the certificate it presents ("" for none); None where it is not known (a heartbeat
        from a site whose registration this server did not see), which checks the name only."""
        noun = _NOUNS[_ROLES.get(client_type, "sites")]
        if serial and serial in self.revoked:
            return (f"the certificate {serial} of {noun} {self.revoked[serial]!r} was revoked by the federation lead; "
                    "it cannot join with it again (a new key and request: site-agent request, docs/site-it-guide.md)")
        if name not in self.listed(client_type):
            return (f"{noun} {name!r} is not a participant of project {self.project!r} on this server; the federation "
                    f"lead adds it with fl-provision and copies the new server kit's local/{PARTICIPANTS_FILE} to "
                    "the server")
        pinned = self.certificates.get(name)
        if pinned is None or serial is None or serial == pinned:
            return None
        if not serial:
            return f"{noun} {name!r} presented no certificate, and only the one approved for it may join"
        return (f"the certificate {serial} of {noun} {name!r} is not the one approved for it (a renewal replaced it); "
                "install the kit of the latest approval (site-agent install-kit, docs/site-it-guide.md)")

    def to_json(self) -> dict[str, Any]:
        return {"project": self.project, "sites": sorted(self.sites), "admins": sorted(self.admins),
                "relays": sorted(self.relays), "certificates": dict(sorted(self.certificates.items())),
                "revoked": dict(sorted(self.revoked.items()))}


def read_participants(path: Path) -> Participants:
    """The list at `path`; ParticipantsError naming the file, the field and the fix when it is not one."""
    fix = "run fl-provision again and copy the server kit's local/participants.json from its output"
    try:
        content = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ParticipantsError(f"{path}: not found; {fix}") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise ParticipantsError(f"{path}: unreadable ({exc}); {fix}") from exc
    if not isinstance(content, dict) or not isinstance(content.get("project"), str):
        raise ParticipantsError(f"{path}: not a participants list (no 'project' name); {fix}")
    names: dict[str, frozenset[str]] = {}
    for role in ("sites", "admins", "relays"):
        value = content.get(role, [])
        if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
            raise ParticipantsError(f"{path}: '{role}' must be a list of names, not {value!r}; {fix}")
        names[role] = frozenset(value)
    pins: dict[str, dict[str, str]] = {}
    for key in ("certificates", "revoked"):
        value = content.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise ParticipantsError(f"{path}: '{key}' must map names and serials to strings, not {value!r}; {fix}")
        pins[key] = value
    return Participants(content["project"], names["sites"], names["admins"], names["relays"], pins["certificates"],
                        pins["revoked"])


def certificate_serial(certificate_pem: bytes) -> str:
    """A certificate's serial as the participants list writes it (lower-case hex; the first of a PEM chain)."""
    return format(x509.load_pem_x509_certificates(certificate_pem)[0].serial_number, "x")


def write_participants(local_dir: Path, participants: Participants) -> Path:
    """Write `<server kit>/local/participants.json` (fl-provision), owner-only like the rest of the server's local."""
    path = Path(local_dir) / PARTICIPANTS_FILE
    path.write_text(json.dumps(participants.to_json(), indent=2) + "\n")
    os.chmod(path, 0o600)
    return path


class ParticipantsList:
    """The list in force: re-read when the file changes (checked with one stat per call), else the last good one."""

    def __init__(self, path: Path, warn: Callable[[str], None]):
        self.path = path
        self.warn = warn
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._read = False
        self._current: Participants | None = None
        self._error = ""

    def current(self) -> Participants | None:
        try:
            stat = os.stat(self.path)
            stamp: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        with self._lock:
            if not self._read or stamp != self._stamp:
                self._stamp, self._read = stamp, True
                try:
                    self._current = read_participants(self.path)
                    self._error = ""
                except ParticipantsError as exc:
                    if str(exc) != self._error:
                        kept = "the last good list stays in force" if self._current else "every registration is refused"
                        self.warn(f"{exc}; {kept}")
                    self._error = str(exc)
            return self._current

    def refusal(self, name: str, client_type: str, serial: str | None = None) -> tuple[str, str] | None:
        """None when `name` may join; else what the refused client is told and what the server's log says."""
        participants = self.current()
        if participants is None:
            return ("the server has no participants list; nobody can join until the federation lead fixes it",
                    f"no participants list ({self._error})")
        reason = participants.refusal(name, client_type, serial)
        if reason is None:
            return None
        listed = ", ".join(sorted(participants.listed(client_type))) or "none"
        return reason, f"{reason} (listed in {self.path}: {listed})"


class SiteAdmission(FLComponent):
    """At server start-up: registrations and heartbeats of names outside `local/participants.json` are refused.

    Installed at SYSTEM_BOOTSTRAP, a moment after FLARE's server starts listening: an unlisted site that registered
    in that moment is put out at its next heartbeat."""

    def __init__(self, participants_file: str = PARTICIPANTS_FILE):
        super().__init__()
        self.participants_file = participants_file
        self.participants: ParticipantsList | None = None
        self.registered: dict[str, str] = {}  # name -> the serial of the certificate it last registered with

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type != EventType.SYSTEM_BOOTSTRAP:  # before SYSTEM_START, as soon as the server's cell is up
            return
        engine = fl_ctx.get_engine()
        local = Path(engine.get_workspace().get_site_config_dir())
        self.participants = ParticipantsList(local / self.participants_file, self.logger.error)
        listed = self.participants.current()
        if listed is not None:
            self.logger.info(f"admitting the participants of project {listed.project!r} in "
                             f"{local / self.participants_file}: sites {sorted(listed.sites)}, "
                             f"admins {sorted(listed.admins)}")
        self.guard(engine.server)

    def guard(self, server: Any) -> None:
        """Put the check in front of `server`'s (FLARE's FederatedServer) registration and heartbeat handlers."""
        def log_out(request: Message) -> None:
            """A site refused at its heartbeat was registered: it leaves the server's client list at once."""
            token = request.get_header(CellMessageHeaderKeys.TOKEN)
            client = server.client_manager.clients.get(token) if token else None
            if client is not None and client.name == request.get_header(CellMessageHeaderKeys.CLIENT_NAME):
                server.logout_client(token)

        for topic, fallback, action, refused in (
                (CellChannelTopic.Register, server.register_client, "registration", None),
                (CellChannelTopic.HEART_BEAT, server.client_heartbeat, "heartbeat", log_out)):
            install(server, topic, self._checked(current_handler(server, topic, fallback), action, refused))

    def _checked(self, handler: Callable[[Message], Message], action: str,
                 on_refusal: Callable[[Message], None] | None) -> Callable[[Message], Message]:
        def check(request: Message) -> Message:
            name = str(request.get_header(CellMessageHeaderKeys.CLIENT_NAME))
            client_type = request.get_header(CellMessageHeaderKeys.CLIENT_TYPE) or ClientType.REGULAR
            serial = _presented_serial(request) if action == "registration" else self.registered.get(name)
            assert self.participants is not None
            refused = self.participants.refusal(name, str(client_type), serial)
            if refused is None:
                if action == "registration" and serial:
                    self.registered[name] = serial
                return handler(request)
            told, logged = refused
            self.logger.error(f"refused the {action} of {name!r}: {logged}")
            if on_refusal is not None:
                on_refusal(request)
            return make_reply(CellReturnCode.UNAUTHENTICATED, told, None)

        return check


def _presented_serial(request: Message) -> str:
    """The serial of the certificate a registration presents for FLARE's identity check; "" if none or unreadable
    (FLARE itself then refuses it in secure mode)."""
    payload = request.payload
    data = payload.get(IdentityChallengeKey.CERT) if isinstance(payload, dict) else None
    if not data:
        return ""
    try:
        return certificate_serial(data if isinstance(data, bytes) else str(data).encode())
    except ValueError:
        return ""
