"""Site side of the FedKT-CSD one-shot job: a key for secure aggregation, then the masked statistics.

No training at the site. `keys` checks the server's announcement against the site's own autoencoder and makes
a fresh X25519 key pair whose private half stays in this executor's memory for this session only;
`statistics` encodes the site's images (or takes the privacy officer's reviewed export), masks the fixed-point
vector with every peer's key and sends only that; `evaluate` (optional) scores the server's classifier on the
site's held-out images. Messages: `fl_contract.fedkt.protocol`.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.fedkt import protocol
from fl_contract.fedkt.classifier import build_classifier, evaluate_classifier
from fl_contract.job_privacy import DP_STATISTICS
from fl_contract.models import load_numpy_params
from fl_contract.models.dcae import LoadedAutoencoder, load_autoencoder
from site_agent.fedkt.export import ExportSettings, payload_sha256, read_export
from site_agent.fedkt.site_data import load_split, read_images, statistics_vector
from site_agent.secure_agg import generate_keypair, mask_vector
from site_agent.tasks.executor import SiteContext, TaskExecutor


class FedKTCSDTask(TaskExecutor):
    """`dataset` and `autoencoder` are keys of the site config; `reviewed_statistics`, if set, is the key of the
    folder holding the privacy officer's reviewed export, sent instead of recomputing."""

    RELEASE = DP_STATISTICS

    def __init__(self, *, classes: list[str], dataset: str, autoencoder: str, image_size: int,
                 holdout_fraction: float, reviewed_statistics: str | None,
                 seed: int):
        super().__init__(seed=seed)
        self.classes = list(classes)
        self.dataset = dataset
        self.autoencoder = autoencoder
        self.image_size = image_size
        self.holdout_fraction = holdout_fraction
        self.reviewed_statistics = reviewed_statistics
        self._loaded: LoadedAutoencoder | None = None
        self._session: str | None = None
        self._private_key: X25519PrivateKey | None = None

    def task_keys(self, model: FLModel, ctx: SiteContext) -> FLModel:
        self._loaded = load_autoencoder(ctx.data_dir(self.autoencoder), ctx.device)
        self._session = protocol.check_announcement(model.meta, ctx.site_name, self.classes, self.image_size,
                                                    self._loaded.identity)
        self._private_key, public_key = generate_keypair()
        return FLModel(params={protocol.PUBLIC_KEY: np.frombuffer(public_key, dtype=np.uint8).copy()})

    def task_statistics(self, model: FLModel, ctx: SiteContext) -> FLModel:
        session = model.meta.get(protocol.SESSION)
        if self._private_key is None or self._loaded is None or session != self._session:
            raise RuntimeError(f"site {ctx.site_name} has no key for session {session!r} (its key is for "
                               f"{self._session!r}): the keys task must run first; rerun the job")
        settings = ExportSettings(self.classes, self.image_size, self.holdout_fraction, self.seed)
        if self.reviewed_statistics:
            vector = read_export(ctx.data_dir(self.reviewed_statistics), settings, self._loaded.identity)
        else:
            vector = statistics_vector(self._loaded, ctx.data_dir(self.dataset), self.classes, self.image_size,
                                       self.holdout_fraction, self.seed)
        self.note_for_audit(statistics_sha256=payload_sha256(vector))  # matches the reviewed export's payload_sha256
        public_keys = {site: np.asarray(key, dtype=np.uint8).tobytes() for site, key in model.params.items()}
        private_key, self._private_key = self._private_key, None  # one key, one aggregation
        masked = mask_vector(vector, ctx.site_name, private_key, public_keys, session)
        return FLModel(params={protocol.MASKED: masked})

    def task_evaluate(self, model: FLModel, ctx: SiteContext) -> FLModel:
        split = load_split(ctx.data_dir(self.dataset), self.classes, self.holdout_fraction, self.seed)
        held_out = read_images(split.holdout, self.image_size)
        classifier = build_classifier(self.image_size, len(self.classes))
        load_numpy_params(classifier, model.params)
        return FLModel(metrics=evaluate_classifier(classifier, held_out.images, held_out.labels, self.classes))
