"""What a FedKT-CSD site sends: two public keys, encrypted shares, one masked uint64 vector, shares for unmasking,
the evaluation's metrics (of the classifier and of the released Gaussians), nothing else.

The site tasks run as FLARE runs them (through the shareable), driven by the server's own secure-sum sequence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel
from support import FedKTRelay, over_the_wire

from fl_contract import secure_aggregation_messages as messages
from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.fedkt_csd import protocol
from fl_contract.fedkt_csd.classifier import build_ensemble
from fl_contract.fedkt_csd.wire import RING_DTYPE, class_length
from fl_contract.models import state_dict_to_numpy
from fl_contract.models.dcae import build_tiny_dcae, load_autoencoder, save_autoencoder
from fl_contract.secure_aggregation import SecureAggregationError
from jobs.fedkt_csd.spec import KIND, FedKTCSDParams
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.fedkt_csd.site_data import statistics_vector
from site_agent.kit.site_config import SiteConfig, write_site_config
from site_agent.privacy.policy import SitePolicy, write_policy
from site_agent.tasks.executor import SiteContext

SITES = ["site-1", "site-2", "site-3"]
CLASSES = list(PLAYERFL_CLASSES)
LENGTH = len(CLASSES) * class_length(128)
SESSION = "job-1/attempt-1"
CIPHERTEXT_BYTES = 12 + 2 * 32 + 16  # nonce, two 32-byte shares, GCM tag


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, SiteContext]]:
    root = tmp_path_factory.mktemp("wire")
    ae = save_autoencoder(build_tiny_dcae(0), root / "tiny-dcae", clip_norm=40.0, provenance="test")
    return ae, {site: _context(root, site, index, ae) for index, site in enumerate(SITES, start=1)}


def _context(root: Path, site: str, index: int, ae: Path) -> SiteContext:
    data = write_isic_site(root / site / "isic", index, 4, 16, alpha=10.0)
    config = SiteConfig.load(write_site_config(root / site, {"isic": str(data), "dcae": str(ae)}))
    return SiteContext(site, config, torch.device("cpu"), root / site, Signal())


def _announce(ae: Path, session: str = SESSION) -> FLModel:
    identity = load_autoencoder(ae).identity
    return FLModel(params={}, meta=protocol.announcement(session, CLASSES, 64, identity))


def _plain(ae: Path, contexts: dict[str, SiteContext], sites: list[str]) -> np.ndarray:
    """The plain sum of the sites' statistics, each site encoded once per module."""
    for site in set(sites) - set(_PLAIN):
        _PLAIN[site] = statistics_vector(load_autoencoder(ae), contexts[site].data_dir("isic"), CLASSES, 64, 0.2, 0)
    return np.sum([_PLAIN[site] for site in sites], axis=0, dtype=RING_DTYPE)


_PLAIN: dict[str, np.ndarray] = {}


def _layout(model: FLModel) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    return {key: (value.shape, value.dtype) for key, value in model.params.items()}


def test_sites_send_keys_encrypted_shares_one_masked_vector_and_shares_for_unmasking(federation):
    ae, contexts = federation
    relay = FedKTRelay({site: _task() for site in contexts}, contexts)

    total = relay.secure_sum(_announce(ae))

    np.testing.assert_array_equal(total, _plain(ae, contexts, SITES))
    plain = {site: _plain(ae, contexts, [site]) for site in SITES}
    for site in SITES:
        peers = [s for s in SITES if s != site]
        assert _layout(relay.sent["keys"][site]) == {"mask_key": ((32,), np.uint8), "share_key": ((32,), np.uint8)}
        assert _layout(relay.sent["shares"][site]) == {peer: ((CIPHERTEXT_BYTES,), np.uint8) for peer in peers}
        assert _layout(relay.sent["statistics"][site]) == {"masked": ((LENGTH,), RING_DTYPE)}
        assert _layout(relay.sent["unmask"][site]) == {f"self_seed/{s}": ((32,), np.uint8) for s in SITES}
        assert all(not relay.sent[task][site].meta and not relay.sent[task][site].metrics for task in relay.sent)
        assert np.mean(relay.sent["statistics"][site].params["masked"] == plain[site]) < 0.01  # masked


