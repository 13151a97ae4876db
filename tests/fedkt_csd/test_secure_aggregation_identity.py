"""Signed secure-aggregation keys: a site takes part only if every peer's keys carry that peer's signature under a
certificate from the same federation, so a server that swaps or invents keys is refused by name."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from fl_contract.secure_aggregation import SecureAggregationError, generate_keypair
from server_app.privacy.secure_aggregation import Revealed, SecureAggregation
from site_agent.secure_aggregation.identity import SigningIdentity
from site_agent.secure_aggregation.protocol import SecureAggregationSite

SESSION = "job-9/attempt-1"
SITES = ["site-1", "site-2", "site-3", "site-4"]
NOW = dt.datetime.now(dt.UTC)


def _certificate(name: str, key: rsa.RSAPrivateKey, issuer: tuple[str, rsa.RSAPrivateKey] | None = None,
                 days: int = 30) -> x509.Certificate:
    issuer_name, issuer_key = issuer or (name, key)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(NOW - dt.timedelta(days=1)).not_valid_after(NOW + dt.timedelta(days=days))
            .sign(issuer_key, hashes.SHA256()))


def _kit(root: Path, site: str, ca: tuple[str, rsa.RSAPrivateKey], days: int = 30) -> Path:
    """A startup folder as provisioning writes it: the site's certificate and key, the federation's root CA."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    startup = root / site / "startup"
    startup.mkdir(parents=True)
    pem = serialization.Encoding.PEM
    (startup / "client.crt").write_bytes(_certificate(site, key, ca, days).public_bytes(pem))
    (startup / "client.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL,
                                                           serialization.NoEncryption()))
    (startup / "rootCA.pem").write_bytes(_certificate(ca[0], ca[1]).public_bytes(pem))
    return root / site


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SigningIdentity]:
    root = tmp_path_factory.mktemp("kits")
    ca = ("hospital-federation", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    identities = {site: SigningIdentity.from_kit(_kit(root, site, ca)) for site in SITES}
    other_ca = ("another-federation", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    identities["foreign"] = SigningIdentity.from_kit(_kit(root / "other", "site-2", other_ca))
    identities["expired"] = SigningIdentity.from_kit(_kit(root / "old", "site-2", ca, days=-1))
    return {name: identity for name, identity in identities.items() if identity is not None}


def _sites(federation: dict[str, SigningIdentity], **replaced: str) -> dict[str, SecureAggregationSite]:
    return {site: SecureAggregationSite(site, SESSION, 3, federation[replaced.get(site, site)]) for site in SITES}


def test_signed_keys_aggregate_to_the_exact_sum(federation):
    sites = _sites(federation)
    vectors = {site: np.arange(6, dtype=np.uint64) * np.uint64(i + 1) for i, site in enumerate(SITES)}
    server = SecureAggregation(SESSION, 3)
    server.start({name: site.advertised for name, site in sites.items()})

    relayed = server.relay({name: site.share(server.keys, server.threshold) for name, site in sites.items()})
    masked = {name: sites[name].mask(vectors[name], server.sharing,
                                     {k.split("/")[0]: v for k, v in relayed.items() if k.endswith("/" + name)})
              for name in SITES}
    server.collect(masked)
    total = server.unmask(masked, {n: Revealed(*sites[n].reveal(server.survivors, [])) for n in server.survivors})

    np.testing.assert_array_equal(total, np.sum(list(vectors.values()), axis=0, dtype=np.uint64))
    assert all(site.advertised.signature for site in sites.values())


def test_a_swapped_key_is_refused_naming_the_site(federation):
    sites = _sites(federation)
    keys = {name: site.advertised for name, site in sites.items()}
    _, server_made = generate_keypair()  # the server's own key in place of site-2's

    with pytest.raises(SecureAggregationError, match="keys relayed for site-2 are not the ones site-2 signed"):
        sites["site-1"].share({**keys, "site-2": dataclasses.replace(keys["site-2"], mask_key=server_made)}, 3)


def test_another_sites_certificate_or_signature_is_refused(federation):
    sites = _sites(federation)
    keys = {name: site.advertised for name, site in sites.items()}

    with pytest.raises(SecureAggregationError, match=r"relays keys for site-2 with the certificate of \['site-3'\]"):
        sites["site-1"].share({**keys, "site-2": dataclasses.replace(keys["site-3"])}, 3)
    with pytest.raises(SecureAggregationError, match="relays keys for site-2 without its certificate and signature"):
        sites["site-1"].share({**keys, "site-2": dataclasses.replace(keys["site-2"], signature=b"")}, 3)


def test_a_certificate_from_another_federation_or_expired_is_refused(federation):
    for replacement, message in (("foreign", "for site-2 was not issued by this federation's root CA"),
                                 ("expired", "certificate of site-2 is valid only from")):
        sites = _sites(federation, **{"site-2": replacement})
        keys = {name: site.advertised for name, site in sites.items()}

        with pytest.raises(SecureAggregationError, match=message):
            sites["site-1"].share(keys, 3)


def test_without_a_startup_kit_nothing_is_signed(tmp_path):
    assert SigningIdentity.from_kit(tmp_path) is None
    assert SecureAggregationSite("site-1", SESSION, 3).advertised.signature == b""
