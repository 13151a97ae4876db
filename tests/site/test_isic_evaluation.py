"""The ISIC evaluation site task: what it sends about a classifier's predictions, every number against sklearn on
the same predictions, and the small cells its policy's min_cases keeps at the site."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from sklearn.metrics import balanced_accuracy_score, confusion_matrix, f1_score, recall_score
from torch.utils.data import DataLoader

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.evaluation import CONFUSION, WITHHELD
from fl_contract.models import build_model, state_dict_to_numpy
from jobs.isic_evaluation.spec import KIND, IsicEvaluationParams
from site_agent.classification.evaluation_release import isic_release
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.isic import read_isic_site
from site_agent.kit.site_config import SiteConfig
from site_agent.playerfl.data import IsicImages
from site_agent.privacy.policy import POLICY_FILE, SitePolicy
from site_agent.tasks.executor import SiteContext

PARAMS = IsicEvaluationParams(model_args={"channels": [4, 4, 8, 8, 8], "hidden": 8}, image_size=32)


def test_the_site_sends_scores_equal_to_sklearns_on_the_models_own_predictions(tmp_path):
    folder = write_isic_site(tmp_path / "isic", 1, n_images=40, size=32)
    local = tmp_path / "local"
    local.mkdir()
    (local / POLICY_FILE).write_text(json.dumps(SitePolicy(min_cases=3).to_json()))
    ctx = SiteContext("site-1", SiteConfig(local / "site_agent.json", {"isic": str(folder)}), torch.device("cpu"),
                      tmp_path / "workspace", Signal())
    torch.manual_seed(0)
    network, arguments = PARAMS.model_spec()
    net = build_model(network, **arguments)
    task = KIND.site_task_component(PARAMS).instantiate()

    sent = task.task_evaluate(FLModel(params=state_dict_to_numpy(net), params_type=ParamsType.FULL), ctx)

    records = read_isic_site(folder, classes=PLAYERFL_CLASSES)
    net.eval()
    with torch.no_grad():
        pairs = [(labels.numpy(), net(images).argmax(dim=1).numpy())
                 for images, labels in DataLoader(IsicImages(records, 32), batch_size=7)]
    truth, predicted = np.concatenate([t for t, _ in pairs]), np.concatenate([p for _, p in pairs])
    assert sent.metrics["eval_images"] == len(records) == 40
    assert sent.metrics["eval_balanced_accuracy"] == pytest.approx(balanced_accuracy_score(truth, predicted))
    assert sent.metrics["eval_macro_f1"] == pytest.approx(
        f1_score(truth, predicted, labels=range(4), average="macro", zero_division=0))
    recalls = recall_score(truth, predicted, labels=range(4), average=None, zero_division=0)
    counts = confusion_matrix(truth, predicted, labels=range(4))
    for index, name in enumerate(PLAYERFL_CLASSES):
        if counts[index].sum() >= 3:
            assert sent.metrics[f"eval_recall_{name.lower()}"] == pytest.approx(recalls[index])
    cells = sent.meta[CONFUSION]["counts"]
    assert [[c for c in row] for row in cells] == [[int(n) if n == 0 or n >= 3 else None for n in row]
                                                   for row in counts]
    assert not any(r.image in json.dumps(sent.meta) + repr(sent.metrics) for r in records)  # no image name leaves


def test_cells_and_recalls_of_fewer_than_min_cases_images_stay_at_the_site_and_are_named():
    truth = np.array([0] * 10 + [1] * 2 + [2] * 6)
    predicted = np.array([0] * 8 + [3] * 2 + [1, 0] + [2] * 5 + [1])

    metrics, meta = isic_release(truth, predicted, PLAYERFL_CLASSES, min_cases=5)

    assert meta[CONFUSION]["counts"] == [[8, 0, 0, None], [None, None, 0, 0], [0, None, 5, 0], [0, 0, 0, 0]]
    assert "eval_recall_" + PLAYERFL_CLASSES[1].lower() not in metrics
    assert metrics["eval_recall_" + PLAYERFL_CLASSES[0].lower()] == 0.8 and metrics["eval_images"] == 18
    assert meta[WITHHELD][CONFUSION] == "4 cells of fewer than min_cases=5 images are left empty"
    assert "2 images of" in meta[WITHHELD]["eval_recall_" + PLAYERFL_CLASSES[1].lower()]