def test_a_site_lost_after_sharing_is_removed_and_the_sum_is_the_others_exactly(federation, tmp_path):
    ae, contexts = federation
    four = {**contexts, "site-4": _context(tmp_path, "site-4", 4, ae)}
    relay = FedKTRelay({site: _task() for site in four}, four, lost={"site-2": protocol.TASK_STATISTICS})

    total = relay.secure_sum(_announce(ae))

    np.testing.assert_array_equal(total, _plain(ae, four, ["site-1", "site-3", "site-4"]))
    assert _layout(relay.sent["unmask"]["site-1"]) == {
        **{f"self_seed/{s}": ((32,), np.uint8) for s in ("site-1", "site-3", "site-4")},
        "mask_key/site-2": ((32,), np.uint8)}


def test_steps_out_of_session_are_refused(federation):
    ae, contexts = federation
    task = _task()
    task.task_keys(_announce(ae), contexts["site-1"])

    with pytest.raises(RuntimeError, match=r"site-1 has no keys for session 'job-1/attempt-2'.*rerun the job"):
        task.task_shares(FLModel(params={}, meta={messages.SESSION: "job-1/attempt-2", messages.THRESHOLD: 3}),
                         contexts["site-1"])
    with pytest.raises(SecureAggregationError, match="site-1 has not shared its keys"):
        task.task_statistics(FLModel(params={}, meta={messages.SESSION: SESSION, messages.SITES: SITES}),
                             contexts["site-1"])


def test_site_refuses_a_server_with_another_autoencoder(federation, tmp_path):
    ae, contexts = federation
    other = save_autoencoder(build_tiny_dcae(1), tmp_path / "other-dcae", clip_norm=40.0, provenance="test")

    with pytest.raises(ValueError, match="site-1 does not match.*autoencoder weights_sha256"):
        _task().task_keys(_announce(other), contexts["site-1"])


def _evaluate_message(dim: int = 128) -> FLModel:
    """An evaluate task: an untrained ensemble and Gaussians of MEL and BCC (NV and BKL withheld)."""
    ensemble = build_ensemble(64, len(CLASSES), FedKTCSDParams().classifier_members)
    gaussians = protocol.gaussians_params(np.array([0, 2]), np.zeros((2, dim)), np.stack([np.eye(dim) * 30.0] * 2))
    return FLModel(params={**state_dict_to_numpy(ensemble), **gaussians})


def test_evaluation_sends_only_the_documented_metrics_of_the_classifier_and_of_the_gaussians(federation):
    _, contexts = federation

    sent = over_the_wire(_task().task_evaluate(_evaluate_message(), contexts["site-1"]))

    latent = {key for key in sent.metrics if key.startswith(protocol.LATENT_PREFIX)}
    for keys, prefix in ((set(sent.metrics) - latent, ""), (latent, protocol.LATENT_PREFIX)):
        recall = {key for key in keys if key.startswith(prefix + protocol.RECALL_PREFIX)}
        assert keys - recall == {prefix + name for name in protocol.EVALUATION_METRICS}
        assert recall and recall <= {prefix + protocol.RECALL_PREFIX + name for name in CLASSES}
    assert sent.metrics[protocol.LATENT_PREFIX + protocol.PREDICTED_CLASSES] <= 2  # withheld classes never predicted
    assert all(isinstance(value, float) for value in sent.metrics.values())
    assert not sent.params and not sent.meta


def test_a_site_refuses_gaussians_that_do_not_fit_its_autoencoder(federation):
    _, contexts = federation

    with pytest.raises(ValueError, match=r"site site-1: .*128-dimensional latents.*same job and autoencoder"):
        _task().task_evaluate(_evaluate_message(dim=64), contexts["site-1"])


def _task():
    return KIND.site_task_component(FedKTCSDParams(classes=tuple(CLASSES))).instantiate()


def test_a_site_holds_the_server_to_its_own_policy_floor_for_the_threshold(federation, tmp_path):
    ae, contexts = federation
    strict = _context(tmp_path, "site-1", 1, ae)
    write_policy(strict.workspace_dir / "local", SitePolicy(min_secure_aggregation_sites=5))
    tasks = {site: _task() for site in SITES}
    keys = {site: tasks[site].task_keys(_announce(ae), strict if site == "site-1" else contexts[site])
            for site in SITES}
    relay = FLModel(params=messages.key_exchange_params({s: messages.read_keys(k.params) for s, k in keys.items()}),
                    meta={messages.SESSION: SESSION, messages.THRESHOLD: 3})

    with pytest.raises(SecureAggregationError,
                       match="site-1: 3 sites in the key exchange, but .* at least 5 \\(its minimum\\)"):
        tasks["site-1"].task_shares(relay, strict)
    assert tasks["site-2"].task_shares(relay, contexts["site-2"]).params  # the default floor, 3, accepts it
