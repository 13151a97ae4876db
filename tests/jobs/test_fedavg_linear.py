"""The FedAvg reference job: exported without code, reproduced in FLARE's simulator, robust to a diverging site."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from support import FEDAVG_REFERENCE, JOB_FILES, in_the_clear, read_exported_job

from federation_tools.flare_simulator import SITE_NAMES_KEPT
from federation_tools.simulate import simulate
from fl_contract.masked_weights import QUANTUM
from fl_contract.params import params_to_json
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from server_app.transfers import read_transfers
from site_agent import __version__
from site_agent.data.demo.linear_demo import FILE_NAME, write_linear_site
from site_agent.privacy.audit import RESULT_SENT, TASK_RECEIVED

SITES = ["site-1", "site-2", "site-3"]


def _site_data(root: Path) -> dict[str, str]:
    for index, site in enumerate(SITES, start=1):
        write_linear_site(root / site / "linear", index)
    return {"linear": str(root / "{site_name}" / "linear")}


CIPHERTEXT_BYTES = 12 + 2 * 32 + 16  # AES-GCM nonce, a site's two Shamir shares, tag (fl_contract.secure_aggregation)


def _results(run) -> dict:
    return json.loads((run.server_app_dir / "results.json").read_text())


def test_exported_job_ships_no_code_and_records_parameters(tmp_path):
    params = FedAvgLinearParams(num_rounds=2, local_steps=3, aggregation="trimmed_mean", trim_fraction=0.2)
    job_dir = export(build_job(KIND, params), tmp_path)

    job = read_exported_job(job_dir)
    server, client = job.workflow, job.executor

    assert job.files == JOB_FILES
    assert job.meta["site_agent_version"] == __version__
    assert server["path"] == "server_app.fedavg.FedAvgController"
    # both sides get the kind and every parameter, so the job folder alone says what will run
    assert server["args"] == client["args"] == {"kind": "fedavg-linear", "params": params_to_json(params)}
    assert server["args"]["params"] | {"num_rounds": 2, "aggregation": "trimmed_mean", "trim_fraction": 0.2,
                                       "local_steps": 3} == server["args"]["params"]
    assert client["path"] == "site_agent.tasks.fedavg_linear.LinearRegressionTask"


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("plain")
    job_dir = export(build_job(KIND, FedAvgLinearParams()), root / "job")
    return simulate(job_dir, root / "ws", SITES, _site_data(root / "data"))


@pytest.mark.simulator
def test_simulator_reproduces_reference_weights(plain_run):
    run = plain_run
    assert not run.aborted(), run.server_log.read_text()[-3000:]
    recorded = _results(run)["job"]  # the job's parameters, every one, as results.json keeps them
    assert {name: recorded[name] for name in params_to_json(FedAvgLinearParams())} == params_to_json(
        FedAvgLinearParams())
    assert SITE_NAMES_KEPT in run.server_log.read_text()  # the simulator's site threads ran with the race closed
    results = _results(run)
    weights = {r["round"]: r["global_weights"]["weight"] for r in results["rounds"]}
    for round_number, expected in FEDAVG_REFERENCE.items():
        assert weights[round_number] == pytest.approx(expected, abs=5e-4)
    state = torch.load(run.server_app_dir / "global_model.pt", weights_only=True)
    np.testing.assert_allclose(state["weight"].numpy().ravel(), weights[5])


@pytest.mark.simulator
def test_diverging_site_is_rejected_by_name_and_the_others_are_averaged(tmp_path):
    datasets = _site_data(tmp_path / "data")
    path = tmp_path / "data" / "site-2" / "linear" / FILE_NAME
    with np.load(path) as arrays:
        np.savez(path, x=arrays["x"] * 1e20, y=arrays["y"])  # finite data whose gradient overflows
    job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=2, min_clients=2)), tmp_path / "job")

    run = simulate(job_dir, tmp_path / "ws", SITES, datasets)

    results = _results(run)
    assert results["status"] == "finished"
    first = results["rounds"][0]
    assert set(first["sites"]) == {"site-1", "site-3"}
    assert "NaN or infinite" in first["rejected"]["site-2"]
    assert "update from site 'site-2' rejected" in run.server_log.read_text()
    assert np.isfinite(first["global_weights"]["weight"]).all()


@pytest.mark.simulator
def test_masked_rounds_give_the_plain_run_within_the_quantum_with_fresh_keys_every_round(plain_run, tmp_path):
    """secure_aggregation on: every round's global model equals the plain run's to within the fixed-point quantum
    (plus float32 rounding), the reference table holds to 3 decimals, and each site's audit log shows the four
    tasks of a masked round, each round in a session of its own."""
    params = FedAvgLinearParams(secure_aggregation=True, update_l2_bound=10.0)
    job_dir = export(build_job(KIND, params), tmp_path / "job")

    run = simulate(job_dir, tmp_path / "ws", SITES, _site_data(tmp_path / "data"))

    assert not run.aborted(), run.server_log.read_text()[-3000:]
    masked, plain = _results(run), _results(plain_run)
    assert masked["status"] == "finished"
    for ours, theirs in zip(masked["rounds"], plain["rounds"], strict=True):
        for name, values in theirs["global_weights"].items():
            np.testing.assert_allclose(ours["global_weights"][name], values, rtol=0, atol=QUANTUM + 1e-6)
        assert ours["secure_aggregation"]["survivors"] == SITES
        assert ours["num_samples"] == sum(s["num_samples"] for s in theirs["sites"].values())
        assert all("num_samples" not in site for site in ours["sites"].values())  # no site's count in the clear
        assert set(ours["outcomes"].values()) == {"masked update summed"}
    weights = {r["round"]: r["global_weights"]["weight"] for r in masked["rounds"]}
    for round_number, expected in FEDAVG_REFERENCE.items():
        assert weights[round_number] == pytest.approx(expected, abs=5e-4)
    transfers = read_transfers(run.server_app_dir)
    assert in_the_clear(transfers) == []  # what the server received: no parameter, no count in the clear
    assert any("['weight'" in found and "NUM_STEPS_CURRENT_ROUND" in found
               for found in in_the_clear(read_transfers(plain_run.server_app_dir)))  # as the plain run sends them
    for round_number in range(1, params.num_rounds + 1):
        for site in SITES:  # only the two ciphertexts addressed to it (of 3 x 2 relayed), 92 bytes each
            [relay] = [r for r in transfers["rounds"][str(round_number)][site] if r["task"] == "masked_update"]
            assert relay["bytes_to_site"] == (len(SITES) - 1) * CIPHERTEXT_BYTES, relay
    for site in SITES:
        audit = run.workspace / site / "local" / "audit_log.jsonl"
        events = [json.loads(line) for line in audit.read_text().splitlines()]
        sent = [e for e in events if e["event"] == RESULT_SENT]
        assert [e["task"] for e in sent] == ["train", "shares", "masked_update", "unmask"] * params.num_rounds
        assert [e["task"] for e in events if e["event"] == TASK_RECEIVED] == [e["task"] for e in sent]
        sessions = [e["session"] for e in sent if e.get("masked") == "secure aggregation"]
        assert len(set(sessions)) == params.num_rounds, sessions
