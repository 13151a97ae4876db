"""FedKT-CSD on the server: key exchange, secure-aggregated sums, DP release, synthetic data, optional evaluation.

One round, no training at the sites (docs/algorithms.md#fedkt-csd). The server resolves the autoencoder folder
from its own `local/server_app.json` (a job never carries paths), runs secure aggregation with dropout recovery
(`server_app.privacy.secure_aggregation`) so that it learns only the sum of the sites' fixed-point statistics,
adds calibrated Gaussian noise, and samples and decodes a labelled synthetic image set. A site lost after sharing
its keys is removed and the release goes on with the others; below the threshold the job stops naming the
missing sites. Outputs: `server_app.fedkt_outputs`; record and status: `results.json`, which repeats the
release's per-class diagnostics and every warning (noise-dominated classes, a constant classifier).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract import secure_aggregation_messages as messages
from fl_contract.device import select_device
from fl_contract.fedkt_csd import Adjacency, Method, protocol
from fl_contract.fedkt_csd.classifier import job_training_budget, predict, train_job_ensemble
from fl_contract.fedkt_csd.wire import from_ring
from fl_contract.job_params import FedKTCSDParams, job_params
from fl_contract.models import state_dict_to_numpy
from fl_contract.models.dcae import LoadedAutoencoder, load_autoencoder
from fl_contract.params import params_to_json
from fl_contract.secure_aggregation import SecureAggregationError
from fl_contract.version import AGENT_VERSION as __version__
from server_app import fedkt_outputs as outputs
from server_app.fedkt_release import (
    ClassGaussians,
    decode_latents,
    release_class_gaussians,
    sample_latents,
    synthetic_counts,
)
from server_app.privacy.dp_calibration import NoiseCalibration, calibrate_noise
from server_app.privacy.secure_aggregation import SecureAggregation
from server_app.privacy.secure_sum import Send, secure_sum
from server_app.results import RunRecorder
from server_app.server_config import CONFIG_FILE, ServerConfig
from server_app.site_watch import SiteAwareController


class JobStopped(RuntimeError):
    """The job cannot go on; the message says why and is recorded for the admin."""


class JobAborted(JobStopped):
    """The admin aborted the job."""


class FedKTCSDController(SiteAwareController):
    """`samples_per_class` 0 draws each released class's pooled noisy count, whatever the number of sites.

    `noise_seed` None draws the DP noise seed from the operating system (production); a fixed seed is for tests
    and audits on non-sensitive data only, since anyone who knows it can subtract the noise.
    """

    def __init__(self, *, kind: str, params: dict[str, Any]):
        super().__init__(ignore_result_error=True)  # a failed site is handled here, by name
        self.job: FedKTCSDParams = job_params(kind, params, FedKTCSDParams)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params = kind, params
        self.classes = list(self.job.classes)
        self._warnings: list[str] = []  # this run's, for results.json
        self._secagg_record: dict[str, Any] = {}  # who took part at each secure-aggregation step, even on a stop

    def run(self) -> None:
        app_dir = Path(self.get_app_dir())
        recorder = RunRecorder(app_dir, self._job_summary())
        try:
            record = self._run(app_dir)
        except JobAborted as stop:
            recorder.finish("aborted", error=str(stop), secure_aggregation=self._secagg_record)
            return
        except JobStopped as stop:
            recorder.finish("failed", error=str(stop), secure_aggregation=self._secagg_record)
            self.panic(str(stop))
            return
        recorder.finish("finished", **record)

    def _run(self, app_dir: Path) -> dict[str, Any]:
        """Everything up to the outputs; returns what results.json records besides the job and the status."""
        loaded = self._load_autoencoder()
        calibration = self._calibrate(loaded.clip_norm)  # before any site works: an impossible budget stops here
        session = f"{self.fl_ctx.get_job_id()}/attempt-1"  # one attempt: a stopped aggregation needs a new job
        announcement = protocol.announcement(session, self.classes, self.job.image_size, loaded.identity)
        secagg = SecureAggregation(session, self.job.min_clients)
        try:
            total = secure_statistics(secagg, announcement, self._send, self.info, self._warn)
            stats = from_ring(total, len(self.classes), loaded.clip_norm)
        except SecureAggregationError as err:
            raise JobStopped(f"secure aggregation failed: {err}") from err
        finally:
            self._secagg_record = secagg.summary()
        sites = secagg.survivors
        release = release_class_gaussians(stats, calibration, self.job.noise_seed, min_count=self.job.min_count,
                                          covariance=self.job.covariance, autoencoder=loaded.identity,
                                          class_names=self.classes)
        for warning in release.manifest["warnings"]:
            self._warn(warning)
        counts = synthetic_counts(release.gaussians.counts, self.job.samples_per_class)
        latents, labels = sample_latents(release.gaussians, counts, self.job.seed)
        images = outputs.to_uint8(decode_latents(loaded.model, latents, self.job.image_size))
        outputs.write_dp_statistics(app_dir / outputs.DP_STATISTICS_FILE, release, self.classes)
        outputs.write_synthetic_set(app_dir / outputs.SYNTHETIC_DIR, images, labels, self.classes)
        outputs.write_class_grids(app_dir / outputs.GRID_DIR, images, labels, self.classes)
        manifest = {**release.manifest, "classes": self.classes, "sites": sites, "session": secagg.session,
                    "secure_aggregation": self._secagg_record,
                    "samples_per_class": {self.classes[c]: n for c, n in zip(release.gaussians.classes, counts)},
                    "image_size": self.job.image_size, "sampling_seed": self.job.seed,
                    "site_agent_version": __version__}
        outputs.write_manifest(app_dir / outputs.MANIFEST_FILE, manifest)
        self.info(f"released {len(labels)} synthetic images of classes "
                  f"{[self.classes[c] for c in release.gaussians.classes]} into {app_dir}")
        record: dict[str, Any] = {"sites": sites, "secure_aggregation": self._secagg_record,
                                  "synthetic_images": int(len(labels)),
                                  "release_diagnostics": release.manifest["diagnostics"]}
        if self.job.evaluate:
            record.update(self._evaluation_round(app_dir, sites, release.gaussians))
        return {**record, "warnings": self._warnings}

    def _load_autoencoder(self) -> LoadedAutoencoder:
        local = Path(self.fl_ctx.get_engine().get_workspace().get_site_config_dir())
        try:
            config = ServerConfig.load(local / CONFIG_FILE)
            return load_autoencoder(config.model_dir(self.job.autoencoder), select_device(config.device))
        except (OSError, ValueError) as err:
            raise JobStopped(f"server cannot load the autoencoder {self.job.autoencoder!r}: {err}") from err

    def _send(self, task: str, data: FLModel, targets: list[str] | None) -> dict[str, FLModel]:
        """Results by site name; a failed site is simply absent (the caller decides what that means)."""
        results = self.send_model_and_wait(task_name=task, data=data, targets=targets)
        answered = {r.meta["client_name"]: r for r in results}
        if self.abort_signal.triggered:
            outcomes = {**{site: "answered" for site in answered}, **self.quiet_site_outcomes(set(answered))}
            status, reason = self.stop_cause(f"the {task} task", dict(sorted(outcomes.items())),
                                             self.job.min_clients) or ("aborted", f"aborted during the {task} task")
            raise (JobStopped if status == "failed" else JobAborted)(f"{reason}; nothing was released")
        return answered

    def _calibrate(self, clip_norm: float) -> NoiseCalibration:
        try:
            # the parameters' choices are exactly these literals
            return calibrate_noise(self.job.epsilon, self.job.delta, clip_norm, cast(Adjacency, self.job.adjacency),
                                   cast(Method, self.job.method), self.job.count_noise_multiplier)
        except ValueError as err:
            raise JobStopped(f"cannot calibrate the DP noise: {err}") from err

    def _warn(self, message: str) -> None:
        """Logged now and listed under `warnings` in results.json."""
        self.warning(message)
        self._warnings.append(message)

    def _evaluation_round(self, app_dir: Path, sites: list[str], gaussians: ClassGaussians) -> dict[str, Any]:
        """Train the classifier ensemble on the synthetic set here; each site scores it, and the released class
        Gaussians as a classifier of its encoded images (`site_agent.fedkt_csd.latent_classifier`), on its own
        held-out images.

        Returns `classifier` (each member's training budget, and the number of members), `evaluation` per site
        (accuracy, balanced accuracy, number of images, distinct predicted classes, `recall` per class) and
        `latent_evaluation`, the Gaussians' same scores; a classifier that predicts one class on the synthetic set, or
        either model predicting one class at a site, is warned about.
        """
        images, labels, _ = outputs.read_synthetic_set(app_dir / outputs.SYNTHETIC_DIR)
        model = train_job_ensemble(images, labels, self.job)
        budget = job_training_budget(len(labels), self.job)
        on_synthetic = int(len(np.unique(predict(model, images))))
        if on_synthetic == 1 and len(np.unique(labels.numpy())) > 1:
            self._warn("the classifier predicts one class on its own synthetic training set: raise "
                       "classifier_min_steps, or the synthetic classes are not separable (see release_diagnostics)")
        released = protocol.gaussians_params(gaussians.classes, gaussians.means, gaussians.covariances)
        results = self._send(protocol.TASK_EVALUATE, FLModel(params={**state_dict_to_numpy(model), **released}), sites)
        missing = sorted(set(sites) - set(results))
        if missing:
            self._warn(f"site(s) {', '.join(missing)} returned no evaluation")
        split = {site: protocol.split_metrics(results[site].metrics) for site in sorted(results)}
        scores = {site: _site_scores(classifier) for site, (classifier, _) in split.items()}
        latent = {site: _site_scores(gaussians) for site, (_, gaussians) in split.items()}
        for model_predicts, per_site in (("the classifier predicts", scores),
                                         ("the released Gaussians predict", latent)):
            constant = single_class_sites(per_site)
            if constant:
                self._warn(f"{model_predicts} a single class on the held-out images of {', '.join(constant)}")
        self.info(f"evaluation of the synthetic-data classifier: {scores}; of the released Gaussians: {latent}")
        return {"classifier": {"images": budget.images, "epochs": budget.epochs, "steps": budget.steps,
                               "members": self.job.classifier_members,
                               "predicted_classes_on_synthetic": on_synthetic},
                "evaluation": scores, "latent_evaluation": latent}

    def _job_summary(self) -> dict[str, Any]:
        """Every parameter of the job, and the classes it releases."""
        return {"workflow": "fedkt_csd", **params_to_json(self.job), "classes": self.classes}


def secure_statistics(secagg: SecureAggregation, announcement: dict[str, Any], send: Send, log: Callable[[str], None],
                      warn: Callable[[str], None]) -> np.ndarray:
    """The keys task with the announcement, then the secure sum of the sites' statistics."""
    keys = send(protocol.TASK_KEYS, FLModel(params={}, meta=announcement), None)
    secagg.start({site: messages.read_keys(result.params) for site, result in keys.items()})
    return secure_sum(secagg, protocol.TASK_STATISTICS, send, log, warn, "masked statistics")


def single_class_sites(scores: dict[str, dict[str, Any]]) -> list[str]:
    """The sites where a model predicted one class for held-out images of several (`_site_scores` per site): it
    has learnt nothing there, whatever its accuracy on a skewed site says."""
    return [site for site, m in scores.items() if m[protocol.PREDICTED_CLASSES] == 1 and len(m["recall"]) > 1]


def _site_scores(metrics: dict[str, float]) -> dict[str, Any]:
    """A site's metrics of one model with the `recall_<class>` entries gathered under `recall`."""
    prefix = protocol.RECALL_PREFIX
    scores: dict[str, Any] = {k: float(v) for k, v in metrics.items() if not k.startswith(prefix)}
    scores["recall"] = {k[len(prefix):]: float(v) for k, v in metrics.items() if k.startswith(prefix)}
    return scores
