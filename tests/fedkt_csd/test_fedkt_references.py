"""What bench/fedkt_demo.py reads FedKT-CSD's synthetic-set classifier against (research.fedkt_references): FedAvg
and pooled real images, same held-out images; and the demo's table of the job's own scores."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from federation_tools.demos.fedkt_csd import DEMO_PARAMS, FEDKT_CNN, FEDKT_LATENTS, scores_table
from fl_contract.fedkt_csd.classifier import build_classifier, train_classifier
from fl_contract.fedkt_csd.protocol import weighted_balanced_accuracy
from fl_contract.models import state_dict_to_numpy
from research.fedkt_references import (
    fedavg_classifier,
    read_sites,
    reference_scores,
)
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.fedkt_csd.site_data import load_split

# A small budget keeps the test quick; the references' arithmetic does not depend on it. Three members, as the
# job defaults to, so that each member's own seed is checked.
JOB = replace(DEMO_PARAMS, classifier_members=3, classifier_epochs=1, classifier_min_steps=4, image_size=32)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sites")
    return {f"site-{i}": write_isic_site(root / f"site-{i}", i, 2, n_images=n, size=32, seed=3)
            for i, n in ((1, 30), (2, 50))}


def _one_fedavg_round(sites, seed: int) -> dict[str, np.ndarray]:
    """What one round of FedAvg must give, computed here: the sites' local models' sample-weighted mean."""
    torch.manual_seed(seed)
    start = build_classifier(JOB.image_size, len(JOB.classes)).state_dict()
    local = []
    for site in sites:
        model = build_classifier(JOB.image_size, len(JOB.classes))
        model.load_state_dict(start)
        local.append(state_dict_to_numpy(train_classifier(site.train.images, site.train.labels, len(JOB.classes), 1,
                                                          seed, model=model, noise_std=JOB.classifier_noise)))
    sizes = np.array([len(site.train.labels) for site in sites], dtype=np.float64)
    assert sizes[0] != sizes[1]  # unequal sites, so a plain mean would differ
    return {name: (sizes[0] * local[0][name] + sizes[1] * local[1][name]) / sizes.sum() for name in local[0]}


def test_each_member_is_one_fedavg_run_with_its_own_seed(folders):
    sites = read_sites(folders, JOB)

    ensemble = fedavg_classifier(sites, JOB, rounds=1)

    assert len(ensemble.members) == JOB.classifier_members == 3
    for index, member in enumerate(ensemble.members):
        expected = _one_fedavg_round(sites, JOB.seed + index)
        for name, value in state_dict_to_numpy(member).items():
            np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-6, err_msg=f"member {index}: {name}")


def test_references_score_every_site_on_the_job_s_own_held_out_images(folders):
    scores = reference_scores(folders, JOB)

    assert set(scores) == {"FedAvg", "pooled real"}
    for method in scores.values():
        for site, folder in folders.items():
            held_out = load_split(folder, JOB.classes, JOB.holdout_fraction, JOB.seed).holdout
            assert method[site]["num_test"] == len(held_out)
            assert 0.0 <= method[site]["balanced_accuracy"] <= 1.0


def test_the_demo_s_table_shows_each_score_and_the_site_weighted_one_and_names_where_the_references_are():
    scores = {FEDKT_CNN: {"site-1": {"balanced_accuracy": 0.5, "num_test": 10.0},
                          "site-2": {"balanced_accuracy": 1.0, "num_test": 30.0}},
              FEDKT_LATENTS: {"site-1": {"balanced_accuracy": 0.25, "num_test": 10.0},
                              "site-2": {"balanced_accuracy": 0.75, "num_test": 30.0}}}

    table = scores_table(scores, epsilon=10.0)

    weighted = re.search(r"site-weighted\s+([\d.]+)\s+([\d.]+)", table)
    assert weighted is not None and weighted.groups() == ("0.875", "0.625")  # (0.5*10 + 1*30) / 40, (2.5 + 22.5) / 40
    assert re.search(r"site-1\s+10\s+0\.500\s+0\.250", table)
    assert "epsilon 10.0" in table
    assert "FedKT-CSD's scores are one secret DP noise draw" in table  # one run is not the method's average
    assert weighted_balanced_accuracy(scores[FEDKT_CNN]) == pytest.approx(0.875)
    assert "FedAvg" in table and "bench/fedkt_demo.py, from a source checkout" in table  # not computed by the demo
