"""weights_encoding: float16 on the wire halves the bytes each way, the global model stays float32, and every
bad array or bad combination is refused naming the parameter (and the site)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel
from support import over_the_wire, read_exported_job

from federation_tools.job_cli import main as fl_job
from federation_tools.simulate import simulate
from fl_contract.models import build_model, state_dict_to_numpy
from fl_contract.params import ParameterError
from fl_contract.weights_encoding import (
    WeightsEncodingError,
    decode_model,
    decode_update,
    encode_model,
    encode_update,
)
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from jobs.playerfl.spec import PLayerFLParams
from jobs.registry import kinds
from research.playerfl_compare import write_demo_sites
from research.playerfl_inprocess import run_in_process
from server_app.aggregation import SiteUpdate, aggregate, encoded_updates, matching, take_updates
from site_agent.data.demo.linear_demo import write_linear_site
from site_agent.kit.site_config import SiteConfig, write_site_config
from site_agent.tasks.executor import SiteContext
from site_agent.tasks.fedavg_linear import LinearRegressionTask

SITES = ["site-1", "site-2", "site-3"]
WEIGHT_KINDS = ("fedavg-linear", "brats-segmentation", "playerfl")
PLAYERFL_TOLERANCE = 5e-3
"""PLayer-FL's federated model, float16 against float32, after 2 tiny rounds. Measured: 1.4e-3 (method playerfl) and
2.1e-3 (fedlp), both in conv3.weight; Adam's normalised steps carry the rounding of the starting point further than
plain gradient steps do (half a float16 step of those weights is at most 2.4e-4 for playerfl, |w| <= 0.73)."""


def _half_step(values: np.ndarray) -> np.ndarray:
    """Half of float16's spacing at each value: the most a round to the nearest float16 moves it."""
    return np.spacing(np.abs(np.asarray(values, dtype=np.float16))).astype(np.float64) / 2


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"conv.weight": (rng.standard_normal((4, 3, 3)) * 3).astype(np.float32),
            "conv.bias": (rng.standard_normal(4) * 1e-3).astype(np.float32),
            "head.weight": (rng.standard_normal((2, 4)) * 40).astype(np.float32)}


def test_round_trip_errs_by_at_most_half_a_float16_step_of_each_weight_and_difference():
    rng = np.random.default_rng(0)
    global_model = _weights(rng)
    wire = over_the_wire(FLModel(params=encode_model(global_model, "float16"))).params
    received = decode_model(wire, "float16")
    trained = {k: (v + rng.standard_normal(v.shape) * 1e-2).astype(np.float32) for k, v in received.items()}

    update = over_the_wire(FLModel(params=encode_update(received, trained, "float16"))).params
    decoded = decode_update(global_model, update, "float16")

    for name, value in global_model.items():
        assert wire[name].dtype == update[name].dtype == np.float16
        assert received[name].dtype == decoded[name].dtype == np.float32
        assert np.all(np.abs(received[name] - value.astype(np.float64)) <= _half_step(value))
        exact = trained[name].astype(np.float64) - received[name]
        assert np.all(np.abs(update[name] - exact) <= _half_step(exact)), name
        # the server adds the difference to its own float32 weights, not to the float16 ones it sent
        np.testing.assert_allclose(decoded[name], value + update[name].astype(np.float64), rtol=2**-23, atol=0)
        assert wire[name].nbytes * 2 == value.nbytes


def test_float32_leaves_every_array_as_it_is():
    params = _weights(np.random.default_rng(1))
    for encoded in (encode_model(params, "float32"), decode_model(params, "float32"),
                    encode_update(params, params, "float32"), decode_update(params, params, "float32")):
        assert all(encoded[k] is params[k] for k in params)


@pytest.mark.parametrize("bad, message", [
    (np.array([1.0, np.nan], np.float16), r"parameter 'layer.2' arrived with NaN or infinite values"),
    (np.array([1.0, 2.0], np.float32), r"parameter 'layer.2' arrived as float32, but the job's weights_encoding is "
                                       r"'float16'"),
])
def test_a_site_refuses_a_model_not_in_the_jobs_encoding_naming_the_layer(bad, message):
    with pytest.raises(WeightsEncodingError, match=message):
        decode_model({"layer.1": np.zeros(2, np.float16), "layer.2": bad}, "float16")


