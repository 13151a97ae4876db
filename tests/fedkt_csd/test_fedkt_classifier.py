"""The evaluation round's classifier: a step budget that small synthetic sets cannot starve, per-class recall."""

import pytest
import torch
from torch import nn

from fl_contract.fedkt_csd.classifier import evaluate_classifier, train_classifier, training_budget


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
