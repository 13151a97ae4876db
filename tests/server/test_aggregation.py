"""Aggregation rules: values, robustness, and refusal of bad updates with the site named."""

import numpy as np
import pytest

from server_app.aggregation import SiteUpdate, UpdateRejected, aggregate


def _updates(values, counts):
    return [SiteUpdate(f"site-{i + 1}", {"w": np.array(v, dtype=np.float32)}, n) for i, (v, n) in enumerate(zip(values, counts))]


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
