"""PLayer-FL and PLayer-FL-Random end to end with the job's own controller and site tasks, in one process: what each
site uploads per round, and the random split fixed before round 1 apart from PLayer-FL's and the full model's."""

import json

import pytest

from federation_tools.playerfl_compare import write_demo_sites
from jobs.playerfl.inprocess import JobFailed, run_in_process
from jobs.playerfl.spec import PLayerFLParams

TINY = {"num_rounds": 2, "image_size": 32, "batch_size": 8, "tracking": False, "min_clients": 3,
        "model_args": {"channels": [4, 4, 8, 8, 8], "hidden": 8}}


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return {site: root / site for site in write_demo_sites(root, 3, 24, 32, 1.0, seed=0)}


def _run(method: str, sites, workspace, **extra) -> dict:
    return json.loads(run_in_process(PLayerFLParams(method=method, **{**TINY, **extra}), sites, workspace).read_text())


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