@pytest.mark.parametrize("trained, message", [
    ({"w": np.array([np.inf, 0.0], np.float32)}, r"parameter 'w': the difference holds NaN or infinite values"),
    ({"w": np.array([1e5, 0.0], np.float32)}, r"parameter 'w': a difference of 1e\+05 is beyond float16's range.*"
                                              r"weights_encoding='float32'"),
    ({"x": np.zeros(2, np.float32)}, r"parameter 'x' was not sent by the server"),
    ({"w": np.zeros(3, np.float32)}, r"parameter 'w' has shape \(3,\), the server sent \(2,\)"),
])
def test_a_site_refuses_to_encode_an_update_float16_cannot_carry(trained, message):
    with pytest.raises(WeightsEncodingError, match=message):
        encode_update({"w": np.zeros(2, np.float32)}, trained, "float16")


def test_the_server_refuses_a_model_float16_cannot_hold_naming_the_layer():
    with pytest.raises(WeightsEncodingError, match=r"parameter 'big': a weight of 7e\+04 is beyond float16's range"):
        encode_model({"small": np.ones(2, np.float32), "big": np.array([7e4], np.float32)}, "float16")


def _answer(site: str, params: dict[str, np.ndarray]) -> FLModel:
    return FLModel(params=params, meta={"client_name": site, FLMetaKey.NUM_STEPS_CURRENT_ROUND: 10})


def test_the_server_rejects_a_bad_encoded_update_by_site_and_layer_and_averages_the_rest():
    sent = {"weight": np.array([[1.0, -2.0]], np.float32)}
    results = [_answer("site-1", {"weight": np.array([[0.5, 0.5]], np.float16)}),
               _answer("site-2", {"weight": np.array([[0.1, 0.1]], np.float32)}),
               _answer("site-3", {"weight": np.array([[np.inf, 0.0]], np.float16)}),
               _answer("site-4", {"weight": np.array([[0.25, 0.25]], np.float16)})]
    logged: list[str] = []

    intake = take_updates(results, [*SITES, "site-4"], matching(sent), logged.append,
                          decode=encoded_updates(sent, "float16"))

    assert [u.site for u in intake.updates] == ["site-1", "site-4"]
    assert intake.rejected == {"site-2": "parameter 'weight' arrived as float32, but the job's weights_encoding is "
                                         "'float16': both sides must run the same job parameters",
                               "site-3": "parameter 'weight' arrived with NaN or infinite values"}
    assert "update from site 'site-3' rejected: parameter 'weight'" in logged[1]
    merged = aggregate("weighted_mean", intake.updates, reference=sent)
    np.testing.assert_allclose(merged["weight"], [[1.375, -1.625]])
    assert merged["weight"].dtype == np.float32


@pytest.mark.parametrize("rule, expected", [("median", [[1.5, -1.5]]),
                                            ("trimmed_mean", [[1 + 1.75 / 3, -2 + 1.75 / 3]])])
def test_robust_rules_run_on_the_decoded_updates(rule, expected):
    """median and trimmed mean see each site's weights (the sent float32 values plus its difference), not the
    differences, so a site that sends a huge difference is outvoted as it would be in float32."""
    sent = {"weight": np.array([[1.0, -2.0]], np.float32)}
    differences = [[0.5, 0.5], [0.25, 0.25], [0.75, 0.75], [0.5, 0.5], [6e4, 6e4]]
    results = [_answer(f"site-{i}", {"weight": np.array([d], np.float16)}) for i, d in enumerate(differences)]
    intake = take_updates(results, [f"site-{i}" for i in range(5)], matching(sent),
                          decode=encoded_updates(sent, "float16"))

    merged = aggregate(rule, intake.updates, reference=sent, **({"trim_fraction": 0.2} if rule == "trimmed_mean"
                                                                   else {}))

    np.testing.assert_allclose(merged["weight"], expected, rtol=1e-6)


