"""The policy the federation lead decides for every site kit, and how it is written into a kit FLARE assembled.

One definition for both ways a kit is made: `fl-provision` (central, the lead makes every kit) applies it to each
site kit it writes, and `fl-provision approve` (distributed, the hospital makes its own key) signs it with the root
CA's key into the approval that `site-agent install-kit` checks and applies at the hospital. The values are
computed at the lead (the class allow-list comes from the job kinds the lead's software registers); the site only
writes them, so a site's kit says exactly what the lead approved.

What a kit gets: FLARE's `local/resources.json.default` with the exact class allow-list in enforce mode, FLARE's
log streaming to the server off unless asked for (site logs name local files), the site guard and site deployer
added, FLARE's `process_launcher` replaced by the warm launcher when asked for; `local/comm_config.json`,
`local/authorization.json` and the default privacy policy `local/site_policy.json` (which the hospital then edits).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from site_agent.kit.startup import KitError
from site_agent.privacy.policy import load_policy, write_private

LOG_STREAMER_SUFFIX = ".SiteLogStreamer"


@dataclass(frozen=True)
class SiteKitPolicy:
    class_allow_list: tuple[str, ...]
    components: tuple[dict[str, Any], ...]  # added to FLARE's; one of FLARE's with the same id is replaced
    job_launcher: dict[str, Any] | None  # replaces FLARE's `process_launcher`; None keeps FLARE's
    stream_logs: bool
    comm_config: dict[str, Any]
    authorization: dict[str, Any]
    site_policy: dict[str, Any]  # the default local/site_policy.json

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, content: dict[str, Any]) -> SiteKitPolicy:
        return cls(tuple(content["class_allow_list"]), tuple(content["components"]), content["job_launcher"],
                   bool(content["stream_logs"]), dict(content["comm_config"]), dict(content["authorization"]),
                   dict(content["site_policy"]))


def _write_json(path: Path, content: dict[str, Any]) -> None:
    write_private(path, json.dumps(content, indent=2) + "\n")


def apply_site_policy(kit: Path, policy: SiteKitPolicy) -> None:
    """Write `policy` into the site kit at `kit` (FLARE's `local/resources.json.default` is the starting point).
    The privacy policy is read back with the site's own reader, so a kit never holds one the site would refuse."""
    local = Path(kit) / "local"
    resources = json.loads((local / "resources.json.default").read_text())
    resources["class_list_enforcement_mode"] = "enforce"
    resources["class_allow_list"] = list(policy.class_allow_list)
    resources["allow_log_streaming"] = policy.stream_logs
    replaced = {c["id"] for c in policy.components}
    components = [c for c in resources.get("components", [])
                  if c.get("id") not in replaced
                  and (policy.stream_logs or not c.get("path", "").endswith(LOG_STREAMER_SUFFIX))]
    if policy.job_launcher is not None:
        components = [policy.job_launcher if c.get("id") == policy.job_launcher["id"] else c for c in components]
    resources["components"] = components + list(policy.components)
    _write_json(local / "resources.json", resources)
    _write_json(local / "comm_config.json", policy.comm_config)
    _write_json(local / "authorization.json", policy.authorization)
    _write_json(local / "site_policy.json", policy.site_policy)
    load_policy(local)


APPROVAL_FILE = "kit_policy.json"
SIGNATURE_FILE = "kit_policy.json.sig"


@dataclass(frozen=True)
class KitApproval:
    """What `fl-provision approve` signs beside FLARE's signed certificate: for whom (project, name, kind, FLARE's
    request id, the certificate's hash, so that it cannot be moved to another approval) and, for a site, its kit
    policy."""

    project: str
    name: str
    kind: str  # FLARE's request kind: site, user (an admin) or server
    request_id: str
    certificate_sha256: str
    site: SiteKitPolicy | None

    def to_bytes(self) -> bytes:
        content = {**asdict(self), "site": self.site.to_json() if self.site else None}
        return json.dumps(content, indent=2, sort_keys=True).encode() + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> KitApproval:
        try:
            content = json.loads(data)
            site = SiteKitPolicy.from_json(content["site"]) if content["site"] is not None else None
            return cls(content["project"], content["name"], content["kind"], content["request_id"],
                       content["certificate_sha256"], site)
        except (ValueError, KeyError, TypeError) as exc:
            raise KitError(f"{source}: not a kit approval ({exc!r}); ask the federation lead to approve the "
                           "request again") from exc


def fingerprint(certificate_pem: bytes) -> str:
    """The SHA-256 fingerprint of a PEM certificate as FLARE and OpenSSL print it (`SHA256:AB:CD:...`)."""
    digest = x509.load_pem_x509_certificate(certificate_pem).fingerprint(hashes.SHA256()).hex().upper()
    return "SHA256:" + ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def same_fingerprint(given: str, actual: str) -> bool:
    """Compare fingerprints however they were typed: with or without `SHA256:`, colons, case or OpenSSL's prefix."""
    def bare(value: str) -> str:
        value = value.strip().lower().removeprefix("sha256 fingerprint=").removeprefix("sha256:")
        return value.replace(":", "").replace(" ", "")

    return bare(given) == bare(actual)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verify_approval(data: bytes, signature: bytes, root_ca_pem: bytes, source: str) -> KitApproval:
    """The approval, once its signature is verified with the root CA's public key; KitError naming `source` if not."""
    public_key = x509.load_pem_x509_certificate(root_ca_pem).public_key()
    if not isinstance(public_key, rsa.RSAPublicKey):
        raise KitError(f"{source}: the root CA's key is not RSA, which fl-provision signs with")
    try:
        public_key.verify(base64.b64decode(signature, validate=True), data, padding.PKCS1v15(), hashes.SHA256())
    except (InvalidSignature, ValueError) as exc:
        raise KitError(f"{source}: the kit policy's signature does not verify with the root CA (it was changed "
                       "after the federation lead approved it, or another CA signed it); ask the lead to approve "
                       "the request again and send the file over a channel that keeps it intact") from exc
    return KitApproval.from_bytes(data, source)
