"""PLayer-FL and PLayer-FL-Random end to end with the job's own controller and site tasks, in one process: what each
site uploads per round, and the random split fixed before round 1 apart from PLayer-FL's and the full model's."""

import json

import numpy as np
import pytest
import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel
from sklearn.metrics import balanced_accuracy_score, f1_score

from fl_contract.models import build_model
from fl_contract.params import ParameterError
from fl_contract.playerfl import protocol
from jobs.playerfl.spec import PLayerFLParams
from reports import evaluation_cli
from reports import playerfl as playerfl_report
from research.playerfl_compare import write_demo_sites
from research.playerfl_inprocess import JobFailed, run_in_process
from server_app.metrics import WEIGHT
from server_app.results import GLOBAL_MODEL_FILE
from site_agent.playerfl.data import IsicImages, load_site_splits

TINY = {"num_rounds": 2, "image_size": 32, "batch_size": 8, "tracking": False, "min_clients": 3,
        "model_args": {"channels": [4, 4, 8, 8, 8], "hidden": 8}}


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return {site: root / site for site in write_demo_sites(root, 3, 24, 32, 1.0, seed=0)}


def _run(method: str, sites, workspace, received=None, **extra) -> dict:
    return json.loads(run_in_process(PLayerFLParams(method=method, **{**TINY, **extra}), sites, workspace,
                                     received).read_text())


def test_playerfl_never_uploads_its_last_layer_and_random_draws_another_split_before_round_1(sites, tmp_path):
    playerfl = _run("playerfl", sites, tmp_path / "playerfl")
    p = playerfl["federated_layers"]
    layers = playerfl["job"]["layers"]

    random = _run("playerfl_random", sites, tmp_path / "random", playerfl_split=p)

    first, second = (r["sites"] for r in playerfl["rounds"])
    assert all(s["sent_layers"] == layers[:-1] for s in first.values())
    assert all(s["sent_layers"] == layers[:p] for s in second.values())
    drawn = random["rounds"][0]["split"]["federated_layers"]
    assert drawn != p and 1 <= drawn < len(layers)
    assert random["federated_layers"] == drawn
    assert all(s["sent_layers"] == layers[:drawn] for r in random["rounds"] for s in r["sites"].values())


def test_a_failing_job_raises_the_controllers_reason(sites, tmp_path):
    with pytest.raises(JobFailed, match="needs 4"):
        _run("fedavg", sites, tmp_path, min_clients=4)


@pytest.mark.parametrize("method", ["playerfl", "fedlp"])
def test_masked_rounds_give_the_plain_runs_split_and_model(sites, tmp_path, method):
    """secure_aggregation on: the same split from the same curves (sent in the clear without their counts; the demo
    sites are of one size, so the unweighted mean equals the weighted one), and per layer the same sample-weighted
    mean over the sites that sent it (FedLP drops some layers), so the federated model equals the plain run's within
    float32 rounding of the fixed point's quantum; and the server was given nothing in the clear but metrics and
    the curves."""
    plain = _run(method, sites, tmp_path / "plain")
    received: list[tuple[str, FLModel]] = []
    masked = _run(method, sites, tmp_path / "masked", received, secure_aggregation=True, update_l2_bound=100.0)

    assert masked["status"] == "finished" and masked["federated_layers"] == plain["federated_layers"]
    assert [r.get("split", {}).get("federated_layers") for r in masked["rounds"]] == \
        [r.get("split", {}).get("federated_layers") for r in plain["rounds"]]
    assert all(r["secure_aggregation"]["survivors"] == sorted(sites) for r in masked["rounds"])
    ours = torch.load(tmp_path / "masked" / "server" / "app_server" / "global_model.pt", weights_only=True)
    theirs = torch.load(tmp_path / "plain" / "server" / "app_server" / "global_model.pt", weights_only=True)
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name].numpy(), value.numpy(), rtol=0, atol=1e-5, err_msg=name)
    _assert_nothing_in_the_clear(received, set(theirs), masked)


