"""Masked weight updates: the fixed-point layout at its bounds, the site's checks before masking, uniform-looking
masked vectors, and the server's masked intake with a site lost after sharing its keys (exactly the others' plain
weighted mean). Sites and server run their own code in-process; every message crosses FLARE's serialisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel
from scipy import stats
from support import over_the_wire

from fl_contract import secure_aggregation_messages as messages
from fl_contract.masked_weights import (
    GROUPS,
    MAX_L2_BOUND,
    MAX_SAMPLES,
    QUANTUM,
    TASK_MASKED,
    MaskedUpdateError,
    SecureWeightsParams,
    WeightGroups,
)
from fl_contract.params import ParameterError
from fl_contract.secure_aggregation import SecureAggregationError
from jobs.fedavg_linear.spec import FedAvgLinearParams
from jobs.segmentation.spec import SegmentationParams
from server_app.aggregation import SiteUpdate, weighted_mean
from server_app.masked_round import masked_intake
from site_agent.secure_aggregation.masked_updates import MaskedUpdates

SITES = ["site-1", "site-2", "site-3", "site-4"]
RNG = np.random.default_rng(0)
GLOBAL = {"conv.weight": RNG.normal(size=(4, 3)).astype(np.float32), "conv.bias": RNG.normal(size=4).astype(np.float32)}


def _trained(shift: float, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (v + shift * rng.normal(size=v.shape)).astype(np.float32) for k, v in GLOBAL.items()}


def test_parameters_refuse_masking_without_a_bound_or_with_a_robust_rule():
    with pytest.raises(ParameterError, match="update_l2_bound > 0"):
        FedAvgLinearParams(secure_aggregation=True)
    with pytest.raises(ParameterError, match="'median' cannot run on masked updates"):
        SegmentationParams(secure_aggregation=True, update_l2_bound=5.0, aggregation="median")
    with pytest.raises(ParameterError, match="at most"):
        FedAvgLinearParams(secure_aggregation=True, update_l2_bound=2 * MAX_L2_BOUND)
    with pytest.raises(ParameterError, match="below dp_clip_norm"):
        SegmentationParams(secure_aggregation=True, update_l2_bound=1.0, dp_clip_norm=2.0, dp_noise_multiplier=1.0)
    assert isinstance(FedAvgLinearParams(), SecureWeightsParams)


def test_the_sum_at_the_overflow_bound_decodes_to_the_mean_within_the_quantum():
    """MAX_SAMPLES samples in all, every entry of every difference at +-bound: the ring sum does not wrap."""
    layout = WeightGroups.of([["w"]], {"w": np.zeros(2)})
    bound = MAX_L2_BOUND
    counts = [MAX_SAMPLES // 4, MAX_SAMPLES // 4, MAX_SAMPLES // 2]
    deltas = [np.array([bound, 0.0]), np.array([-bound, 0.0]), np.array([0.0, bound])]
    total = np.zeros(layout.length, dtype=np.uint64)
    for n, d in zip(counts, deltas, strict=True):
        np.add(total, layout.encode({"w": np.zeros(2)}, {"w": d}, n, bound), out=total)
    means, group_counts = layout.decode(total)
    assert group_counts == [MAX_SAMPLES]
    expected = sum(n * d for n, d in zip(counts, deltas, strict=True)) / MAX_SAMPLES
    np.testing.assert_allclose(means["w"], expected, rtol=0, atol=QUANTUM)
    # one sample more than the bound is refused at the site, before anything is masked
    with pytest.raises(MaskedUpdateError, match=f"from 1 to {MAX_SAMPLES}"):
        layout.encode({"w": np.zeros(2)}, {"w": deltas[0]}, MAX_SAMPLES + 1, bound)


@pytest.mark.parametrize(("trained", "samples", "message"), [
    ({"conv.weight": GLOBAL["conv.weight"] + 3.0, "conv.bias": GLOBAL["conv.bias"]}, 5, "exceeds the job's"),
    ({"conv.weight": np.full((4, 3), np.nan, np.float32), "conv.bias": GLOBAL["conv.bias"]}, 5, "not finite"),
    ({"conv.weight": np.zeros((3, 3), np.float32), "conv.bias": GLOBAL["conv.bias"]}, 5, "has shape"),
    ({**GLOBAL, "extra": np.zeros(1, np.float32)}, 5, "did not send"),
    (GLOBAL, 0, "from 1 to"),
], ids=["L2 bound", "NaN", "shape", "extra parameter", "no samples"])
def test_the_site_checks_what_the_server_cannot_and_sends_nothing(tmp_path, trained, samples, message):
    site = MaskedUpdates("site-1", l2_bound=1.0)
    received = FLModel(params=GLOBAL, meta={messages.SESSION: "s", GROUPS: [list(GLOBAL)]})
    with pytest.raises(RuntimeError, match=message):
        site.begin(received, FLModel(params=trained, meta={FLMetaKey.NUM_STEPS_CURRENT_ROUND: samples}), tmp_path)


def test_a_train_task_without_a_session_gets_no_weights_in_the_clear(tmp_path):
    """A server that leaves the session out (to be sent plain weights) gets an error, not the update."""
    site = MaskedUpdates("site-1", l2_bound=10.0)
    trained = FLModel(params=_trained(0.1, 1), meta={FLMetaKey.NUM_STEPS_CURRENT_ROUND: 5})
    with pytest.raises(RuntimeError, match="no weights are sent in the clear"):
        site.begin(FLModel(params=GLOBAL, meta={}), trained, tmp_path)


class Relay:
    """The server's side of the wire in-process; `lost` sites stop answering from the named task on."""

    ORDER = ("train", messages.TASK_SHARES, TASK_MASKED, messages.TASK_UNMASK)

    def __init__(self, root: Path, lost: dict[str, str] | None = None):
        self.root, self.lost = root, lost or {}
        self.sites = {site: MaskedUpdates(site, l2_bound=10.0) for site in SITES}
        self.sent: dict[str, dict[str, FLModel]] = {}

    def train(self, session: str, counts: dict[str, int]) -> list[FLModel]:
        received = over_the_wire(FLModel(params=GLOBAL, meta={messages.SESSION: session, GROUPS: [list(GLOBAL)]}))
        answers = []
        for index, site in enumerate(SITES):
            trained = FLModel(params=_trained(0.2, index), metrics={"loss": 1.0},
                              meta={FLMetaKey.NUM_STEPS_CURRENT_ROUND: counts[site]})
            answer = over_the_wire(self.sites[site].begin(received, trained, self.root / site))
            answer.meta["client_name"] = site
            answers.append(answer)
        self.sent["train"] = {site_answer.meta["client_name"]: site_answer for site_answer in answers}
        return answers

    def send(self, task: str, model: FLModel, targets: list[str] | None) -> dict[str, FLModel]:
        answering = [s for s in targets or SITES
                     if s not in self.lost or self.ORDER.index(task) < self.ORDER.index(self.lost[s])]
        self.sent[task] = {s: over_the_wire(self.sites[s].answer(task, over_the_wire(model))) for s in answering}
        return self.sent[task]


