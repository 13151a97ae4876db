"""Secure aggregation's primitives, shared by sites and server (Bonawitz et al., CCS 2017, semi-honest variant).

Each site holds two X25519 key pairs for one session: a *mask* pair, whose agreement with every peer seeds the
pairwise masks that cancel in the sum, and a *share* pair, whose agreement keys the AES-GCM encryption of the
secret shares the site sends each peer through the server. A site also draws a 32-byte *self-mask* seed. It
Shamir-shares (t of n) both its mask private key and its self-mask seed among the sites of the key exchange, so
that t survivors can give the server what it needs to remove a dropped site's pairwise masks (its private key) or
a surviving site's self mask (its seed), never both for one site (`server_app.privacy.secure_aggregation`).

Masks are ChaCha20 keystreams (all-zero nonce; every key keys one stream) read as little-endian uint64 words and
added modulo 2^64. Pair seeds are HKDF-SHA256 of the X25519 shared secret with `info` binding a label, the session
and both site names (sorted, length-prefixed). In site-name order, site i adds mask(i, j) for j > i and subtracts
it for j < i, so every pairwise mask appears once with each sign. Shamir sharing is in pycryptodome's field and
form, GF(2^128), on numpy arrays (`fl_contract.shamir`; shares interchangeable with pycryptodome's `Shamir`): a
32-byte secret is shared as its two 16-byte halves, and the holder of share x is the x-th of the secret's holders in
name order (x from 1); the server rebuilds all secrets of a session in one batch.

Who masks with whom (`fl_contract.masking_graph`): below `masking_graph.SPARSE_FROM` sites every pair of the key
exchange, and a site's holders are all the sites; from there on SecAgg+'s sparse graph, each site with k = O(log n)
neighbours chosen by public randomness of the session and the key exchange, its holders itself and those.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fl_contract import masking_graph, shamir
from fl_contract.masking_graph import MaskingGraph
from fl_contract.ring import RING_DTYPE

KEY_BYTES = 32  # X25519 keys, self-mask seeds and pair seeds
SHARE_BYTES = 32  # one Shamir share of a 32-byte secret: the shares of its two 16-byte halves
_NONCE_BYTES = 12
_MASK_LABEL = b"hospital-fl/secagg/pairwise-mask/v1"
_SHARE_LABEL = b"hospital-fl/secagg/share-encryption/v1"
_KEYS_LABEL = b"hospital-fl/secagg/advertised-keys/v1"
STREAM_WORKERS = min(4, os.cpu_count() or 1)  # threads generating keystreams: ChaCha20 and numpy release the GIL
_THREADED_WORDS = 1 << 22  # keystream words (32 MB) from which the threads pay off


class SecureAggregationError(ValueError):
    """A secure aggregation cannot go on; the message names the site(s) and what to do."""


@dataclass(frozen=True)
class AdvertisedKeys:
    """A site's two public keys for one session, relayed by the server to every site of the key exchange.

    A site with a provisioned startup kit adds its certificate (PEM) and its signature of `signed_message`, so
    that its peers can check that the server relays this site's own keys (Bonawitz's defence against a server that
    swaps keys); in FLARE's simulator there are no certificates and both stay empty.
    """

    mask_key: bytes
    share_key: bytes
    certificate: bytes = b""
    signature: bytes = b""

    def signed_message(self, session: str, site: str) -> bytes:
        """What the site signs: a label, the session, its name and both public keys."""
        return _KEYS_LABEL + _length_prefixed(session) + _length_prefixed(site) + self.mask_key + self.share_key


def majority_threshold(num_sites: int) -> int:
    """The smallest threshold a site accepts: more than half of the key exchange, so no minority can reconstruct."""
    return num_sites // 2 + 1


def generate_keypair() -> tuple[X25519PrivateKey, bytes]:
    """A fresh X25519 private key and its 32-byte raw public key, the part the server relays."""
    private_key = X25519PrivateKey.generate()
    return private_key, private_key.public_key().public_bytes_raw()


def public_bytes(private_key: X25519PrivateKey) -> bytes:
    return private_key.public_key().public_bytes_raw()


def pair_seed(private_key: X25519PrivateKey, peer_public_key: bytes, session: str, site: str, peer: str) -> bytes:
    """The 32-byte mask seed that `site` and `peer` both derive; bound to the session and the unordered pair."""
    if site == peer:
        raise ValueError(f"site {site!r} cannot agree a key with itself")
    return _agree(private_key, peer_public_key, _MASK_LABEL, session, *sorted((site, peer)))


def mask_stream(seed: bytes, length: int) -> np.ndarray:
    """`length` uint64 words of the ChaCha20 keystream keyed by `seed` (a pair seed or a self-mask seed)."""
    encryptor = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor()
    return np.frombuffer(encryptor.update(bytes(8 * length)), dtype=RING_DTYPE)


def add_streams(total: np.ndarray, seeds: Sequence[tuple[bytes, bool]], workers: int = STREAM_WORKERS) -> None:
    """Add in place, modulo 2^64, the keystream of each seed (True) or subtract it (False), on `workers` threads.

    The result does not depend on the order (ring addition), so each thread sums its part of the seeds into its own
    vector, writing each keystream into one reused buffer, and the parts are added at the end.
    """
    if len(seeds) * total.size < _THREADED_WORDS:
        workers = 1  # starting threads would cost more than they save
    parts = [seeds[i::workers] for i in range(max(1, min(workers, len(seeds))))]

    def part_sum(part: Sequence[tuple[bytes, bool]]) -> np.ndarray:
        partial, zeros = np.zeros(total.size, dtype=RING_DTYPE), bytes(8 * total.size)
        buffer = bytearray(8 * total.size + 64)
        stream = np.frombuffer(buffer, dtype=RING_DTYPE, count=total.size)
        for seed, add in part:
            encryptor = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor()
            encryptor.update_into(zeros, buffer)
            (np.add if add else np.subtract)(partial, stream, out=partial)
        return partial

    if len(parts) == 1:
        np.add(total, part_sum(parts[0]), out=total)
        return
    with ThreadPoolExecutor(len(parts)) as pool:
        for partial in pool.map(part_sum, parts):
            np.add(total, partial, out=total)


def pairwise_seeds(private_key: X25519PrivateKey, site: str, peers: Mapping[str, bytes],
                   session: str) -> list[tuple[bytes, bool]]:
    """(seed, add) of the pairwise masks `site` applies with each of `peers` (name -> mask public key): added for a
    peer after it in name order, subtracted for one before, so that the pair's two masks cancel."""
    return [(pair_seed(private_key, peer_key, session, site, peer), site < peer) for peer, peer_key in peers.items()]


