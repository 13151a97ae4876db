"""Update intake and aggregation rules: values, robustness, bit-identical results whatever the arrival order, and
refusal of bad updates with the site named."""

import itertools
import re

import numpy as np
import pytest
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel

from server_app.aggregation import RULES, SiteUpdate, UpdateRejected, aggregate, matching, take_updates
from server_app.aggregation.weighted_mean import weighted_mean


def _updates(values, counts):
    return [SiteUpdate(f"site-{i + 1}", {"w": np.array(v, dtype=np.float32)}, n)
            for i, (v, n) in enumerate(zip(values, counts))]


def test_weighted_mean_weights_by_sample_count():
    updates = _updates([[0.0, 1.0], [3.0, 5.0]], [1, 3])

    result = aggregate("weighted_mean", updates)

    np.testing.assert_allclose(result["w"], [2.25, 4.0])
    assert result["w"].dtype == np.float32


def test_median_ignores_one_outlier_and_sample_counts():
    updates = _updates([[1.0], [2.0], [1e6]], [1, 1, 1000])

    result = aggregate("median", updates)

    np.testing.assert_allclose(result["w"], [2.0])


def test_trimmed_mean_drops_extremes_per_coordinate():
    updates = _updates([[1.0, -100.0], [2.0, 1.0], [3.0, 2.0], [500.0, 3.0]], [1, 1, 1, 1])

    result = aggregate("trimmed_mean", updates, trim_fraction=0.25)

    np.testing.assert_allclose(result["w"], [2.5, 1.5])


def test_trimmed_mean_rejects_fraction_that_drops_everything():
    with pytest.raises(ValueError, match="trim_fraction"):
        aggregate("trimmed_mean", _updates([[1.0], [2.0]], [1, 1]), trim_fraction=0.5)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_update_is_refused_naming_the_site(bad):
    updates = _updates([[1.0], [bad]], [1, 1])

    with pytest.raises(UpdateRejected, match="site-2.*NaN or infinite") as info:
        aggregate("weighted_mean", updates)
    assert info.value.site == "site-2"


def test_wrong_shape_is_refused_naming_the_site():
    updates = _updates([[1.0, 2.0], [1.0, 2.0, 3.0]], [1, 1])

    with pytest.raises(UpdateRejected, match=r"site-2.*shape \(3,\), expected \(2,\)"):
        aggregate("median", updates)


def test_missing_parameter_against_global_model_is_refused():
    updates = _updates([[1.0]], [1])

    with pytest.raises(UpdateRejected, match=r"site-1.*missing \['b'\]"):
        aggregate("weighted_mean", updates, reference={"w": np.zeros(1), "b": np.zeros(1)})


def test_zero_sample_count_is_refused():
    with pytest.raises(UpdateRejected, match="site-1.*positive integer"):
        aggregate("weighted_mean", _updates([[1.0]], [0]))


def test_unknown_rule_lists_the_choices():
    with pytest.raises(ValueError, match="median"):
        aggregate("krum", _updates([[1.0]], [1]))


def _result(site, params, n, **meta):
    return FLModel(params=params, metrics={"loss": 1.0},
                   meta={"client_name": site, FLMetaKey.NUM_STEPS_CURRENT_ROUND: n, **meta})


# Three values whose float sum depends on the order it is taken in: (B + 1) - B != (B - B) + 1 for B = 1e16.
ORDER_SENSITIVE = [_result("site-a", {"w": np.array([1e16, 3.0])}, 2),
                   _result("site-b", {"w": np.array([1.0, 0.1])}, 2),
                   _result("site-c", {"w": np.array([-1e16, 0.7])}, 2)]


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_arrival_order_gives_the_same_bits(rule):
    reference = {"w": np.zeros(2)}
    arrivals = list(itertools.permutations(ORDER_SENSITIVE))

    intakes = [take_updates(order, ["site-a", "site-b", "site-c"], matching(reference)) for order in arrivals]
    results = [aggregate(rule, intake.updates, reference, **({"trim_fraction": 0.34} if rule == "trimmed_mean" else {}))
               for intake in intakes]

    assert all([u.site for u in intake.updates] == ["site-a", "site-b", "site-c"] for intake in intakes)
    assert len({r["w"].tobytes() for r in results}) == 1


def test_arrival_order_would_change_the_weighted_mean_without_the_intake():
    """Why the intake sorts: the same updates summed in arrival order do not give the same bits."""
    updates = take_updates(ORDER_SENSITIVE, [], matching({"w": np.zeros(2)})).updates

    sums = {weighted_mean(list(order))["w"].tobytes() for order in itertools.permutations(updates)}

    assert len(sums) > 1


@pytest.mark.parametrize("params, n, reason", [
    ({"w": np.array([np.nan, 1.0])}, 5, "'w' contains NaN or infinite values"),
    ({"w": np.zeros(3)}, 5, r"'w' has shape \(3,\), expected \(2,\)"),
    ({"w": np.zeros(2)}, 0, "positive integer, got 0"),
])
def test_intake_leaves_out_a_bad_update_and_names_the_site(params, n, reason):
    results = [_result("site-2", params, n), _result("site-1", {"w": np.ones(2)}, 3)]
    logged = []

    intake = take_updates(results, ["site-1", "site-2", "site-3"], matching({"w": np.zeros(2)}), logged.append)

    assert [u.site for u in intake.updates] == ["site-1"]
    assert list(intake.rejected) == ["site-2"] and re.search(reason, intake.rejected["site-2"])
    assert logged and logged[0].startswith("update from site 'site-2' rejected")
    assert intake.no_result == ["site-3"]
    assert intake.record()["sites"] == {"site-1": {"num_samples": 3, "metrics": {"loss": 1.0}}}


def test_intake_refuses_a_site_that_answers_twice():
    results = [_result("site-1", {"w": np.ones(2)}, 3), _result("site-1", {"w": np.zeros(2)}, 3)]

    intake = take_updates(results, ["site-1"], matching({"w": np.zeros(2)}))

    assert intake.updates == [] and intake.rejected == {"site-1": "the site sent 2 updates for the same round"}


def test_the_rules_jobs_name_are_the_rules_the_server_runs():
    from fl_contract.aggregation_rules import AGGREGATION_RULES
    from server_app.aggregation import RULES

    assert sorted(RULES) == list(AGGREGATION_RULES)
