"""Site-side building blocks of the segmentation job, without FLARE: model, data errors, training, DP."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl_contract.job_params.segmentation import SlidingWindow
from fl_contract.labels import BRATS_2021
from fl_contract.models import build_model
from fl_contract.models.segmentation import IN_CHANNELS, segresnet
from fl_contract.segmentation import VAL, split_metric_keys
from site_agent.data.brats_case import MODALITIES
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.data.readers.reader import DataError
from site_agent.segmentation.data import load_site_data
from site_agent.segmentation.dp import privatise_update
from site_agent.segmentation.metrics import score_cases, site_summary
from site_agent.segmentation.training import train_epochs
from tests.support import recipe


def test_registry_builds_the_brats_segresnet():
    net = build_model("segresnet")

    assert IN_CHANNELS == len(MODALITIES)
    assert net.convInit.conv.in_channels == 4 and net.conv_final[-1].conv.out_channels == 3
    assert [len(layer) - 1 for layer in net.down_layers] == [1, 2, 2, 4]  # each level: downsample + its blocks


def test_segresnet_refuses_widths_its_group_norm_cannot_split():
    with pytest.raises(ValueError, match="multiple of 8"):
        segresnet(init_filters=4)


def test_a_broken_case_is_named_not_hidden_behind_monai(tmp_path):
    write_brats_site(tmp_path, 2, n_cases=3, shape=(16, 16, 16), layout="nifti")
    broken = tmp_path / "Site2_001" / "Site2_001_t2.nii.gz"
    broken.write_bytes(broken.read_bytes()[:300])

    with pytest.raises(DataError, match="Site2_001/Site2_001_t2.nii.gz: not a readable NIfTI"):
        load_site_data(tmp_path, recipe((16, 16, 16), val_fraction=0.4))


def test_training_lowers_the_loss_and_validation_scores_every_region(tmp_path):
    write_brats_site(tmp_path, 1, n_cases=3, shape=(16, 16, 16), layout="nifti")
    data = load_site_data(tmp_path, recipe((16, 16, 16), val_fraction=0.34))
    torch.manual_seed(0)
    net = segresnet(init_filters=8, blocks_down=(1, 1, 1), blocks_up=(1, 1), dropout_prob=0.0)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    cpu = torch.device("cpu")

    first = train_epochs(net, data.train_loader(1, seed=0), optimizer, cpu, epochs=1)
    later = train_epochs(net, data.train_loader(1, seed=1), optimizer, cpu, epochs=6)
    window = SlidingWindow((16, 16, 16), 1, 0.5)
    sent = site_summary(score_cases(net, data.eval_loader(VAL), window, cpu, BRATS_2021), VAL)

    assert later < first
    assert set(sent) == set(split_metric_keys(VAL)) and all(np.isfinite(v) for v in sent.values())
    assert all(0.0 <= sent[f"val_dice_{r}"] <= 1.0 for r in ("tc", "wt", "et"))
    assert sent["val_dice_mean"] == pytest.approx(
        np.mean([sent["val_dice_tc"], sent["val_dice_wt"], sent["val_dice_et"]])
    )
    assert sent["val_cases"] == 1.0


def test_dp_clips_the_weight_difference_and_adds_noise_of_the_stated_std():
    rng = np.random.default_rng(0)
    global_params = {"a": np.zeros((200, 200), np.float32), "b": np.ones(10, np.float32)}
    local = {"a": np.full((200, 200), 0.5, np.float32), "b": np.ones(10, np.float32) * 2}

    clipped = privatise_update(global_params, local, clip_norm=1.0, noise_multiplier=0.0, rng=rng)
    noisy = privatise_update(global_params, global_params, clip_norm=1.0, noise_multiplier=0.5, rng=rng)

    diff_norm = np.sqrt(sum(np.sum((clipped[k].astype(np.float64) - global_params[k]) ** 2) for k in clipped))
    assert diff_norm == pytest.approx(1.0, rel=1e-5)
    assert clipped["a"].dtype == np.float32 and clipped["b"].shape == (10,)
    assert np.std(noisy["a"]) == pytest.approx(0.5, rel=0.02)


def test_dp_leaves_a_small_update_unclipped():
    global_params = {"w": np.zeros(4, np.float32)}
    local = {"w": np.array([0.1, 0.0, 0.0, 0.0], np.float32)}

    sent = privatise_update(global_params, local, clip_norm=1.0, noise_multiplier=0.0, rng=np.random.default_rng(0))

    np.testing.assert_allclose(sent["w"], local["w"])


def test_the_split_gives_disjoint_training_validation_and_test_cases_fixed_by_the_seed(tmp_path):
    write_brats_site(tmp_path, 1, n_cases=5, shape=(8, 8, 8), layout="nifti")

    seeded = recipe((8, 8, 8), val_fraction=0.2, test_fraction=0.2, cache_rate=0.0, seed=3)
    split, again = (load_site_data(tmp_path, seeded).split for _ in range(2))

    parts = [{c.case_id for c in cases} for cases in (split.train, split.val, split.test)]
    assert [len(p) for p in parts] == [3, 1, 1] and len(set.union(*parts)) == 5
    assert again == split
    with pytest.raises(ValueError, match="keep their sum below 1"):
        recipe((8, 8, 8), val_fraction=0.5, test_fraction=0.5)