def _task(**params) -> LinearRegressionTask:
    return LinearRegressionTask(kind=KIND.name, params=json.loads(json.dumps(
        {"weights_encoding": "float16", **params})))


def _context(tmp_path: Path) -> SiteContext:
    data = write_linear_site(tmp_path / "data", 1).parent
    config = SiteConfig.load(write_site_config(tmp_path, {"linear": str(data)}))
    return SiteContext("site-1", config, torch.device("cpu"), tmp_path, Signal())


def test_the_site_task_trains_the_decoded_model_and_answers_with_its_float16_difference(tmp_path):
    ctx = _context(tmp_path)
    global_model = {"weight": np.array([[0.3, -0.7]], np.float32)}
    received = FLModel(params=encode_model(global_model, "float16"), current_round=0)

    answer = _task().answer("train", received, ctx)
    plain = LinearRegressionTask(kind=KIND.name, params={}).answer(
        "train", FLModel(params=decode_model(received.params, "float16"), current_round=0), ctx)

    assert answer.params["weight"].dtype == np.float16
    trained = decode_update(global_model, answer.params, "float16")["weight"]
    moved = plain.params["weight"] - decode_model(received.params, "float16")["weight"]
    np.testing.assert_allclose(trained - global_model["weight"], moved, rtol=0, atol=float(_half_step(moved).max()))


@pytest.mark.parametrize("weight, error, message", [
    (np.zeros((1, 2), np.float32), WeightsEncodingError, r"parameter 'weight' arrived as float32"),
    (np.zeros((1, 3), np.float16), RuntimeError, r"size mismatch for weight: copying a param with shape "
                                                 r"torch.Size\(\[1, 3\]\)"),
])
def test_the_site_task_refuses_a_model_of_another_dtype_or_shape_naming_the_parameter(tmp_path, weight, error,
                                                                                        message):
    with pytest.raises(error, match=message):
        _task().answer("train", FLModel(params={"weight": weight}), _context(tmp_path))


@pytest.mark.parametrize("kind", WEIGHT_KINDS)
def test_every_weight_sending_kind_exports_the_encoding_to_both_sides(kind, tmp_path):
    spec = kinds()[kind]
    assert spec.params().weights_encoding == "float32"
    job = read_exported_job(export(build_job(spec, spec.params(weights_encoding="float16")), tmp_path))
    assert job.workflow["args"]["params"]["weights_encoding"] == "float16"
    assert job.executor["args"]["params"]["weights_encoding"] == "float16"


@pytest.mark.parametrize("kind", WEIGHT_KINDS)
def test_float16_with_secure_aggregation_is_refused_naming_both_fields(kind):
    with pytest.raises(ParameterError, match=r"weights_encoding='float16' cannot be combined with "
                                             r"secure_aggregation: a masked update is a vector of fixed-point"):
        kinds()[kind].params(weights_encoding="float16", secure_aggregation=True, update_l2_bound=100.0)


