"""DP calibration: multipliers equal dp-accounting's, sensitivities follow the adjacency."""

import math

import dp_accounting
import pytest

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


def test_add_remove_noises_counts_as_a_third_query():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="add_remove")

    assert calibration.num_queries == 3
    assert calibration.noise_multiplier == pytest.approx(math.sqrt(3) * dp_accounting.get_sigma_gaussian(10.0, 1e-5))
    assert calibration.sensitivity_mean == 34.0
    assert calibration.sensitivity_outer == 34.0**2
    assert calibration.sensitivity_count == 1.0
    assert calibration.std_count == pytest.approx(calibration.noise_multiplier)
    assert composed_epsilon(calibration.noise_multiplier, 3, 1e-5) == pytest.approx(10.0, abs=1e-3)


def test_replace_one_doubles_the_mean_sensitivity_and_keeps_counts_public():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=34.0, adjacency="replace_one")

    assert calibration.sensitivity_mean == 68.0
    assert calibration.sensitivity_outer == pytest.approx(math.sqrt(2) * 34.0**2)
    assert calibration.sensitivity_count is None and calibration.std_count is None
    assert calibration.std_mean == pytest.approx(calibration.noise_multiplier * 68.0)


def test_manifest_records_every_number():
    manifest = calibrate_noise(10.0, 1e-5, clip_norm=34.0).manifest()

    expected = {"epsilon", "delta", "clip_norm", "adjacency", "method", "noise_multiplier", "std_mean", "std_outer",
                "std_count", "sensitivity_mean", "sensitivity_outer", "sensitivity_count", "accounted_epsilon"}
    assert expected <= manifest.keys()


@pytest.mark.parametrize("kwargs", [{"adjacency": "swap"}, {"method": "guess"}, {"epsilon": 0.0}])
def test_unknown_options_are_refused(kwargs):
    arguments = {"epsilon": 10.0, "delta": 1e-5, "clip_norm": 1.0, **kwargs}

    with pytest.raises(ValueError):
        calibrate_noise(**arguments)
