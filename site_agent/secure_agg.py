"""Pairwise additive masking, so that the server learns only the sum of the sites' fixed-point vectors.

Every pair of sites agrees on a seed without the server learning it: X25519 key agreement on public keys the
server relays, then HKDF-SHA256 binding the job id and both site names. The seed keys a ChaCha20 keystream
(cryptography's ChaCha20, all-zero nonce: each derived key is used for one stream only), read as little-endian
uint64 words: mask(i, j). In the order of site names, site i adds mask(i, j) for every j > i and subtracts it
for every j < i, modulo 2^64, so every mask appears once with each sign and the masks cancel exactly in the sum
(Bonawitz et al. 2017 without the dropout recovery: a site that drops makes the sum unrecoverable, see
`server_app.privacy.unmask`). Keys are ephemeral: generate fresh ones for every aggregation attempt.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fl_contract.fedkt.wire import RING_DTYPE

_HKDF_LABEL = b"hospital-fl/fedkt-csd/pairwise-mask/v1"


def generate_keypair() -> tuple[X25519PrivateKey, bytes]:
    """A fresh X25519 private key and its 32-byte raw public key, the part the server relays."""
    private_key = X25519PrivateKey.generate()
    return private_key, private_key.public_key().public_bytes_raw()


def pair_seed(private_key: X25519PrivateKey, peer_public_key: bytes, job_id: str, site: str, peer: str) -> bytes:
    """The 32-byte seed that `site` and `peer` both derive; bound to the job and to the unordered pair."""
    if site == peer:
        raise ValueError(f"site {site!r} cannot pair with itself")
    shared = private_key.exchange(X25519PublicKey.from_public_bytes(peer_public_key))
    info = _HKDF_LABEL + b"".join(_length_prefixed(part) for part in (job_id, *sorted((site, peer))))
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


def mask_stream(seed: bytes, length: int) -> np.ndarray:
    """`length` uint64 words of the ChaCha20 keystream keyed by `seed`."""
    encryptor = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor()
    return np.frombuffer(encryptor.update(bytes(8 * length)), dtype=RING_DTYPE)


def mask_vector(vector: np.ndarray, site: str, private_key: X25519PrivateKey, public_keys: Mapping[str, bytes],
                job_id: str) -> np.ndarray:
    """`vector` (uint64) plus the site's pairwise masks with every other site in `public_keys`, mod 2^64.

    `public_keys` maps every site of the key exchange, this one included, to its raw public key.
    """
    if vector.dtype != RING_DTYPE or vector.ndim != 1:
        raise ValueError(f"expected a 1-D little-endian uint64 vector, got {vector.dtype} {vector.shape}")
    if public_keys.get(site) != private_key.public_key().public_bytes_raw():
        raise ValueError(f"the key exchange does not list site {site!r} with this site's public key")
    masked = vector.copy()
    for peer, peer_key in public_keys.items():
        if peer == site:
            continue
        mask = mask_stream(pair_seed(private_key, peer_key, job_id, site, peer), vector.size)
        (np.add if site < peer else np.subtract)(masked, mask, out=masked)
    return masked


def _length_prefixed(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(4, "big") + data
