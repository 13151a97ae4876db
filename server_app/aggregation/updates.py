"""What a site's update is, and the checks every update passes before it may touch the global model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Weights = dict[str, np.ndarray]
"""A model's weights by parameter name (a state_dict as numpy arrays): what the server averages, checks and saves."""


class UpdateRejected(ValueError):
    """A site's update cannot be aggregated; `site` names the site so the admin knows where to look."""

    def __init__(self, site: str, reason: str):
        super().__init__(f"update from site {site!r} rejected: {reason}")
        self.site = site
        self.reason = reason


@dataclass(frozen=True)
class SiteUpdate:
    """Parameters sent by one site for one round, with the number of training samples behind them."""

    site: str
    params: Mapping[str, np.ndarray]
    num_samples: int


def check_sample_count(update: SiteUpdate) -> None:
    """Refuse an update without a positive integer sample count: weighted rules would divide by it or let it
    dominate."""
    count = update.num_samples
    if not isinstance(count, (int, np.integer)) or count <= 0:
        raise UpdateRejected(update.site, f"number of training samples must be a positive integer, got {count!r}")


def check_update(update: SiteUpdate, reference: Mapping[str, np.ndarray] | None) -> None:
    """Refuse an update with missing/extra keys, wrong shapes, non-float values, non-finite values or no samples."""
    check_sample_count(update)
    if not update.params:
        raise UpdateRejected(update.site, "it carries no parameters")
    if reference is not None:
        missing = sorted(set(reference) - set(update.params))
        extra = sorted(set(update.params) - set(reference))
        if missing or extra:
            raise UpdateRejected(update.site, f"parameter names differ from the global model "
                                              f"(missing {missing}, unexpected {extra})")
    for name, value in update.params.items():
        array = np.asarray(value)
        if not np.issubdtype(array.dtype, np.floating):
            raise UpdateRejected(update.site, f"parameter {name!r} has dtype {array.dtype}, expected floating point")
        if reference is not None and array.shape != np.shape(reference[name]):
            raise UpdateRejected(update.site,
                                 f"parameter {name!r} has shape {array.shape}, expected {np.shape(reference[name])}")
        if not np.all(np.isfinite(array)):
            raise UpdateRejected(update.site, f"parameter {name!r} contains NaN or infinite values")


def check_updates(updates: Sequence[SiteUpdate], reference: Mapping[str, np.ndarray] | None = None) -> None:
    """Check every update, and that all updates agree with each other when there is no reference."""
    if not updates:
        raise ValueError("no site updates to aggregate")
    sites = [u.site for u in updates]
    duplicated = sorted({s for s in sites if sites.count(s) > 1})
    if duplicated:
        raise UpdateRejected(duplicated[0], "the site sent more than one update for the same round")
    first = updates[0]
    check_update(first, reference)
    for update in updates[1:]:
        check_update(update, reference if reference is not None else first.params)


def stack(updates: Sequence[SiteUpdate], name: str) -> np.ndarray:
    """Stack one parameter across sites as float64 (axis 0 = site) so rules compute without float32 drift."""
    return np.stack([np.asarray(u.params[name], dtype=np.float64) for u in updates])


def as_original_dtype(value: np.ndarray, updates: Sequence[SiteUpdate], name: str) -> np.ndarray:
    """Cast a rule's float64 result back to the dtype the sites sent, so the global model keeps its dtype."""
    return value.astype(np.asarray(updates[0].params[name]).dtype)