def _intake(relay: Relay, counts: dict[str, int]):
    answers = relay.train("job/round-1/send-1", counts)
    return masked_intake(answers, SITES, "job/round-1/send-1", 3, WeightGroups.of([list(GLOBAL)], GLOBAL),
                         relay.send, print, print)


def test_the_masked_round_is_the_plain_weighted_mean_and_no_answer_holds_weights(tmp_path):
    counts = {"site-1": 3, "site-2": 10, "site-3": 7, "site-4": 1}
    relay = Relay(tmp_path)

    intake = _intake(relay, counts)

    plain = weighted_mean([SiteUpdate(s, _trained(0.2, i), counts[s]) for i, s in enumerate(SITES)])
    ours = intake.masked.applied_to(GLOBAL)
    for name in GLOBAL:
        np.testing.assert_allclose(ours[name], plain[name], rtol=0, atol=QUANTUM + 1e-6)
    assert intake.masked.counts == [sum(counts.values())] and intake.contributors == SITES
    for answer in relay.sent["train"].values():  # keys and metrics only: no weights, no sample count
        assert set(answer.params) == {messages.MASK_KEY, messages.SHARE_KEY}
        assert FLMetaKey.NUM_STEPS_CURRENT_ROUND not in answer.meta
    assert {k for a in relay.sent[TASK_MASKED].values() for k in a.params} == {messages.MASKED}


