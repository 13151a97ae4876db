"""FedKT-CSD on the server: key exchange, secure-aggregated sums, DP release, synthetic data, optional evaluation.

One round, no training at the sites (ALGORITHMS.md). The server resolves the autoencoder folder from its own
`local/server_app.json` (a job never carries paths), relays the sites' X25519 public keys, learns only the sum of
their masked fixed-point statistics, adds calibrated Gaussian noise, and samples and decodes a labelled synthetic
image set. If a site of the key exchange sends nothing, the masks do not cancel: the job stops naming the site
(no partial unmasking). Outputs: `server_app.fedkt_outputs`; record and status: `results.json`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.workflows.model_controller import ModelController

from server_app import fedkt_outputs as outputs
from server_app.fedkt_release import decode_latents, release_class_gaussians, sample_latents
from server_app.privacy.dp_calibration import calibrate_noise
from server_app.privacy.unmask import unmask_sum
from server_app.results import RunRecorder
from server_app.server_config import CONFIG_FILE, ServerConfig
from fl_contract.version import AGENT_VERSION as __version__
from fl_contract.device import select_device
from fl_contract.fedkt import MIN_SITES, protocol
from fl_contract.fedkt.classifier import train_classifier
from fl_contract.fedkt.wire import from_ring
from fl_contract.models import state_dict_to_numpy
from fl_contract.models.dcae import LoadedAutoencoder, load_autoencoder



class JobStopped(RuntimeError):
    """The job cannot go on; the message says why and is recorded for the admin."""


class FedKTCSDController(ModelController):
    """`samples_per_class` 0 draws the reference amount: each released class's (noisy) count over the sites.

    `noise_seed` None draws the DP noise seed from the operating system (production); a fixed seed is for tests
    and audits on non-sensitive data only, since anyone who knows it can subtract the noise.
    """

    def __init__(self, *, classes: list[str], autoencoder: str, image_size: int, epsilon: float,
                 delta: float, adjacency: str, method: str,
                 samples_per_class: int, min_clients: int, min_count: float,
                 noise_seed: int | None, evaluate: bool, classifier_epochs: int, seed: int):
        super().__init__(persistor_id="", ignore_result_error=True)  # a failed site is handled here, by name
        if min_clients < MIN_SITES:
            raise ValueError(f"min_clients must be at least {MIN_SITES} for secure aggregation, got {min_clients}")
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.classes = list(classes)
        self.autoencoder = autoencoder
        self.image_size = image_size
        self.epsilon = epsilon
        self.delta = delta
        self.adjacency = adjacency
        self.method = method
        self.samples_per_class = samples_per_class
        self.min_clients = min_clients
        self.min_count = min_count
        self.noise_seed = noise_seed
        self.evaluate = evaluate
        self.classifier_epochs = classifier_epochs
        self.seed = seed

    def run(self) -> None:
        app_dir = Path(self.get_app_dir())
        recorder = RunRecorder(app_dir, self._job_summary())
        try:
            record = self._run(app_dir)
        except JobStopped as stop:
            recorder.finish("failed", error=str(stop))
            self.panic(str(stop))
            return
        recorder.finish("finished", **record)

    def _run(self, app_dir: Path) -> dict:
        """Everything up to the outputs; returns what results.json records besides the job and the status."""
        loaded = self._load_autoencoder()
        session = f"{self.fl_ctx.get_job_id()}/attempt-1"
        announcement = protocol.announcement(session, self.classes, self.image_size, loaded.identity)
        keys = self._send(protocol.TASK_KEYS, FLModel(params={}, meta=announcement), None)
        sites = sorted(keys)
        if len(sites) < self.min_clients:
            raise JobStopped(f"only {len(sites)} site(s) sent a public key ({', '.join(sites) or 'none'}); "
                             f"secure aggregation needs at least {self.min_clients}")
        public_keys = {site: result.params[protocol.PUBLIC_KEY] for site, result in keys.items()}
        self.info(f"key exchange with {', '.join(sites)}; requesting masked statistics")
        results = self._send(protocol.TASK_STATISTICS, FLModel(params=public_keys, meta={protocol.SESSION: session}), sites)
        try:
            total = unmask_sum({site: r.params[protocol.MASKED] for site, r in results.items()}, sites)
            stats = from_ring(total, len(self.classes), loaded.clip_norm)
        except ValueError as err:
            raise JobStopped(f"secure aggregation failed: {err}") from err
        release = release_class_gaussians(stats, calibrate_noise(self.epsilon, self.delta, loaded.clip_norm,
                                                                  self.adjacency, self.method),
                                          self.noise_seed, min_count=self.min_count, autoencoder=loaded.identity)
        counts = self._sample_counts(release.gaussians.counts, len(sites))
        latents, labels = sample_latents(release.gaussians, counts, self.seed)
        images = outputs.to_uint8(decode_latents(loaded.model, latents, self.image_size))
        outputs.write_dp_statistics(app_dir / outputs.DP_STATISTICS_FILE, release, self.classes)
        outputs.write_synthetic_set(app_dir / outputs.SYNTHETIC_DIR, images, labels, self.classes)
        outputs.write_class_grids(app_dir / outputs.GRID_DIR, images, labels, self.classes)
        manifest = {**release.manifest, "classes": self.classes, "sites": sites, "session": session,
                    "samples_per_class": {self.classes[c]: n for c, n in zip(release.gaussians.classes, counts)},
                    "image_size": self.image_size, "sampling_seed": self.seed, "site_agent_version": __version__}
        outputs.write_manifest(app_dir / outputs.MANIFEST_FILE, manifest)
        self.info(f"released {len(labels)} synthetic images of classes "
                  f"{[self.classes[c] for c in release.gaussians.classes]} into {app_dir}")
        record: dict = {"sites": sites, "synthetic_images": int(len(labels))}
        if self.evaluate:
            record["evaluation"] = self._evaluation_round(app_dir, sites)
        return record

    def _load_autoencoder(self) -> LoadedAutoencoder:
        local = Path(self.fl_ctx.get_engine().get_workspace().get_site_config_dir())
        try:
            config = ServerConfig.load(local / CONFIG_FILE)
            return load_autoencoder(config.model_dir(self.autoencoder), select_device(config.device))
        except (OSError, ValueError) as err:
            raise JobStopped(f"server cannot load the autoencoder {self.autoencoder!r}: {err}") from err

    def _send(self, task: str, data: FLModel, targets: list[str] | None) -> dict[str, FLModel]:
        """Results by site name; a failed site is simply absent (the caller decides what that means)."""
        return {r.meta["client_name"]: r for r in self.send_model_and_wait(task_name=task, data=data, targets=targets)}

    def _sample_counts(self, noisy_counts: np.ndarray, num_sites: int) -> list[int]:
        if self.samples_per_class > 0:
            return [self.samples_per_class] * len(noisy_counts)
        return [max(1, round(float(n) / num_sites)) for n in noisy_counts]

    def _evaluation_round(self, app_dir: Path, sites: list[str]) -> dict[str, dict[str, float]]:
        """Train the classifier on the synthetic set here; each site scores it on its own held-out images."""
        images, labels, _ = outputs.read_synthetic_set(app_dir / outputs.SYNTHETIC_DIR)
        model = train_classifier(images, labels, len(self.classes), self.classifier_epochs, self.seed)
        results = self._send(protocol.TASK_EVALUATE, FLModel(params=state_dict_to_numpy(model)), sites)
        missing = sorted(set(sites) - set(results))
        if missing:
            self.warning(f"site(s) {', '.join(missing)} returned no evaluation")
        scores = {site: {k: float(v) for k, v in results[site].metrics.items()} for site in sorted(results)}
        self.info(f"evaluation of the synthetic-data classifier: {scores}")
        return scores

    def _job_summary(self) -> dict:
        return {"workflow": "fedkt_csd", "classes": self.classes, "autoencoder": self.autoencoder,
                "image_size": self.image_size, "epsilon": self.epsilon, "delta": self.delta,
                "adjacency": self.adjacency, "method": self.method, "samples_per_class": self.samples_per_class,
                "min_clients": self.min_clients, "min_count": self.min_count, "evaluate": self.evaluate,
                "classifier_epochs": self.classifier_epochs, "seed": self.seed}
