"""PLayer-FL, FedAvg and Local as real FLARE jobs in the simulator (4 label-skewed ISIC-format sites) and the report."""

import json

import pytest
from support import JOB_FILES, read_exported_job
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from federation_tools.playerfl_compare import run_playerfl_demo
from jobs.common import build_job, export
from jobs.playerfl.spec import KIND, PLayerFLParams
from site_agent import __version__

NARROW_CNN5 = {"channels": [8, 16, 32, 64, 64], "hidden": 32}


def test_exported_job_ships_no_code_and_keeps_every_parameter(tmp_path):
    params = PLayerFLParams(method="ditto", num_rounds=4, image_size=64, threshold=2.0, ditto_lambda=0.3)
    job_dir = export(build_job(KIND, params), tmp_path)

    job = read_exported_job(job_dir)
    server, client = job.workflow, job.executor

    assert job.files == JOB_FILES
    assert job.meta["site_agent_version"] == __version__
    assert server["path"] == "server_app.playerfl.PLayerFLController"
    expected = {"method": "ditto", "num_rounds": 4, "threshold": 2.0, "ditto_lambda": 0.3, "image_size": 64}
    assert server["args"] == client["args"] and server["args"]["kind"] == "playerfl"
    assert server["args"]["params"] | expected == server["args"]["params"]
    assert client["path"] == "site_agent.tasks.playerfl.PLayerFLTask"
    assert set(KIND.site_classes) <= set(job.site_classes()) and set(KIND.server_classes) <= set(job.server_classes())


@pytest.mark.simulator
def test_playerfl_fedavg_and_local_finish_and_the_report_has_every_metric(tmp_path):
    report = run_playerfl_demo(tmp_path, num_rounds=3, model_args=NARROW_CNN5)

    runs = {p.parent.parent.parent.parent.name: json.loads(p.read_text())
            for p in (tmp_path / "runs").rglob("results.json")}
    playerfl = runs["playerfl-seed0"]
    split = playerfl["rounds"][0]["split"]
    prefix = split["layers"][: split["federated_layers"]]
    assert {r["status"] for r in runs.values()} == {"finished"}
    assert 1 <= split["federated_layers"] < len(split["layers"])
    assert set(split["site_curves"]) == {"site-1", "site-2", "site-3", "site-4"}
    for entry in playerfl["rounds"][1:]:
        assert ({site: v["sent_layers"] for site, v in entry["sites"].items()}
                == {s: prefix for s in split["site_curves"]})
    assert all(v["sent_layers"] == [] for v in runs["local-seed0"]["rounds"][-1]["sites"].values())
    assert all(v["sent_layers"] == split["layers"] for v in runs["fedavg-seed0"]["rounds"][-1]["sites"].values())
    summary = json.loads((report.parent / "summary.json").read_text())
    for method in ("playerfl", "fedavg", "local"):
        row = summary["methods"][method]
        shown = [k for k in row if k != "seeds" and (method == "playerfl" or not k.endswith("incentivisation"))]
        assert all(row[k] is not None and 0.0 <= row[k][0] <= 1.0 for k in shown), (method, row)
        assert method == "playerfl" or row["test_macro_f1_incentivisation"] is None  # it compares against them
    assert "| playerfl | 1 |" in report.read_text()
    assert {p.name for p in report.parent.glob("*.png")} == {
        "sites_test_macro_f1.png", "sites_test_balanced_accuracy.png", "sensitivity_seed0.png"}
    for site in split["site_curves"]:  # TensorBoard, per site: each round's metrics, the final scores at num_rounds
        events = EventAccumulator(
            str(tmp_path / "runs" / "playerfl-seed0" / "server" / "simulate_job" / "tb_events" / site))
        events.Reload()
        assert [e.step for e in events.Scalars("train_loss")] == [0, 1, 2], site
        assert [e.step for e in events.Scalars("val_macro_f1")] == [1, 2, 3], site
        assert [e.step for e in events.Scalars("test_macro_f1")] == [3], site
