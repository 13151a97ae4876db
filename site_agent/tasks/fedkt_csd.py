"""Site side of the FedKT-CSD one-shot job: secure aggregation of the site's statistics, then an optional evaluation.

No training at the site. `keys` checks the server's announcement against the site's own autoencoder and makes
fresh keys whose private halves stay in this executor's memory for this session only
(`site_agent.secure_aggregation.protocol`);
`shares` sends encrypted shares of this site's secrets to its peers through the server; `statistics` encodes
the site's images (or takes the privacy officer's reviewed export) and sends only the masked fixed-point vector;
`unmask` reveals the shares that let the server remove the masks of the survivors and of the sites lost after
sharing; `evaluate` (optional) scores the server's classifier and the released class Gaussians
(`site_agent.fedkt_csd.latent_classifier`) on the site's held-out images. Messages:
`fl_contract.fedkt_csd.protocol`.
"""

from __future__ import annotations

import math
from typing import Any

from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract import secure_aggregation_messages as messages
from fl_contract.fedkt_csd import protocol
from fl_contract.fedkt_csd.classifier import build_ensemble, evaluate_classifier
from fl_contract.job_params import FedKTCSDParams, job_params
from fl_contract.job_privacy import DP_STATISTICS
from fl_contract.models import load_numpy_params
from fl_contract.models.dcae import LoadedAutoencoder, latent_shape, load_autoencoder
from site_agent.fedkt_csd.export import ExportSettings, payload_sha256, read_export
from site_agent.fedkt_csd.latent_classifier import LatentGaussianClassifier
from site_agent.fedkt_csd.site_data import load_split, read_images, statistics_vector
from site_agent.secure_aggregation.identity import SigningIdentity
from site_agent.secure_aggregation.protocol import SecureAggregationSite, site_floor
from site_agent.tasks.executor import SiteContext, TaskExecutor


class FedKTCSDTask(TaskExecutor):
    """`dataset` and `autoencoder` are keys of the site config; `reviewed_statistics`, if set, is the key of the
    folder holding the privacy officer's reviewed export, sent instead of recomputing."""

    RELEASE = DP_STATISTICS

    def __init__(self, *, kind: str, params: dict[str, Any]):
        job = job_params(kind, params, FedKTCSDParams)
        super().__init__(seed=job.seed)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params, self.job = kind, params, job
        self.classes = list(job.classes)
        self.reviewed_statistics = job.reviewed_statistics or None
        self._loaded: LoadedAutoencoder | None = None
        self._secagg: SecureAggregationSite | None = None

    def task_keys(self, model: FLModel, ctx: SiteContext) -> FLModel:
        self._loaded = load_autoencoder(ctx.data_dir(self.job.autoencoder), ctx.device)
        session = protocol.check_announcement(model.meta, ctx.site_name, self.classes, self.job.image_size,
                                              self._loaded.identity)
        identity = SigningIdentity.from_kit(ctx.workspace_dir)  # None in the simulator: no startup kit
        self._secagg = SecureAggregationSite(ctx.site_name, session, min_threshold=site_floor(ctx.workspace_dir),
                                             identity=identity)
        return FLModel(params=messages.keys_params(self._secagg.advertised))

    def task_shares(self, model: FLModel, ctx: SiteContext) -> FLModel:
        secagg = self._session_for(model, ctx)
        shares = secagg.share(messages.read_key_exchange(model.params), int(model.meta[messages.THRESHOLD]))
        return FLModel(params={peer: messages.to_wire(ciphertext) for peer, ciphertext in shares.items()})

    def task_statistics(self, model: FLModel, ctx: SiteContext) -> FLModel:
        secagg = self._session_for(model, ctx)
        assert self._loaded is not None  # loaded with the session's keys
        settings = ExportSettings(self.classes, self.job.image_size, self.job.holdout_fraction, self.seed)
        if self.reviewed_statistics:
            vector = read_export(ctx.data_dir(self.reviewed_statistics), settings, self._loaded.identity)
        else:
            vector = statistics_vector(self._loaded, ctx.data_dir(self.job.dataset), self.classes, self.job.image_size,
                                       self.job.holdout_fraction, self.seed, ctx.config.compute.encode_batch_size)
        self.note_for_audit(statistics_sha256=payload_sha256(vector))  # matches the reviewed export's payload_sha256
        masked = secagg.mask(vector, model.meta[messages.SITES], messages.addressed_to(ctx.site_name, model.params))
        return FLModel(params={messages.MASKED: masked})

    def task_unmask(self, model: FLModel, ctx: SiteContext) -> FLModel:
        secagg = self._session_for(model, ctx)
        self._secagg = None  # one answer per session: its secrets go with it
        self_seeds, mask_keys = secagg.reveal(model.meta[messages.SURVIVORS], model.meta[messages.DROPPED])
        return FLModel(params=messages.revealed_params(self_seeds, mask_keys))

    def task_evaluate(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Both the classifier and the released Gaussians scored on the same held-out images."""
        loaded = self._loaded or load_autoencoder(ctx.data_dir(self.job.autoencoder), ctx.device)
        weights, (classes, means, covariances) = protocol.split_evaluation(
            model.params, ctx.site_name, len(self.classes), math.prod(latent_shape(loaded.model, self.job.image_size)))
        split = load_split(ctx.data_dir(self.job.dataset), self.classes, self.job.holdout_fraction, self.seed)
        held_out = read_images(split.holdout, self.job.image_size)
        classifier = build_ensemble(self.job.image_size, len(self.classes), self.job.classifier_members)
        load_numpy_params(classifier, weights)
        try:
            gaussians = LatentGaussianClassifier(loaded, classes, means, covariances, self.classes,
                                                 ctx.config.compute.encode_batch_size)
        except ValueError as err:
            raise ValueError(f"site {ctx.site_name}: {err}") from err
        return FLModel(metrics=protocol.evaluation_metrics(
            evaluate_classifier(classifier, held_out.images, held_out.labels, self.classes),
            evaluate_classifier(gaussians, held_out.images, held_out.labels, self.classes)))

    def _session_for(self, model: FLModel, ctx: SiteContext) -> SecureAggregationSite:
        session = model.meta.get(messages.SESSION)
        if self._secagg is None or session != self._secagg.session:
            held = self._secagg.session if self._secagg else None
            raise RuntimeError(f"site {ctx.site_name} has no keys for session {session!r} (it holds keys for "
                               f"{held!r}): the keys task must run first; rerun the job")
        return self._secagg
