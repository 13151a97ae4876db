"""PLayer-FL as a real FLARE job in the simulator (4 label-skewed ISIC-format sites), FedAvg and Local beside it, and
the report comparing them."""

import json
from pathlib import Path

import pytest
from support import JOB_FILES, read_exported_job
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from jobs.common import build_job, export
from jobs.playerfl.spec import KIND, PLayerFLParams
from reports.playerfl import load_runs, write_report
from research.playerfl_compare import simulate_method, write_demo_sites
from research.playerfl_inprocess import run_in_process
from site_agent import __version__

NARROW_CNN5 = {"channels": [8, 16, 32, 64, 64], "hidden": 32}
JOB = {"num_rounds": 3, "image_size": 32, "batch_size": 16, "model_args": NARROW_CNN5}


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


def _runs(root: Path) -> dict[str, Path]:
    """PLayer-FL through FLARE's simulator; the baselines it is compared with by the same controller and site tasks in
    this process (`research.playerfl_inprocess`), which saves two simulator runs. Returns each run's
    results.json."""
    sites = write_demo_sites(root / "data", 4, 40, 32, 0.5, seed=0)
    runs = {"playerfl-seed0": simulate_method("playerfl", root, sites, root / "data", 0, **JOB)}
    for method in ("fedavg", "local"):
        params = PLayerFLParams(method=method, seed=0, min_clients=len(sites), tracking=False, **JOB)
        runs[f"{method}-seed0"] = run_in_process(params, {s: root / "data" / s for s in sites},
                                                 root / "runs" / f"{method}-seed0")
    return runs


@pytest.mark.simulator
def test_playerfl_fedavg_and_local_finish_and_the_report_has_every_metric(tmp_path):
    paths = _runs(tmp_path)
    report = write_report(load_runs(paths.values()), tmp_path / "report")

    runs = {name: json.loads(path.read_text()) for name, path in paths.items()}
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
