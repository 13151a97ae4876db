"""A site's startup kit as FLARE's provisioning writes it, and the certificate checks FLARE itself skips.

FLARE's `preflight-check` passes a kit whose site certificate was signed by another CA; the client then hangs
silently. We verify the chain, the dates and the key ourselves with `cryptography`.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

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
            raise KitError(f"{config_path}: not found; give the folder of the site's startup kit (it holds startup/ and local/)")
        try:
            config = json.loads(config_path.read_text())
            server = config["servers"][0]
            host, port = server["service"]["target"].rsplit(":", 1)
            return cls(root, config["client"]["fqsn"], host, int(port), server.get("identity", host))
        except (json.JSONDecodeError, KeyError, IndexError, ValueError) as exc:
            raise KitError(f"{config_path}: unreadable ({exc!r}); ask the federation lead for a fresh kit") from exc


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


def verify_certificate_chain(
    cert_path: Path, key_path: Path, root_ca_path: Path, now: dt.datetime | None = None
) -> CertificateReport:
    """Check that the certificate was issued by the kit's root CA, is within its dates, and matches the private key."""
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
            raise KitError(f"{path}: {label} is not valid before {c.not_valid_before_utc:%Y-%m-%d}; "
                           "check this machine's clock")
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
    days_left = (cert.not_valid_after_utc - now).days
    return CertificateReport(_common_name(cert.subject), _common_name(cert.issuer), cert.not_valid_after_utc, days_left)
