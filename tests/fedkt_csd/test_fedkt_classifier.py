"""The evaluation round's classifier: a step budget that small synthetic sets cannot starve, per-class recall."""

import numpy as np
import pytest
import torch
from torch import nn

from fl_contract.fedkt_csd.classifier import (
    Ensemble,
    build_ensemble,
    evaluate_classifier,
    predict,
    train_classifier,
    train_ensemble,
    training_budget,
)
from fl_contract.models import load_numpy_params, state_dict_to_numpy


def _bright_and_dark(n: int, size: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes a classifier can separate: dark and bright noisy images."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 2
    images = 0.2 + 0.6 * labels[:, None, None, None] + 0.1 * torch.rand(n, 3, size, size, generator=generator)
    return images, labels


@pytest.mark.parametrize(("images", "epochs", "min_steps", "expected"), [
    (77, 10, 400, (134, 402)),  # the old demo's set: 3 batches a pass, so 134 passes
    (10_000, 10, 400, (10, 3130)),  # a large set keeps its 10 passes
    (64, 10, 0, (10, 20)),
])
def test_training_budget_takes_the_larger_of_the_passes_and_the_steps(images, epochs, min_steps, expected):
    budget = training_budget(images, epochs, min_steps, batch_size=32)

    assert (budget.epochs, budget.steps) == expected


def test_a_small_set_needs_the_step_budget_to_learn():
    images, labels = _bright_and_dark(24)

    starved = train_classifier(images, labels, 2, epochs=1, seed=0)
    trained = train_classifier(images, labels, 2, epochs=1, seed=0, min_steps=60)

    assert evaluate_classifier(starved, images, labels)["predicted_classes"] == 1
    assert evaluate_classifier(trained, images, labels)["balanced_accuracy"] == 1.0


class _Constant(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tensor([0.0, 1.0, 0.0]).expand(len(x), 3)


def test_evaluation_reports_recall_per_class_present_and_a_constant_prediction():
    labels = torch.tensor([0, 1, 1, 1])

    metrics = evaluate_classifier(_Constant(), torch.zeros(4, 3, 32, 32), labels, ["BCC", "MEL", "NV"])

    assert metrics == {"accuracy": 0.75, "balanced_accuracy": 0.5, "num_test": 4.0, "predicted_classes": 1.0,
                       "recall_BCC": 0.0, "recall_MEL": 1.0}


class _Fixed(nn.Module):
    """Logits whose softmax is `probabilities` for every image."""

    def __init__(self, probabilities: list[float]):
        super().__init__()
        self.logits = torch.log(torch.tensor(probabilities))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(len(x), -1)


def test_the_ensemble_classifies_by_its_members_mean_probabilities_not_by_their_votes():
    # Two members lean to class 1, one is sure of class 0: a vote says 1, the mean probability (0.6 vs 0.4) says 0.
    ensemble = Ensemble([_Fixed([0.9, 0.1]), _Fixed([0.45, 0.55]), _Fixed([0.45, 0.55])])

    probabilities = ensemble(torch.zeros(2, 3, 8, 8))

    torch.testing.assert_close(probabilities, torch.tensor([[0.6, 0.4], [0.6, 0.4]]))
    assert predict(ensemble, torch.zeros(2, 3, 8, 8)).tolist() == [0, 0]


def test_each_member_is_the_single_classifier_with_its_own_seed_and_a_site_loads_them_all():
    images, labels = _bright_and_dark(24)

    ensemble = train_ensemble(images, labels, 2, epochs=2, seed=5, members=3, noise_std=0.03)
    at_site = build_ensemble(32, 2, members=3)
    load_numpy_params(at_site, state_dict_to_numpy(ensemble))

    for index, member in enumerate(ensemble.members):
        alone = train_classifier(images, labels, 2, epochs=2, seed=5 + index, noise_std=0.03)
        for (name, value), expected in zip(member.state_dict().items(), alone.state_dict().values()):
            torch.testing.assert_close(value, expected, msg=f"member {index}: {name}")
    first, second = (state_dict_to_numpy(m) for m in ensemble.members[:2])
    assert any(not np.array_equal(first[k], second[k]) for k in first)  # seeds differ, so the members do
    torch.testing.assert_close(at_site(images.flip(0)), ensemble(images.flip(0)))
