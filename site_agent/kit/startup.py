"""A site's startup kit as FLARE's provisioning writes it, and the certificate checks FLARE itself skips.

FLARE's `preflight-check` passes a kit whose site certificate was signed by another CA; the client then hangs
silently. We verify the chain, the dates, the key and the site name ourselves with `cryptography`, and ask the
server itself whether it accepts the certificate (`exchange_with_server`).
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from site_agent.kit.site_config import SiteConfigError, configured_proxy

EXPIRY_WARNING_DAYS = 30


class KitError(ValueError):
    """The startup kit is incomplete or its certificates are wrong; the message names the file and the fix."""


@dataclass(frozen=True)
class SiteKit:
    root: Path
    site_name: str
    server_host: str
    server_port: int
    server_identity: str
    scheme: str = "grpc"  # FLARE's transport to the server: grpc, http (aiohttp over TLS) or tcp
    proxy: str | None = None  # http://host:port of the hospital's proxy (local/site_agent.json), or direct

    @property
    def startup(self) -> Path:
        return self.root / "startup"

    @property
    def certificate(self) -> Path:
        return self.startup / "client.crt"

    @property
    def private_key(self) -> Path:
        return self.startup / "client.key"

    @property
    def root_ca(self) -> Path:
        return self.startup / "rootCA.pem"

    @classmethod
    def open(cls, root: Path) -> SiteKit:
        root = Path(root)
        config_path = root / "startup" / "fed_client.json"
        if not config_path.is_file():
            raise KitError(f"{config_path}: not found; "
                           "give the folder of the site's startup kit (it holds startup/ and local/)")
        try:
            config = json.loads(config_path.read_text())
            server = config["servers"][0]
            host, port = server["service"]["target"].rsplit(":", 1)
            kit = cls(root, config["client"]["fqsn"], host, int(port), server.get("identity", host),
                      server["service"].get("scheme", "grpc"))
        except (json.JSONDecodeError, KeyError, IndexError, ValueError) as exc:
            raise KitError(f"{config_path}: unreadable ({exc!r}); ask the federation lead for a fresh kit") from exc
        try:
            return replace(kit, proxy=configured_proxy(root))
        except SiteConfigError:  # the site configuration's own check names it; the kit itself is fine
            return kit


class ProxyRefused(KitError):
    """The hospital's proxy would not open a tunnel to the server; the message quotes its answer."""


def open_server_socket(kit: SiteKit, timeout: float) -> socket.socket:
    """A TCP connection to the kit's server: direct, or through `kit.proxy` with an HTTP CONNECT tunnel (the way
    FLARE's grpc transport goes when the client has `https_proxy`). The TLS runs end to end inside the tunnel, so
    the proxy sees neither the certificates' keys nor the traffic."""
    if not kit.proxy:
        return socket.create_connection((kit.server_host, kit.server_port), timeout=timeout)
    proxy = urlsplit(kit.proxy)
    target = f"{kit.server_host}:{kit.server_port}"
    sock = socket.create_connection((str(proxy.hostname), int(proxy.port or 80)), timeout=timeout)
    try:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer and len(answer) < 8192:
            chunk = sock.recv(1024)
            if not chunk:
                break
            answer += chunk
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")
        if status.split(" ")[1:2] != ["200"]:
            raise ProxyRefused(f"the proxy {kit.proxy} would not open a tunnel to {target} (it answered "
                               f"{status!r}): ask the network team to allow CONNECT from this machine to {target}")
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass(frozen=True)
class CertificateReport:
    subject: str
    issuer: str
    not_after: dt.datetime
    days_left: int


def _load_certificate(path: Path) -> x509.Certificate:
    if not path.is_file():
        raise KitError(f"{path}: missing; ask the federation lead for a complete startup kit")
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError as exc:
        raise KitError(f"{path}: not a PEM certificate ({exc}); ask the federation lead for a fresh kit") from exc


def _common_name(name: x509.Name) -> str:
    attrs = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else name.rfc4514_string()


def certificate_organisation(cert_path: Path) -> str:
    """The certificate's O: FLARE's start scripts pass it to the client and server as `org`."""
    attrs = _load_certificate(cert_path).subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return str(attrs[0].value) if attrs else ""


