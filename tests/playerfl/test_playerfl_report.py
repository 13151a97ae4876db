"""The report's comparison over seeds: mean ranks as the paper defines them, rank-based tests, no incentivisation
for the methods it compares against."""

import json
from pathlib import Path

import pytest

from reports.playerfl import write_report
from reports.playerfl.ranks import markdown, rankings
from reports.playerfl.runs import Run
from reports.playerfl.table import method_table
from server_app.metrics import federation_summary

# per method, per seed: the macro-F1 of sites a and b (balanced accuracy the same)
SCORES = {"local": [(0.5, 0.5), (0.6, 0.4), (0.5, 0.6)],
          "fedavg": [(0.4, 0.4), (0.5, 0.5), (0.4, 0.4)],
          "playerfl": [(0.6, 0.6), (0.7, 0.6), (0.6, 0.7)],
          "fedbabu": [(0.3, 0.9), (0.4, 0.8), (0.7, 0.3)]}


def _run(method: str, seed: int) -> Run:
    a, b = SCORES[method][seed]
    evaluation = {site: {"test_macro_f1": v, "test_balanced_accuracy": v, "num_train": 10}
                  for site, v in (("a", a), ("b", b))}
    return Run(method, seed, evaluation, federation_summary(evaluation), None, Path(f"{method}-{seed}"))


RUNS = [_run(method, seed) for method in SCORES for seed in range(3)]


def test_incentivisation_is_left_out_for_local_and_fedavg():
    table = method_table(RUNS)

    assert table["local"]["test_macro_f1_incentivisation"] is None
    assert table["fedavg"]["test_macro_f1_incentivisation"] is None
    assert table["playerfl"]["test_macro_f1_incentivisation"] == (1.0, 1.0, 1.0)
    assert table["playerfl"]["test_macro_f1"] == pytest.approx((0.65, 0.6, 0.65))


def test_mean_ranks_per_seed_and_the_tests_over_seeds():
    f1, fairness, incentive = rankings(RUNS)

    # seed 0: playerfl and fedbabu tie at 0.6 and share rank 1.5; seed 1: local and fedavg tie at 0.5 (3.5)
    assert f1.mean_ranks == pytest.approx({"playerfl": 7 / 6, "fedbabu": 13 / 6, "local": 17 / 6, "fedavg": 23 / 6})
    assert fairness.mean_ranks["fedbabu"] == 4.0  # its sites differ most at every seed
    assert set(incentive.mean_ranks) == {"fedbabu", "playerfl"}
    assert incentive.wilcoxon_p == {"fedbabu": pytest.approx(0.25)} and f1.seeds == [0, 1, 2]
    assert f1.friedman_p is not None and 0 < f1.friedman_p < 0.1
    assert "| local | 2.83 | " in markdown([f1, fairness, incentive])


def test_report_names_the_sites_left_out_of_the_split(tmp_path):
    split = {"rule": "threshold", "threshold": 2.0, "normalisation": "total", "layers": ["a", "b", "c"],
             "federated_layers": 1, "federation_curve": [0.2, 0.3, 1.0], "site_splits": {"a": 1},
             "site_normalised_curves": {"a": [0.2, 0.3, 1.0]}, "site_curves": {"a": [2.0, 3.0, 10.0], "b": [0.0] * 3},
             "excluded_sites": {"b": "all zero: no gradient reached its weights"}}
    runs = [Run("playerfl", 0, RUNS[0].evaluation, RUNS[0].summary, split, Path("playerfl-0")), *RUNS[3:6]]

    report = write_report(runs, tmp_path).read_text()

    assert "| playerfl | 0 | 1 of 3 | {'a': 1} | b: all zero: no gradient reached its weights |" in report
    assert json.loads((tmp_path / "summary.json").read_text())["excluded_sites"] == {
        "playerfl seed 0": {"b": "all zero: no gradient reached its weights"}}
    assert (tmp_path / "sensitivity_seed0.png").is_file()
