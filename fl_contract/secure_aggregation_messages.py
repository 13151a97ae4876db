"""The messages of secure aggregation (`fl_contract.secure_aggregation`), shared by every job kind that masks.

FedKT-CSD masks its statistics once (`fl_contract.fedkt_csd.protocol`), the weight kinds their update every round
(`fl_contract.masked_weights`); both exchange these:

    keys        site -> server: {"mask_key": (32,) uint8, "share_key": (32,) uint8}, fresh X25519 public keys, and
                from a provisioned site {"certificate": PEM uint8, "signature": uint8} over both keys
    shares      server -> site: {site name: (64,) uint8 mask key + share key} for the key exchange, with
                "certificate/<site>" and "signature/<site>" of signing sites; meta session, threshold
                site -> server: {peer name: (92,) uint8}, its encrypted Shamir shares for each peer
    masked      server -> site: {"sender/recipient": (92,) uint8} the ciphertexts addressed to the site (the
                server's task-data filter drops the rest of the relay); meta sites
                site -> server: {"masked": (L,) uint64}, its vector plus self and pairwise masks
    unmask      server -> site: meta survivors and dropped (the sites that shared but sent no masked vector)
                site -> server: {"self_seed/<survivor>": (32,) uint8, "mask_key/<dropped>": (32,) uint8}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fl_contract.secure_aggregation import AdvertisedKeys

TASK_SHARES = "shares"
TASK_UNMASK = "unmask"
MASK_KEY = "mask_key"
SHARE_KEY = "share_key"
CERTIFICATE = "certificate"
SIGNATURE = "signature"
MASKED = "masked"
SESSION = "session"
THRESHOLD = "threshold"
SITES = "sites"
SURVIVORS = "survivors"
DROPPED = "dropped"
SELF_SEED_PREFIX = "self_seed/"
MASK_KEY_PREFIX = "mask_key/"


def to_wire(data: bytes) -> np.ndarray:
    """Bytes as FLARE carries them in a model's params: a uint8 array."""
    return np.frombuffer(data, dtype=np.uint8).copy()


def from_wire(array: Any) -> bytes:
    return np.asarray(array, dtype=np.uint8).tobytes()


def keys_params(keys: AdvertisedKeys) -> dict[str, np.ndarray]:
    signed = {CERTIFICATE: to_wire(keys.certificate), SIGNATURE: to_wire(keys.signature)} if keys.signature else {}
    return {MASK_KEY: to_wire(keys.mask_key), SHARE_KEY: to_wire(keys.share_key), **signed}


def read_keys(params: Mapping[str, Any]) -> AdvertisedKeys:
    return AdvertisedKeys(from_wire(params[MASK_KEY]), from_wire(params[SHARE_KEY]),
                          from_wire(params.get(CERTIFICATE, [])), from_wire(params.get(SIGNATURE, [])))


def key_exchange_params(keys: Mapping[str, AdvertisedKeys]) -> dict[str, np.ndarray]:
    """Every site's keys, relayed with the shares task: `<site>` mask key then share key (64 bytes), and for a
    signing site `certificate/<site>` and `signature/<site>`."""
    params = {site: to_wire(k.mask_key + k.share_key) for site, k in keys.items()}
    for site, k in keys.items():
        if k.signature:
            params[CERTIFICATE + "/" + site] = to_wire(k.certificate)
            params[SIGNATURE + "/" + site] = to_wire(k.signature)
    return params


def read_key_exchange(params: Mapping[str, Any]) -> dict[str, AdvertisedKeys]:
    def extra(kind: str, site: str) -> bytes:
        return from_wire(params.get(f"{kind}/{site}", []))
    raw = {site: from_wire(value) for site, value in params.items() if "/" not in site}
    return {site: AdvertisedKeys(value[:32], value[32:], extra(CERTIFICATE, site), extra(SIGNATURE, site))
            for site, value in raw.items()}


def addressed_to(site: str, relayed: Mapping[str, Any]) -> dict[str, bytes]:
    """The relayed ciphertexts whose recipient is `site`, by sender."""
    pairs = (key.split("/", 1) for key in relayed)
    return {sender: from_wire(relayed[f"{sender}/{recipient}"]) for sender, recipient in pairs if recipient == site}


def revealed_params(self_seeds: Mapping[str, bytes], mask_keys: Mapping[str, bytes]) -> dict[str, np.ndarray]:
    return {**{SELF_SEED_PREFIX + site: to_wire(share) for site, share in self_seeds.items()},
            **{MASK_KEY_PREFIX + site: to_wire(share) for site, share in mask_keys.items()}}


def read_revealed(params: Mapping[str, Any]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(self-seed shares by survivor, mask-key shares by dropped site) from a site's unmask answer."""
    def picked(prefix: str) -> dict[str, bytes]:
        return {key[len(prefix):]: from_wire(value) for key, value in params.items() if key.startswith(prefix)}
    return picked(SELF_SEED_PREFIX), picked(MASK_KEY_PREFIX)
