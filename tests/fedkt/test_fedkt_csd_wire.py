"""What a FedKT-CSD site sends: a public key, then one masked uint64 vector, the evaluation's metrics, nothing else.

The site tasks run as FLARE runs them (through the shareable), with keys relayed as the server relays them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.decomposers import common_decomposers
from nvflare.app_common.utils.fl_model_utils import FLModelUtils
from nvflare.fuel.utils import fobs

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.fedkt import protocol
from fl_contract.fedkt.classifier import build_classifier
from fl_contract.fedkt.wire import RING_DTYPE, class_length
from fl_contract.models import state_dict_to_numpy
from fl_contract.models.dcae import build_tiny_dcae, load_autoencoder, save_autoencoder
from jobs.fedkt_csd.spec import KIND, FedKTCSDParams
from server_app.privacy.unmask import unmask_sum
from site_agent.data.synthetic_isic import write_isic_site
from site_agent.fedkt.site_data import statistics_vector
from site_agent.site_config import SiteConfig, write_site_config
from site_agent.tasks.executor import SiteContext
from site_agent.tasks.fedkt_csd import FedKTCSDTask

SITES = ["site-1", "site-2", "site-3"]
CLASSES = list(PLAYERFL_CLASSES)
LENGTH = len(CLASSES) * class_length(128)


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, SiteContext]]:
    root = tmp_path_factory.mktemp("wire")
    ae = save_autoencoder(build_tiny_dcae(0), root / "tiny-dcae", clip_norm=40.0, provenance="test")
    contexts = {}
    for index, site in enumerate(SITES, start=1):
        data = write_isic_site(root / site / "isic", index, len(SITES), 16, alpha=10.0)
        config = SiteConfig.load(write_site_config(root / site, {"isic": str(data), "dcae": str(ae)}))
        contexts[site] = SiteContext(site, config, torch.device("cpu"), root / site, Signal())
    return ae, contexts


def _over_the_wire(model: FLModel) -> FLModel:
    """Serialise as FLARE does (FOBS) and read back what the other side receives."""
    common_decomposers.register()
    return FLModelUtils.from_shareable(fobs.loads(fobs.dumps(FLModelUtils.to_shareable(model))))


def _announce(ae: Path) -> FLModel:
    identity = load_autoencoder(ae).identity
    return FLModel(params={}, meta=protocol.announcement("job-1/attempt-1", CLASSES, 64, identity))


def _exchange(ae: Path, contexts: dict[str, SiteContext]) -> tuple[dict[str, FedKTCSDTask], dict[str, FLModel]]:
    tasks = {site: _task() for site in SITES}
    keys = {site: _over_the_wire(tasks[site].task_keys(_announce(ae), contexts[site])) for site in SITES}
    return tasks, keys


def test_sites_send_only_a_public_key_then_only_the_masked_vector(federation):
    ae, contexts = federation
    tasks, keys = _exchange(ae, contexts)
    relay = FLModel(params={s: k.params[protocol.PUBLIC_KEY] for s, k in keys.items()},
                    meta={protocol.SESSION: "job-1/attempt-1"})

    sent = {site: _over_the_wire(tasks[site].task_statistics(relay, contexts[site])) for site in SITES}

    loaded = load_autoencoder(ae)
    plain = {site: statistics_vector(loaded, contexts[site].data_dir("isic"), CLASSES, 64, 0.2, 0) for site in SITES}
    for site in SITES:
        assert {k: (v.shape, v.dtype) for k, v in keys[site].params.items()} == {"public_key": ((32,), np.uint8)}
        assert {k: (v.shape, v.dtype) for k, v in sent[site].params.items()} == {"masked": ((LENGTH,), RING_DTYPE)}
        assert not keys[site].meta and not sent[site].meta and not sent[site].metrics
        assert np.mean(sent[site].params["masked"] == plain[site]) < 0.01  # masked, not the plain statistics
    total = unmask_sum({site: sent[site].params["masked"] for site in SITES}, SITES)
    np.testing.assert_array_equal(total, np.sum([plain[s] for s in SITES], axis=0, dtype=RING_DTYPE))


def test_statistics_without_a_key_for_the_session_are_refused(federation):
    ae, contexts = federation
    tasks, keys = _exchange(ae, contexts)
    relay = FLModel(params={s: k.params[protocol.PUBLIC_KEY] for s, k in keys.items()},
                    meta={protocol.SESSION: "job-1/attempt-2"})

    with pytest.raises(RuntimeError, match="site-1 has no key for session 'job-1/attempt-2'.*rerun the job"):
        tasks["site-1"].task_statistics(relay, contexts["site-1"])


def test_site_refuses_a_server_with_another_autoencoder(federation, tmp_path):
    ae, contexts = federation
    other = save_autoencoder(build_tiny_dcae(1), tmp_path / "other-dcae", clip_norm=40.0, provenance="test")

    with pytest.raises(ValueError, match="site-1 does not match.*autoencoder weights_sha256"):
        _task().task_keys(_announce(other), contexts["site-1"])


def test_evaluation_sends_only_the_documented_metrics(federation):
    _, contexts = federation
    classifier = FLModel(params=state_dict_to_numpy(build_classifier(64, len(CLASSES))))

    sent = _over_the_wire(_task().task_evaluate(classifier, contexts["site-1"]))

    recall = {key for key in sent.metrics if key.startswith(protocol.RECALL_PREFIX)}
    assert set(sent.metrics) - recall == set(protocol.EVALUATION_METRICS)
    assert recall and recall <= {protocol.RECALL_PREFIX + name for name in CLASSES}
    assert all(isinstance(value, float) for value in sent.metrics.values())
    assert not sent.params and not sent.meta


def _task():
    return KIND.site_task_component(FedKTCSDParams(classes=tuple(CLASSES))).instantiate()
