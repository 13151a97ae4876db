"""DP calibration: multipliers equal dp-accounting's, the joint release meets (epsilon, delta), sensitivities follow
the adjacency."""

import math

import dp_accounting
import pytest
from dp_accounting import pld
from dp_accounting.mechanism_calibration import ExplicitBracketInterval
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

from server_app.privacy.dp_calibration import calibrate_noise, composed_epsilon


def test_joint_calibration_of_two_queries_is_0_707():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="replace_one")

    assert calibration.num_queries == 2
    assert calibration.noise_multiplier == pytest.approx(0.707, abs=5e-4)
    assert calibration.noise_multiplier == pytest.approx(math.sqrt(2) * dp_accounting.get_sigma_gaussian(10.0, 1e-5))
    assert calibration.accounted_epsilon == pytest.approx(10.0, abs=1e-3)


def test_pld_calibration_cross_checks_the_analytic_one():
    analytic = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="replace_one", method="analytic")

    pld = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="replace_one", method="pld")

    assert pld.noise_multiplier == pytest.approx(analytic.noise_multiplier, rel=1e-3)


def test_split_budget_reference_is_0_919_per_query_and_really_epsilon_7_27():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="replace_one", method="split")

    assert calibration.noise_multiplier == pytest.approx(0.919, abs=5e-4)
    assert calibration.accounted_epsilon == pytest.approx(7.27, abs=0.01)


def test_add_remove_gives_the_counts_their_own_multiplier_and_the_statistics_0_7105():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="add_remove", count_multiplier=5.0)

    assert calibration.num_queries == 3
    assert calibration.noise_multiplier == pytest.approx(0.7105, abs=5e-5)
    assert calibration.count_multiplier == 5.0 and calibration.std_count == 5.0
    assert calibration.sensitivity_mean == 34.0
    assert calibration.sensitivity_outer == 34.0**2
    assert calibration.sensitivity_count == 1.0
    assert calibration.accounted_epsilon == pytest.approx(10.0, abs=1e-3)


def test_joint_release_with_three_multipliers_meets_epsilon_by_an_independent_pld():
    """Oracle: dp-accounting's PLD of the three Gaussian mechanisms, composed, at a finer discretization; its own
    calibration searches within 1% of ours (the root must lie there, or Brent's method finds no sign change) to 1e-5,
    7 PLD evaluations instead of 14 from its default bracket."""
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="add_remove", count_multiplier=5.0)
    z = calibration.noise_multiplier

    def gaussian(multiplier):
        return pld.privacy_loss_distribution.from_gaussian_mechanism(multiplier, value_discretization_interval=1e-4)

    joint = gaussian(z).compose(gaussian(z)).compose(gaussian(5.0))
    assert joint.get_epsilon_for_delta(1e-5) == pytest.approx(10.0, abs=1e-3)
    assert gaussian(z * 0.99).compose(gaussian(z * 0.99)).compose(gaussian(5.0)).get_epsilon_for_delta(1e-5) > 10.05
    calibrated = dp_accounting.calibrate_dp_mechanism(
        lambda: PLDAccountant(value_discretization_interval=1e-4),
        lambda m: dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(m)] * 2
                                                + [dp_accounting.GaussianDpEvent(5.0)]), 10.0, 1e-5,
        bracket_interval=ExplicitBracketInterval(0.99 * z, 1.01 * z), tol=1e-5)
    assert z == pytest.approx(calibrated, rel=1e-4)
    assert calibrate_noise(10.0, 1e-5, 34.0, "add_remove", "pld", 5.0).noise_multiplier == pytest.approx(z, rel=1e-3)


def test_equal_count_multiplier_is_three_equal_queries():
    whole = dp_accounting.get_sigma_gaussian(10.0, 1e-5)

    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, count_multiplier=math.sqrt(3) * whole)

    assert calibration.noise_multiplier == pytest.approx(math.sqrt(3) * whole)
    assert composed_epsilon(calibration.noise_multiplier, 3, 1e-5) == pytest.approx(10.0, abs=1e-3)


def test_a_count_multiplier_that_takes_the_whole_budget_is_refused_naming_the_minimum():
    with pytest.raises(ValueError, match=r"count_noise_multiplier 5.0 .* must exceed 7.03"):
        calibrate_noise(0.5, 1e-5, clip_norm=34.0, count_multiplier=5.0)


def test_split_uses_one_multiplier_for_every_query_counts_included():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, method="split", count_multiplier=5.0)

    assert calibration.count_multiplier == calibration.noise_multiplier == pytest.approx(1.3343, abs=5e-4)
    assert calibration.accounted_epsilon == pytest.approx(5.94, abs=0.01)


def test_replace_one_doubles_the_mean_sensitivity_and_keeps_counts_public():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="replace_one")

    assert calibration.sensitivity_mean == 68.0
    assert calibration.sensitivity_outer == pytest.approx(math.sqrt(2) * 34.0**2)
    assert calibration.sensitivity_count is None and calibration.std_count is None
    assert calibration.std_mean == pytest.approx(calibration.noise_multiplier * 68.0)


def test_manifest_records_every_number():
    manifest = calibrate_noise(10.0, 1e-5, clip_norm=34.0).manifest()

    expected = {"epsilon", "delta", "clip_norm", "adjacency", "method", "noise_multiplier", "count_multiplier",
                "equivalent_multiplier", "std_mean", "std_outer", "std_count", "sensitivity_mean",
                "sensitivity_outer", "sensitivity_count", "accounted_epsilon"}
    assert expected <= manifest.keys()


@pytest.mark.parametrize("kwargs", [{"adjacency": "swap"}, {"method": "guess"}, {"epsilon": 0.0}])
def test_unknown_options_are_refused(kwargs):
    arguments = {"epsilon": 10.0, "delta": 1e-5, "clip_norm": 1.0, **kwargs}

    with pytest.raises(ValueError):
        calibrate_noise(**arguments)
