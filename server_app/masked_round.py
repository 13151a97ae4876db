"""A masked round on the server: the sites' keys came with their training answers; the server learns only the sum.

With the job's `secure_aggregation` on, every training answer holds a site's fresh public keys, its metrics and
nothing of its weights. The server runs the rest of Bonawitz et al.'s protocol with the sites that sent keys
(`server_app.privacy.secure_sum`: shares, masked updates, unmasking), decodes the sum of their sample-weighted
differences (`fl_contract.masked_weights`) and hands the round loop a `MaskedSum` in place of updates. A site lost
after sharing its keys is dropped and its masks removed, so the round completes with the others while the
threshold holds; below it, SecureAggregationError names the missing sites. The checks the server made on each
update (shapes, finite values) ran at the sites; here it checks the sum (its length, its counts, finite means).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract import secure_aggregation_messages as messages
from fl_contract.masked_weights import TASK_MASKED, WeightGroups
from fl_contract.secure_aggregation import AdvertisedKeys, SecureAggregationError
from server_app.aggregation import RoundIntake, UpdateRejected, missing_sites, scalar_metrics, site_name
from server_app.aggregation.intake import MaskedSum
from server_app.privacy.secure_aggregation import SecureAggregation
from server_app.privacy.secure_sum import Send, secure_sum

MetaCheck = Callable[[str, Mapping[str, Any]], None]
"""Raises UpdateRejected when what a site's training answer sends in the clear (its meta) is not acceptable."""


def masked_intake(results: Sequence[FLModel], expected_sites: Iterable[str], session: str, min_sites: int,
                  groups: WeightGroups, send: Send, log: Callable[[str], None], warn: Callable[[str], None],
                  check: MetaCheck | None = None) -> RoundIntake:
    """The round's intake from the training answers (keys and metrics): with at least `min_sites` keys, the
    secure sum of the sites' updates; with fewer, an intake without a sum (the round loop then waits for sites).
    `check` judges what an answer sends in the clear besides its keys (a PLayer-FL curve): a site it rejects is
    left out of the key exchange, so nothing of it enters the sum."""
    keys: dict[str, AdvertisedKeys] = {}
    metrics: dict[str, dict[str, float]] = {}
    meta: dict[str, dict[str, Any]] = {}
    rejected: dict[str, str] = {}
    answered = sorted(results, key=site_name)
    for result in answered:
        site = site_name(result)
        try:
            keys[site] = messages.read_keys(result.params or {})
        except (KeyError, ValueError, TypeError):
            rejected[site] = "its answer holds no secure-aggregation keys (is it running this job's site agent?)"
            continue
        try:
            if check is not None:
                check(site, result.meta or {})
        except UpdateRejected as exc:
            del keys[site]
            warn(str(exc))
            rejected[site] = exc.reason
            continue
        metrics[site], meta[site] = scalar_metrics(result), dict(result.meta or {})
    no_result = missing_sites(expected_sites, {site_name(r) for r in answered})
    if len(keys) < min_sites:
        return RoundIntake([], metrics, meta, rejected, no_result)
    secagg = SecureAggregation(session, min_sites)
    try:
        secagg.start(keys)
        total = secure_sum(secagg, TASK_MASKED, send, log, warn)
        means, counts = groups.decode(total)
    except ValueError as err:  # SecureAggregationError included
        raise SecureAggregationError(f"{err} (session {session}; {secagg.summary()})") from err
    bad = sorted(name for name, mean in means.items() if not np.all(np.isfinite(mean)))
    if bad or not any(counts):
        raise SecureAggregationError(f"the unmasked sum of session {session} is not a valid update (non-finite "
                                     f"{bad[:5]}, counts {counts}); the round is not applied")
    summed = MaskedSum(means, counts, secagg.survivors, secagg.dropped, {"session": session, **secagg.summary()})
    return RoundIntake([], {s: metrics[s] for s in secagg.survivors}, {s: meta[s] for s in secagg.survivors},
                       rejected, no_result, summed)
