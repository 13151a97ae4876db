"""The methods as strategies: one contract both sides read, a site behaviour and (where due) a server split rule
for every method name, and what each contract says about the wire."""

import numpy as np
import pytest
import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel
from torch import nn

from fl_contract.playerfl.layers import model_layers
from fl_contract.playerfl.methods import REGISTRY, get_method
from fl_contract.playerfl.protocol import METHODS, SENSITIVITY
from jobs.playerfl.spec import KIND, PLayerFLParams
from server_app.aggregation import take_updates
from server_app.playerfl import PLayerFLController
from server_app.playerfl_split import SPLIT_RULES, SplitInputs, random_split, threshold_split
from site_agent.playerfl.methods import SITE_METHODS, MethodOptions, site_method
from site_agent.playerfl.state import SiteState
from site_agent.tasks.playerfl import PLayerFLTask

ARGS = KIND.site_task_component(PLayerFLParams()).args  # what a default playerfl job configures, on both sides

LAYERS = model_layers(nn.Sequential(nn.Linear(1, 1), nn.Linear(1, 1)))
GLOBAL = {"0.weight": np.zeros((1, 1), np.float32), "0.bias": np.zeros(1, np.float32),
          "1.weight": np.zeros((1, 1), np.float32), "1.bias": np.zeros(1, np.float32)}
OPTIONS = MethodOptions(fedprox_mu=0.1, ditto_lambda=0.1, fedlp_keep=0.5, pfedme_lambda=0.1, pfedme_steps=2,
                        finetune_epochs=1, seed=0)


def test_every_method_name_has_a_contract_and_a_site_behaviour_and_splits_have_a_server_rule():
    assert tuple(REGISTRY) == METHODS
    assert tuple(SITE_METHODS) == METHODS
    assert set(SPLIT_RULES) == {name for name, method in REGISTRY.items()
                                if method.chooses_split(0) or method.split_before_training}
    assert all(site_method(name, OPTIONS).contract is REGISTRY[name] for name in METHODS)


@pytest.mark.parametrize("name, shared, curve, split, up_front, partial", [
    ("local", 0, False, False, False, False),
    ("fedavg", 7, False, False, False, False),
    ("fedprox", 7, False, False, False, False),
    ("ditto", 7, False, False, False, False),
    ("fedbabu", 6, False, False, False, False),
    ("fedlp", 7, False, False, False, True),
    ("pfedme", 7, False, False, False, False),
    ("playerfl", 6, True, True, False, False),
    ("playerfl_random", 7, False, False, True, False),
])
def test_contract_says_what_is_federated_and_when_curves_and_splits_happen(name, shared, curve, split, up_front,
                                                                           partial):
    method = get_method(name)

    assert method.initial_shared_layers(7) == shared
    assert [method.sends_sensitivity(r) for r in range(3)] == [curve, False, False]
    assert [method.chooses_split(r) for r in range(3)] == [split, False, False]
    assert method.split_before_training is up_front
    assert method.partial_upload is partial


def test_unknown_method_is_refused_on_both_sides_with_the_choices():
    edited = {**ARGS, "params": {**ARGS["params"], "method": "fedrep"}}  # a hand-edited job
    with pytest.raises(ValueError, match="method='fedrep': choose from .*'playerfl_random'"):
        PLayerFLTask(**edited)
    with pytest.raises(ValueError, match="method='fedrep'"):
        PLayerFLController(**edited)
    with pytest.raises(ValueError, match="unknown method 'fedrep'"):
        site_method("fedrep", OPTIONS)


def test_fedlp_drops_whole_layers_the_same_way_for_the_same_seed_site_and_round():
    fedlp, fedavg = site_method("fedlp", OPTIONS), site_method("fedavg", OPTIONS)
    many = LAYERS * 20

    kept = fedlp.upload(many, "site-1", 3)

    assert kept == fedlp.upload(many, "site-1", 3) != fedlp.upload(many, "site-1", 4)
    assert 0 < len(kept) < len(many)
    assert fedavg.upload(many, "site-1", 3) == many


def _curve_result(site: str, n: int, importance: list[float]) -> FLModel:
    curve = {"layers": ["a", "b", "c", "d"], "importance": importance, "cumulative": np.cumsum(importance).tolist()}
    return FLModel(params={}, meta={"client_name": site, FLMetaKey.NUM_STEPS_CURRENT_ROUND: n, SENSITIVITY: curve})


def test_threshold_rule_records_why_and_is_the_same_for_every_arrival_order():
    results = [_curve_result("site-2", 3, [1.0, 1.0, 20.0, 1.0]), _curve_result("site-1", 1, [1.0, 1.0, 1.0, 1.0])]
    records = []
    for order in (results, results[::-1]):
        intake = take_updates(order, [], lambda update, meta: None)
        inputs = SplitInputs(["a", "b", "c", "d"], {s: m[SENSITIVITY] for s, m in intake.meta.items()},
                             {u.site: u.num_samples for u in intake.updates}, threshold=3.0, seed=0)
        records.append(threshold_split(inputs, lambda message: None))

    assert records[0] == records[1]
    assert records[0]["federated_layers"] == 2
    assert records[0]["site_splits"] == {"site-1": 3, "site-2": 2}
    assert list(records[0]["site_curves"]) == ["site-1", "site-2"]
    assert [c[-1] for c in records[0]["site_normalised_curves"].values()] == [1.0, 1.0]


def test_random_rule_draws_p_by_seed_never_playerfls_p_nor_the_full_model():
    inputs = [SplitInputs(list("abcdefgh"), {}, {}, threshold=1.5, seed=seed, playerfl_split=4) for seed in range(40)]

    splits = [random_split(i, lambda message: None)["federated_layers"] for i in inputs]

    assert splits == [random_split(i, lambda message: None)["federated_layers"] for i in inputs]
    assert set(splits) == {1, 2, 3, 5, 6, 7}


def test_random_rule_refuses_a_playerfl_split_the_model_cannot_have():
    with pytest.raises(ValueError, match="playerfl_split=8: the model has 8 layers"):
        random_split(SplitInputs(list("abcdefgh"), {}, {}, threshold=1.5, seed=0, playerfl_split=8), lambda m: None)


class _RecordingTrainer:
    """Stands in for LocalTrainer: records the order of training passes and the sensitivity batch draw."""

    def __init__(self, epochs: int, round_number: int):
        self.epochs, self.round_number, self.events = epochs, round_number, []
        self.loss_fn = nn.functional.cross_entropy

    def train(self, model, penalty=None, epochs=None, role="model"):
        self.events.append(f"train {epochs or self.epochs}")
        return 0.5

    def fresh_batch(self):
        self.events.append("sensitivity batch")
        return torch.randn(4, 3), torch.tensor([0, 1, 0, 1])


@pytest.mark.parametrize("epochs, round_number, events", [
    (3, 0, ["train 1", "sensitivity batch", "train 2"]),
    (1, 0, ["train 1", "sensitivity batch"]),
    (3, 1, ["train 3"]),
])
def test_playerfl_measures_sensitivity_after_the_first_local_epoch(epochs, round_number, events):
    trainer = _RecordingTrainer(epochs, round_number)
    net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))

    local = site_method("playerfl", OPTIONS).train(net, {}, SiteState(model={}), trainer)

    assert trainer.events == events
    assert (local.sensitivity is not None) is (round_number == 0)
