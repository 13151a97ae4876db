"""The FedKT-CSD job's messages, shared by the site task and the server workflow (docs/fedkt-csd.md).

Secure aggregation with dropout recovery takes four tasks: `keys` (server -> site: the announcement, i.e. session,
classes, image size and autoencoder identity; site -> server: its public keys), then `shares`, `statistics` (the
masked fixed-point statistics, `fl_contract.fedkt_csd.wire`) and `unmask`, whose messages are every masking kind's
(`fl_contract.secure_aggregation_messages`). Then, optionally:

    evaluate    server -> site: the classifier trained on the synthetic set (optional round)
                site -> server: metrics accuracy, balanced_accuracy, num_test, predicted_classes and
                recall_<class> for each class present among the site's held-out images
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fl_contract import secure_aggregation_messages as messages
from fl_contract.models.dcae import AutoencoderIdentity

TASK_KEYS = "keys"
TASK_STATISTICS = "statistics"
TASK_EVALUATE = "evaluate"
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
    return {messages.SESSION: session, CLASSES: list(classes), IMAGE_SIZE: int(image_size),
            AUTOENCODER: identity.manifest()}


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
    if not meta.get(messages.SESSION):
        raise ValueError(f"site {site}: the keys task carries no session id")
    return str(meta[messages.SESSION])