def test_a_site_masks_its_update_once_per_session(tmp_path):
    relay = Relay(tmp_path)
    _intake(relay, {site: 5 for site in SITES})
    with pytest.raises(RuntimeError, match="no keys for session"):  # unmasked already: the session is gone
        relay.sites["site-1"].answer(TASK_MASKED, FLModel(params={}, meta={messages.SESSION: "job/round-1/send-1"}))
    again = Relay(tmp_path)
    answers = again.train("s2", {site: 5 for site in SITES})
    assert answers
    shares = again.send(messages.TASK_SHARES, FLModel(params=messages.key_exchange_params(
        {s: messages.read_keys(a.params) for s, a in again.sent["train"].items()}),
        meta={messages.SESSION: "s2", messages.THRESHOLD: 3}), SITES)
    relayed = {f"{sender}/{recipient}": a.params[recipient] for sender, a in shares.items() for recipient in a.params}
    request = FLModel(params=relayed, meta={messages.SESSION: "s2", messages.SITES: SITES})
    again.sites["site-1"].answer(TASK_MASKED, over_the_wire(request))
    with pytest.raises(RuntimeError, match="already sent its masked update"):
        again.sites["site-1"].answer(TASK_MASKED, over_the_wire(request))


def test_one_sites_masked_vector_looks_uniform(tmp_path):
    """Kolmogorov-Smirnov against the uniform distribution on the ring, for the high and low 32-bit halves."""
    relay = Relay(tmp_path)
    _intake(relay, {site: 5 for site in SITES})
    vector = np.asarray(relay.sent[TASK_MASKED]["site-2"].params[messages.MASKED], dtype=np.uint64)
    assert vector.size == WeightGroups.of([list(GLOBAL)], GLOBAL).length
    # the plain vector is mostly tiny integers and zeros; masked, every word is spread over the whole ring
    def ks_pvalue(ring: np.ndarray) -> float:
        words = np.concatenate([ring >> np.uint64(32), ring & np.uint64(0xFFFFFFFF)]).astype(np.float64) / 2**32
        return float(stats.kstest(words, "uniform").pvalue)

    plain = WeightGroups.of([list(GLOBAL)], GLOBAL).encode(GLOBAL, _trained(0.2, 1), 5, 10.0)
    assert ks_pvalue(vector) > 1e-3
    assert ks_pvalue(plain) < 1e-6  # the test can tell: the unmasked vector is far from uniform


def test_a_site_lost_after_sharing_is_dropped_and_the_round_is_the_others_mean_exactly(tmp_path):
    counts = {"site-1": 3, "site-2": 10, "site-3": 7, "site-4": 1}
    relay = Relay(tmp_path, lost={"site-3": TASK_MASKED})

    intake = _intake(relay, counts)

    assert intake.masked.dropped == ["site-3"] and intake.contributors == ["site-1", "site-2", "site-4"]
    others = [SiteUpdate(s, _trained(0.2, i), counts[s]) for i, s in enumerate(SITES) if s != "site-3"]
    plain = weighted_mean(others)
    ours = intake.masked.applied_to(GLOBAL)
    for name in GLOBAL:
        np.testing.assert_allclose(ours[name], plain[name], rtol=0, atol=QUANTUM + 1e-6)
    assert intake.masked.counts == [14]


def test_below_the_threshold_the_round_stops_naming_the_missing_sites(tmp_path):
    relay = Relay(tmp_path, lost={"site-3": TASK_MASKED, "site-4": TASK_MASKED})
    with pytest.raises(SecureAggregationError, match=r"missing: site-3, site-4"):
        _intake(relay, {site: 5 for site in SITES})