def verify_certificate_chain(
    cert_path: Path, key_path: Path, root_ca_path: Path, now: dt.datetime | None = None, site_name: str | None = None
) -> CertificateReport:
    """Check that the certificate was issued by the kit's root CA, is within its dates, matches the private key and,
    given `site_name`, is this site's: the server refuses a site whose name differs from its certificate's, silently."""
    now = now or dt.datetime.now(dt.UTC)
    cert, root = _load_certificate(cert_path), _load_certificate(root_ca_path)
    try:
        cert.verify_directly_issued_by(root)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise KitError(
            f"{cert_path}: not signed by this kit's root CA {root_ca_path} (certificate issuer "
            f"{_common_name(cert.issuer)!r}, root CA {_common_name(root.subject)!r}; {exc or 'bad signature'}). "
            "The certificate comes from another provisioning: "
            "ask the federation lead for this site's kit from the current project"
        ) from exc
    for label, c, path in (("certificate", cert, cert_path), ("root CA", root, root_ca_path)):
        if now < c.not_valid_before_utc:
            raise KitError(f"{path}: {label} is not valid before {c.not_valid_before_utc:%Y-%m-%d %H:%M} UTC; "
                           "check this machine's clock (timedatectl); if it is right, the certificate was issued "
                           "with a future start date: ask the federation lead to re-provision")
        if now > c.not_valid_after_utc:
            raise KitError(f"{path}: {label} expired on {c.not_valid_after_utc:%Y-%m-%d}; "
                           "ask the federation lead to re-provision")
    if not key_path.is_file():
        raise KitError(f"{key_path}: missing; ask the federation lead for a complete startup kit")
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise KitError(f"{key_path}: not an unencrypted PEM private key ({exc})") from exc
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    pem = serialization.Encoding.PEM
    if key.public_key().public_bytes(pem, public) != cert.public_key().public_bytes(pem, public):
        raise KitError(f"{key_path}: does not belong to {cert_path}; the kit mixes files from different provisionings")
    subject = _common_name(cert.subject)
    if site_name is not None and subject != site_name:
        raise KitError(f"{cert_path}: certificate is for site {subject!r} but the kit's startup/fed_client.json names "
                       f"the site {site_name!r}; the server refuses a site whose name differs from its certificate's. "
                       "Use the kit the federation lead made for this site, unedited")
    days_left = (cert.not_valid_after_utc - now).days
    return CertificateReport(subject, _common_name(cert.issuer), cert.not_valid_after_utc, days_left)


class ServerRefused(KitError):
    """The server completed the TLS handshake, then refused this site's certificate (it closed the connection)."""


@dataclass(frozen=True)
class ServerAnswer:
    names: list[str]  # common names in the server's certificate
    reply: str  # the server's answer to data sent after the handshake; "" on a transport that cannot be asked


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + empty SETTINGS frame
_HTTP2_SETTINGS = 4


def exchange_with_server(kit: SiteKit, timeout: float = 5.0) -> ServerAnswer:
    """Mutual-TLS handshake with the kit's server, then one protocol exchange.

    With TLS 1.3 the site's handshake completes before the server has checked the site's certificate; a server that
    refuses it closes the connection afterwards. Only an answer to data sent after the handshake proves acceptance:
    an HTTP response on FLARE's http transport (aiohttp), a SETTINGS frame on grpc (HTTP/2). Raises ssl.SSLError
    when the handshake fails, ServerRefused when the server closes the connection, OSError when unreachable.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(kit.root_ca))
    context.check_hostname = False  # FLARE names the server by its provisioned identity; the caller checks it
    context.load_cert_chain(str(kit.certificate), str(kit.private_key))
    requests = {"http": f"GET / HTTP/1.1\r\nHost: {kit.server_host}\r\nConnection: close\r\n\r\n".encode(),
                "grpc": _HTTP2_PREFACE}
    request = requests.get(kit.scheme)
    if kit.scheme == "grpc":
        context.set_alpn_protocols(["h2"])
    with open_server_socket(kit, timeout) as sock:
        with context.wrap_socket(sock) as tls:
            subject = cast("tuple[tuple[tuple[str, str], ...], ...]", (tls.getpeercert() or {}).get("subject", ()))
            names = [value for rdn in subject for key, value in rdn if key == "commonName"]
            if request is None:
                return ServerAnswer(names, "")
            try:
                tls.sendall(request)
                reply = tls.recv(64)
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as exc:
                raise ServerRefused(f"the server ended the connection after the TLS handshake ({exc})") from exc
    if not reply:
        raise ServerRefused("the server closed the connection after the TLS handshake")
    if kit.scheme == "grpc":
        return ServerAnswer(names, "an HTTP/2 SETTINGS frame" if len(reply) > 3 and reply[3] == _HTTP2_SETTINGS
                            else f"{len(reply)} bytes")
    return ServerAnswer(names, reply.split(b"\r\n", 1)[0].decode("latin-1"))
