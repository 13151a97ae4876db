"""The FedKT-CSD job's messages, shared by the site task and the server workflow (docs/fedkt-csd.md).

Secure aggregation with dropout recovery (`fl_contract.secure_aggregation`) takes four of them:

    keys        server -> site: the announcement (session, classes, image size, autoencoder identity)
                site -> server: {"mask_key": (32,) uint8, "share_key": (32,) uint8}, fresh X25519 public keys, and
                from a provisioned site {"certificate": PEM uint8, "signature": uint8} over both keys
    shares      server -> site: {site name: (64,) uint8 mask key + share key} for the key exchange, with
                "certificate/<site>" and "signature/<site>" of signing sites; meta threshold
                site -> server: {peer name: (92,) uint8}, its encrypted Shamir shares for each peer
    statistics  server -> site: {"sender/recipient": (92,) uint8} every sharing site's ciphertexts; meta sites
                site -> server: {"masked": (L,) uint64}, the fixed-point statistics plus self and pairwise masks
    unmask      server -> site: meta survivors and dropped (the sites that shared but sent no masked vector)
                site -> server: {"self_seed/<survivor>": (32,) uint8, "mask_key/<dropped>": (32,) uint8}
    evaluate    server -> site: the classifier trained on the synthetic set (optional round)
                site -> server: metrics accuracy, balanced_accuracy, num_test, predicted_classes and
                recall_<class> for each class present among the site's held-out images
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fl_contract.models.dcae import AutoencoderIdentity
from fl_contract.secure_aggregation import AdvertisedKeys

TASK_KEYS = "keys"
TASK_SHARES = "shares"
TASK_STATISTICS = "statistics"
TASK_UNMASK = "unmask"
TASK_EVALUATE = "evaluate"
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
CLASSES = "classes"
IMAGE_SIZE = "image_size"
AUTOENCODER = "autoencoder"
PREDICTED_CLASSES = "predicted_classes"  # distinct classes the classifier predicts at the site; 1: constant
RECALL_PREFIX = "recall_"  # recall_<class name>, one per class present among the site's held-out images
EVALUATION_METRICS = ("accuracy", "balanced_accuracy", "num_test", PREDICTED_CLASSES)


def announcement(
    session: str, classes: Sequence[str], image_size: int, identity: AutoencoderIdentity
) -> dict[str, Any]:
    """What the server tells every site with the keys task, so that a mismatch fails before any key is made."""
    return {SESSION: session, CLASSES: list(classes), IMAGE_SIZE: int(image_size), AUTOENCODER: identity.manifest()}


def check_announcement(meta: Mapping[str, Any], site: str, classes: Sequence[str], image_size: int,
                       identity: AutoencoderIdentity) -> str:
    """The session id, after checking that server and site agree on classes, image size and autoencoder."""
    server_ae = meta.get(AUTOENCODER) or {}
    expected = {CLASSES: (meta.get(CLASSES), list(classes)), IMAGE_SIZE: (meta.get(IMAGE_SIZE), int(image_size)),
                "autoencoder weights_sha256": (server_ae.get("weights_sha256"), identity.weights_sha256),
                "autoencoder clip_norm": (server_ae.get("clip_norm"), identity.clip_norm)}
    wrong = [f"{key}: server {theirs!r}, site {ours!r}" for key, (theirs, ours) in expected.items() if theirs != ours]
    if wrong:
        raise ValueError(f"site {site} does not match the server's FedKT-CSD setup ({'; '.join(wrong)}); the site and "
                         "the server must use the same job parameters and the same autoencoder folder (weights and "
                         "clip_norm.json)")
    if not meta.get(SESSION):
        raise ValueError(f"site {site}: the keys task carries no session id")
    return str(meta[SESSION])


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
