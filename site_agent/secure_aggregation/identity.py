"""The site's provisioned identity in secure aggregation: it signs its session keys, and checks its peers'.

Without this, the server relays the public keys unchecked and a malicious server could hand each site keys of its
own making (man in the middle) or invent sites. Each site therefore signs its two public keys, the session and its
name with the private key of its provisioned certificate (`startup/client.key`), and checks every peer's
certificate (issued by the federation's root CA, within its dates, its common name the peer's name) and signature
before it shares anything. This is the signature step of Bonawitz et al.'s actively secure variant, on FLARE's own
PKI. In FLARE's simulator there is no startup kit, and nothing is signed or checked.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes
from cryptography.x509.oid import NameOID

from fl_contract.secure_aggregation import SecureAggregationError


@dataclass(frozen=True)
class SigningIdentity:
    """This site's certificate and key, and the federation's root CA that its peers' certificates must chain to."""

    certificate: bytes  # PEM, sent to the peers
    private_key: PrivateKeyTypes
    root_ca: x509.Certificate

    @classmethod
    def from_kit(cls, kit_root: Path) -> SigningIdentity | None:
        """From `<kit>/startup/` (client.crt, client.key, rootCA.pem); None where there is no kit (the simulator)."""
        startup = Path(kit_root) / "startup"
        files = [startup / name for name in ("client.crt", "client.key", "rootCA.pem")]
        if not any(path.is_file() for path in files):
            return None
        try:
            certificate, key, root = (path.read_bytes() for path in files)
            return cls(certificate, serialization.load_pem_private_key(key, password=None),
                       x509.load_pem_x509_certificate(root))
        except (OSError, ValueError, TypeError) as err:
            raise SecureAggregationError(
                f"{startup}: cannot load the site's certificate, key and root CA to sign its secure-"
                f"aggregation keys ({err}); run site-agent check on this kit") from err

    def sign(self, message: bytes) -> bytes:
        key = self.private_key
        if isinstance(key, rsa.RSAPrivateKey):
            return key.sign(message, _PSS, hashes.SHA256())
        if isinstance(key, ec.EllipticCurvePrivateKey):
            return key.sign(message, ec.ECDSA(hashes.SHA256()))
        raise SecureAggregationError(
            f"the site's key is a {type(key).__name__}; secure aggregation signs with RSA or EC keys")

    def verify(self, peer: str, certificate: bytes, signature: bytes, message: bytes,
               now: dt.datetime | None = None) -> None:
        """Raise naming `peer` unless its certificate is the federation's for that name and signs `message`."""
        if not certificate or not signature:
            raise SecureAggregationError(
                f"the server relays keys for {peer} without its certificate and signature; this site "
                "takes part only with signed keys: refusing this aggregation")
        try:
            cert = x509.load_pem_x509_certificate(certificate)
            cert.verify_directly_issued_by(self.root_ca)
        except (ValueError, TypeError, InvalidSignature) as err:
            raise SecureAggregationError(
                f"the certificate relayed for {peer} was not issued by this federation's root CA "
                f"({err or 'bad signature'}): refusing this aggregation") from err
        now = now or dt.datetime.now(dt.UTC)
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            raise SecureAggregationError(
                f"the certificate of {peer} is valid only from {cert.not_valid_before_utc:%Y-%m-%d} to "
                f"{cert.not_valid_after_utc:%Y-%m-%d}: refusing this aggregation")
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        if names != [peer]:
            raise SecureAggregationError(
                f"the server relays keys for {peer} with the certificate of {names}: refusing this "
                "aggregation")
        try:
            _verify(cert.public_key(), signature, message)
        except (InvalidSignature, TypeError) as err:
            raise SecureAggregationError(
                f"the keys relayed for {peer} are not the ones {peer} signed (altered on the way): "
                "refusing this aggregation") from err


_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH)


def _verify(public_key: PublicKeyTypes, signature: bytes, message: bytes) -> None:
    if isinstance(public_key, rsa.RSAPublicKey):
        public_key.verify(signature, message, _PSS, hashes.SHA256())
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        public_key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    else:
        raise TypeError(f"unsupported certificate key {type(public_key).__name__}")