@pytest.mark.parametrize("argv, message", [
    (["--weights-encoding", "float16", "--secure-aggregation", "--update-l2-bound", "5"],
     "fedavg-linear: weights_encoding='float16' cannot be combined with secure_aggregation"),
    (["--weights-encoding", "bfloat16"], "argument --weights-encoding: invalid choice: 'bfloat16'"),
])
def test_fl_job_export_refuses_a_bad_encoding_naming_the_field(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        fl_job(["export", "fedavg-linear", "--out", str(tmp_path), *argv])
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _float32_fedavg(rounds: int, data: Path, workspace: Path) -> list[np.ndarray]:
    """The float32 reference run in-process, from the job's own parts: the site task and the weighted mean."""
    torch.manual_seed(0)
    model = state_dict_to_numpy(build_model("linear_regression", in_features=2))
    task = LinearRegressionTask(kind=KIND.name, params={})
    weights = []
    for round_index in range(rounds):
        updates = []
        for site in SITES:
            config = SiteConfig.load(write_site_config(workspace / site, {"linear": str(data / site / "linear")}))
            ctx = SiteContext(site, config, torch.device("cpu"), workspace / site, Signal())
            torch.manual_seed(0)
            result = task.answer("train", FLModel(params=model, current_round=round_index), ctx)
            updates.append(SiteUpdate(site, result.params, result.meta[FLMetaKey.NUM_STEPS_CURRENT_ROUND]))
        model = aggregate("weighted_mean", updates, reference=model)
        weights.append(model["weight"].ravel().astype(np.float64))
    return weights


@pytest.mark.simulator
def test_float16_simulator_run_ends_within_half_a_float16_step_of_the_float32_run_with_half_the_bytes(tmp_path):
    """The tolerance is half a float16 step of each weight (4.9e-4 for |w| in [1, 2), 9.8e-4 in [2, 4)). Measured
    (5 rounds, 3 sites): at most 4.1e-4 from the float32 run in any round, 0.76 of that half step at most (4.1e-4
    after round 1 and after round 5: the rounding does not accumulate); the in-process float32 reference equalled
    the simulator's float32 run bit for bit. Every train transfer carries 4 bytes of weights each way instead of 8."""
    for index, site in enumerate(SITES, start=1):
        write_linear_site(tmp_path / "data" / site / "linear", index)
    params = FedAvgLinearParams(weights_encoding="float16")
    job_dir = export(build_job(KIND, params), tmp_path / "job")

    run = simulate(job_dir, tmp_path / "ws", SITES, {"linear": str(tmp_path / "data" / "{site_name}" / "linear")})

    assert not run.aborted(), run.server_log.read_text()[-3000:]
    results = json.loads((run.server_app_dir / "results.json").read_text())
    assert results["status"] == "finished" and results["job"]["weights_encoding"] == "float16"
    reference = _float32_fedavg(params.num_rounds, tmp_path / "data", tmp_path / "reference")
    for entry, expected in zip(results["rounds"], reference, strict=True):
        ours = np.asarray(entry["global_weights"]["weight"])
        assert np.all(np.abs(ours - expected) <= _half_step(expected)), (entry["round"], ours, expected)
        assert not np.array_equal(ours, expected)  # the encoding did change something: this is not the float32 run
        rows = [row for site in SITES for row in entry["transfers"][site] if row["task"] == "train"]
        assert [(r["bytes_to_site"], r["bytes_from_site"]) for r in rows] == [(4, 4)] * len(SITES)
    state = torch.load(run.server_app_dir / "global_model.pt", weights_only=True)
    assert state["weight"].dtype == torch.float32


def test_playerfl_sends_only_its_federated_layers_in_float16_and_ends_near_the_float32_run(tmp_path):
    """PLayer-FL's per-layer federation in float16, in one process with the job's own controller and site tasks:
    the same split and the same layers sent each round as the float32 run, and a federated model within
    PLAYERFL_TOLERANCE of it."""
    sites = {site: tmp_path / "data" / site for site in write_demo_sites(tmp_path / "data", 3, 24, 32, 1.0, seed=0)}
    tiny = {"num_rounds": 2, "image_size": 32, "batch_size": 8, "tracking": False, "min_clients": 3,
            "model_args": {"channels": [4, 4, 8, 8, 8], "hidden": 8}}
    runs = {}
    for encoding in ("float32", "float16"):
        results = run_in_process(PLayerFLParams(weights_encoding=encoding, **tiny), sites, tmp_path / encoding)
        runs[encoding] = json.loads(results.read_text())
        runs[encoding]["model"] = torch.load(results.parent / "global_model.pt", weights_only=True)
    plain, ours = runs["float32"], runs["float16"]

    assert ours["status"] == "finished" and ours["federated_layers"] == plain["federated_layers"]
    for mine, theirs in zip(ours["rounds"], plain["rounds"], strict=True):
        assert {s: v["sent_layers"] for s, v in mine["sites"].items()} == \
            {s: v["sent_layers"] for s, v in theirs["sites"].items()}
    assert ours["model"].keys() == plain["model"].keys()
    for name, value in plain["model"].items():
        assert ours["model"][name].dtype == torch.float32
        np.testing.assert_allclose(ours["model"][name].numpy(), value.numpy(), rtol=0, atol=PLAYERFL_TOLERANCE,
                                   err_msg=name)