def _assert_nothing_in_the_clear(received: list[tuple[str, FLModel]], weight_names: set[str], results: dict) -> None:
    """What the server was given in a masked run: no answer to any task (train, the secure-aggregation steps,
    evaluate) carries a model parameter or the site's training-set size in the clear, not even inside the
    round-1 sensitivity curve; results.json records no per-site count."""
    assert {task for task, _ in received} >= {"train", "evaluate"}
    for task, answer in received:
        assert not weight_names & set(answer.params or {}), f"{task}: weights in the clear"
        meta = answer.meta or {}
        assert FLMetaKey.NUM_STEPS_CURRENT_ROUND not in meta, f"{task}: the sample count in the clear"
        assert protocol.CURVE_SAMPLES not in meta.get(protocol.SENSITIVITY, {}), f"{task}: the curve's count"
    assert all(WEIGHT not in site for site in results["evaluation"].values())


def test_local_training_has_nothing_to_mask():
    with pytest.raises(ParameterError, match="shares no weights"):
        PLayerFLParams(method="local", secure_aggregation=True, update_l2_bound=1.0)


def _scores_of(state: dict, records, image_size: int) -> dict[str, float]:
    """Balanced accuracy and macro-F1 of the model `state` on `records`, computed here with sklearn."""
    net = build_model("cnn5", **PLayerFLParams(**TINY).model_arguments())
    net.load_state_dict(state)
    net.eval()
    images = IsicImages(records, image_size)
    with torch.no_grad():
        predicted = [int(net(images[i][0][None]).argmax()) for i in range(len(images))]
    truth = [int(images[i][1]) for i in range(len(images))]
    return {"test_balanced_accuracy": balanced_accuracy_score(truth, predicted),
            "test_macro_f1": f1_score(truth, predicted, average="macro", zero_division=0)}


@pytest.mark.parametrize("method", ["fedavg", "playerfl"])
def test_cross_site_evaluation_scores_the_global_model_beside_each_personalised_one_at_home(sites, tmp_path, method):
    """Every site scores the server's whole global model on its test split beside its personalised model's score;
    for FedAvg the global column equals sklearn on the saved global model's predictions, and a site sends only the
    two scores for it. A Local job, with no global model, is refused before it runs."""
    received: list[tuple[str, FLModel]] = []
    results = _run(method, sites, tmp_path, received, cross_site_evaluation=True)
    cross = results["cross_site"]
    assert cross["models"] == [protocol.PERSONALISED, "global"] and sorted(cross["sites"]) == sorted(sites)
    for site, row in cross["sites"].items():
        assert row[protocol.PERSONALISED] == {k: results["evaluation"][site][k] for k in row[protocol.PERSONALISED]}
        assert set(row["global"]) == {"test_balanced_accuracy", "test_macro_f1"}
        assert cross["matrix"]["test_balanced_accuracy"][site]["global"] == row["global"]["test_balanced_accuracy"]
    answers = [model for task, model in received if task == protocol.SCORE_GLOBAL_TASK]
    assert len(answers) == len(sites) and all(not a.params and set(a.metrics) == {"test_balanced_accuracy",
                                                                                   "test_macro_f1"} for a in answers)
    layers = results["job"]["layers"]
    if method == "fedavg":
        assert cross["global_model"] == f"{', '.join(layers)} as federated in the last round"
        state = torch.load(tmp_path / "server" / "app_server" / GLOBAL_MODEL_FILE, weights_only=True)
        for site, folder in sites.items():
            expected = _scores_of(state, load_site_splits(folder, TINY.get("seed", 0)).test, TINY["image_size"])
            assert cross["sites"][site]["global"] == pytest.approx(expected, abs=1e-12), site
    else:
        assert f"{layers[-1]} as the server last held them" in cross["global_model"]
    assert evaluation_cli.main([str(tmp_path / "server"), "--out", str(tmp_path / "page")]) == 0
    page = (tmp_path / "page" / "cross_site.html").read_text()
    assert "personalised model (at home only" in page and all(
        f"{value:.3f}" in page for row in cross["matrix"]["test_balanced_accuracy"].values() for value in row.values())
    report = playerfl_report.write_report(playerfl_report.load_runs([tmp_path / "server"]), tmp_path / "report")
    site_1 = cross["sites"]["site-1"] if "site-1" in cross["sites"] else next(iter(cross["sites"].values()))
    assert f"{site_1['global']['test_balanced_accuracy']:.3f}" in report.read_text()
    assert (tmp_path / "report" / f"cross_site_{method}_seed0.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ParameterError, match="no global model to score"):
        PLayerFLParams(method="local", cross_site_evaluation=True, **TINY)