def add_pairwise_masks(total: np.ndarray, private_key: X25519PrivateKey, site: str, peers: Mapping[str, bytes],
                       session: str) -> None:
    """Add in place, modulo 2^64, the pairwise masks `site` applies with each of `peers` (name -> mask public key).

    The same call cancels a dropped site's masks in the survivors' sum: each survivor applied the opposite sign.
    """
    add_streams(total, pairwise_seeds(private_key, site, peers, session))


def neighbourhoods(session: str, keys: Mapping[str, AdvertisedKeys]) -> MaskingGraph:
    """The session's masking graph, from public randomness of the session and the key exchange."""
    return masking_graph.build(session, {site: k.mask_key + k.share_key for site, k in keys.items()})


def split_secret(secret: bytes, threshold: int, holders: Sequence[str]) -> dict[str, bytes]:
    """`threshold`-of-n Shamir shares of a 32-byte secret, one per holder (holders in name order, x from 1)."""
    if len(secret) != KEY_BYTES:
        raise ValueError(f"secrets are {KEY_BYTES} bytes, got {len(secret)}")
    if not 1 <= threshold <= len(holders) or list(holders) != sorted(set(holders)):
        raise ValueError(f"cannot share among {list(holders)} with threshold {threshold}: holders must be distinct, "
                         "in name order, and at least as many as the threshold")
    return dict(zip(holders, shamir.split([secret], threshold, len(holders))[0], strict=True))


def combine_shares(shares: Mapping[str, bytes], holders: Sequence[str], threshold: int) -> bytes:
    """The 32-byte secret from at least `threshold` shares, keyed by holder name (`holders` as given to the split)."""
    if len(shares) < threshold:
        raise SecureAggregationError(f"{len(shares)} share(s) but the threshold is {threshold}")
    index = {holder: x for x, holder in enumerate(holders, start=1)}
    chosen = sorted(shares)[:threshold]
    halves = [Shamir.combine([(index[h], shares[h][part:part + 16]) for h in chosen]) for part in (0, 16)]
    return halves[0] + halves[1]


def encrypt_shares(share_key: X25519PrivateKey, peer_share_key: bytes, session: str, sender: str, recipient: str,
                   plaintext: bytes) -> bytes:
    """AES-256-GCM of `plaintext` for `recipient`; nonce first. Sender, recipient and session are authenticated."""
    nonce = os.urandom(_NONCE_BYTES)
    key = _agree(share_key, peer_share_key, _SHARE_LABEL, session, sender, recipient)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, _direction(session, sender, recipient))


def decrypt_shares(share_key: X25519PrivateKey, peer_share_key: bytes, session: str, sender: str, recipient: str,
                   ciphertext: bytes) -> bytes:
    """The plaintext `sender` encrypted for `recipient`; raises naming the sender if it was altered or misrouted."""
    key = _agree(share_key, peer_share_key, _SHARE_LABEL, session, sender, recipient)
    try:
        return AESGCM(key).decrypt(ciphertext[:_NONCE_BYTES], ciphertext[_NONCE_BYTES:],
                                   _direction(session, sender, recipient))
    except InvalidTag as err:
        raise SecureAggregationError(
            f"the shares from {sender} to {recipient} do not decrypt: altered or misrouted on the way "
            "(the server relays them); refusing this aggregation") from err


def check_subset(sites: Iterable[str], of: Iterable[str], what: str, site: str) -> list[str]:
    """`sites` in name order, after checking that they lie within `of`; raises naming the intruders."""
    chosen, allowed = sorted(set(sites)), set(of)
    strangers = [name for name in chosen if name not in allowed]
    if strangers:
        raise SecureAggregationError(
            f"site {site}: the server lists {', '.join(strangers)} among the {what}, but they were not "
            "among the sites before; refusing this aggregation")
    return chosen


def _agree(private_key: X25519PrivateKey, peer_public_key: bytes, label: bytes, session: str, *names: str) -> bytes:
    """HKDF-SHA256 of the X25519 shared secret, bound to `label`, the session and `names` in the order given."""
    shared = private_key.exchange(X25519PublicKey.from_public_bytes(peer_public_key))
    info = label + b"".join(_length_prefixed(part) for part in (session, *names))
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


def _direction(session: str, sender: str, recipient: str) -> bytes:
    return b"".join(_length_prefixed(part) for part in (session, sender, recipient))


def _length_prefixed(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(4, "big") + data
