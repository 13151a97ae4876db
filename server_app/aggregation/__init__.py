"""Update intake and aggregation rules for model updates: one rule per module, all validated the same way.

Server workflows take a round's results through `take_updates` (validation, site-name order, reasons for missing
sites) and combine the valid updates with `aggregate(rule, updates)`; the rules themselves are plain functions on
numpy arrays so they can be unit-tested and reused without FLARE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from server_app.aggregation.intake import (
    RoundIntake,
    UpdateCheck,
    UpdateDecoder,
    encoded_updates,
    matching,
    missing_sites,
    reported_samples,
    scalar_metrics,
    site_name,
    site_outcomes,
    take_updates,
)
from server_app.aggregation.median import coordinate_median
from server_app.aggregation.trimmed_mean import trimmed_mean
from server_app.aggregation.updates import (
    SiteUpdate,
    UpdateRejected,
    Weights,
    check_sample_count,
    check_update,
    check_updates,
)
from server_app.aggregation.weighted_mean import weighted_mean

RULES: dict[str, Callable[..., Weights]] = {
    "weighted_mean": weighted_mean,
    "median": coordinate_median,
    "trimmed_mean": trimmed_mean,
}


def aggregate(rule: str, updates: Sequence[SiteUpdate], reference: Weights | None = None, **options: float) -> Weights:
    """Validate `updates` (against `reference` when given) and combine them with the named rule, in the order given
    (`take_updates` gives site-name order, which keeps float sums bit-identical from run to run)."""
    if rule not in RULES:
        raise ValueError(f"unknown aggregation rule {rule!r}; choose one of {sorted(RULES)}")
    check_updates(updates, reference)
    return RULES[rule](updates, **options)


__all__ = ["RULES", "Weights", "RoundIntake", "SiteUpdate", "UpdateCheck", "UpdateDecoder", "UpdateRejected",
           "aggregate", "check_sample_count", "check_update", "check_updates", "encoded_updates", "matching",
           "missing_sites", "reported_samples", "scalar_metrics", "site_name", "site_outcomes", "take_updates"]
