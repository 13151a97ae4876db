"""A site's training data as the paper's ISIC setup reads it: class-weighted focal loss, normalisation, and MONAI
augmentation that a round repeats exactly."""

import pytest
import torch

from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.isic import IsicRecord
from site_agent.playerfl.data import CHANNEL_MEAN, IsicImages, class_weights, load_site_splits
from site_agent.playerfl.training import focal_loss


def _records(labels: list[int]) -> list[IsicRecord]:
    return [IsicRecord(f"ISIC_{i:07d}", None, label, "NV") for i, label in enumerate(labels)]  # type: ignore[arg-type]


def test_alpha_is_the_inverse_class_frequency_and_zero_for_an_absent_class():
    weights = class_weights(_records([0, 0, 0, 1, 3, 3]))

    assert weights == pytest.approx([6 / (3 * 3), 6 / (3 * 1), 0.0, 6 / (3 * 2)])


def test_focal_loss_weighs_each_class_by_its_alpha():
    logits, labels = torch.zeros(2, 4), torch.tensor([0, 1])

    plain, weighted = focal_loss(1.0)(logits, labels), focal_loss(1.0, [1.0, 3.0, 0.0, 0.0])(logits, labels)

    assert float(weighted) == pytest.approx(2 * float(plain))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = write_isic_site(tmp_path_factory.mktemp("isic"), 1, n_sites=2, n_images=12, size=32)
    return load_site_splits(folder, seed=0).train


def test_augmentation_repeats_after_a_reseed_and_evaluation_images_are_only_normalised(site):
    augmented, plain = IsicImages(site, 32, augment=True), IsicImages(site, 32)

    augmented.reseed(7)
    first = [augmented[i][0] for i in range(3)]
    augmented.reseed(7)
    again = [augmented[i][0] for i in range(3)]

    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], plain[0][0])
    assert type(plain[0][0]) is torch.Tensor and plain[0][0].shape == (3, 32, 32)
    skin_red = float(plain[0][0][0, 0, 0])  # a corner is skin: red ~215/255, normalised with the ImageNet mean
    assert skin_red == pytest.approx((215 / 255 - CHANNEL_MEAN[0]) / 0.229, abs=0.6)
