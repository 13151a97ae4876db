"""The one update intake of every server workflow: read the sites' results, validate each, order them by site.

Float sums depend on their order, and sites answer in whatever order the network gives. The intake therefore
hands the valid updates to aggregation in site-name order, so the same seed gives bit-identical global models
however the answers race. A bad update never stops the intake: it is left out with its reason, named by site,
and so is a site that answered more than once; sites that did not answer at all are listed as `no_result`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.weights_encoding import FLOAT32, WeightsEncodingError, decode_update
from server_app.aggregation.updates import SiteUpdate, UpdateRejected, Weights, check_update

UNKNOWN_SITE = "unknown site"

UpdateCheck = Callable[[SiteUpdate, Mapping[str, Any]], None]
"""Raises `UpdateRejected` when an update (with its result's meta) may not touch the global model."""
UpdateDecoder = Callable[[SiteUpdate], SiteUpdate]
"""The update as the site trained it, from the encoding it crossed the wire in; raises `UpdateRejected`."""


def site_name(result: FLModel) -> str:
    """The name of the site FLARE received `result` from."""
    return str((result.meta or {}).get("client_name", UNKNOWN_SITE))


def reported_samples(result: FLModel) -> Any:
    """The site's training-set size as sent (FLARE's NUM_STEPS_CURRENT_ROUND); checked, not trusted, by the intake."""
    return (result.meta or {}).get(FLMetaKey.NUM_STEPS_CURRENT_ROUND, 0)


def scalar_metrics(result: FLModel) -> dict[str, float]:
    """The site's metrics as plain floats, ready for results.json."""
    return {k: float(v) for k, v in (result.metrics or {}).items()}


def missing_sites(expected_sites: Iterable[str], answered: Iterable[str]) -> list[str]:
    """The expected sites that sent no result (their task failed or they did not answer in time), sorted."""
    return sorted(set(expected_sites) - set(answered))


def matching(reference: Weights) -> UpdateCheck:
    """The usual check: the update must match `reference` (the global model) in names, shapes and dtype kind."""
    return lambda update, meta: check_update(update, reference)


@dataclass(frozen=True)
class MaskedSum:
    """A masked round's result (`server_app.masked_round`): what the server learns instead of the sites' updates.

    `means`: the sample-weighted mean difference of each parameter some site sent; `counts`: the samples behind each
    group; `secure_aggregation`: who took part at each step of the protocol.
    """

    means: dict[str, np.ndarray]
    counts: list[int]
    survivors: list[str]
    dropped: list[str]
    secure_aggregation: dict[str, Any]

    def applied_to(self, params: Weights) -> Weights:
        """The new global parameters: each one some site sent moved by the mean difference, in its own dtype."""
        return {name: (value.astype(np.float64) + self.means[name]).astype(value.dtype) if name in self.means
                else value for name, value in params.items()}


@dataclass(frozen=True)
class RoundIntake:
    """One round's answers: the valid updates in site-name order, their metrics and meta, and why others are absent.

    In a masked round (`masked` set) there are no updates: the sites' sum stands for them, and `contributors` are the
    sites whose masked vectors it holds.
    """

    updates: list[SiteUpdate]
    metrics: dict[str, dict[str, float]]
    meta: dict[str, dict[str, Any]]
    rejected: dict[str, str]
    no_result: list[str]
    masked: MaskedSum | None = None

    @property
    def contributors(self) -> list[str]:
        return self.masked.survivors if self.masked is not None else [u.site for u in self.updates]

    def record(self) -> dict[str, Any]:
        """The round's entry in results.json: every valid site's samples and metrics, and the missing sites."""
        if self.masked is not None:
            sites: dict[str, Any] = {site: {"metrics": self.metrics.get(site, {})} for site in self.masked.survivors}
            return {"sites": sites, "rejected": self.rejected, "no_result": self.no_result,
                    "num_samples": self.masked.counts[0] if len(self.masked.counts) == 1 else self.masked.counts,
                    "secure_aggregation": self.masked.secure_aggregation}
        sites = {u.site: {"num_samples": int(u.num_samples), "metrics": self.metrics[u.site]} for u in self.updates}
        return {"sites": sites, "rejected": self.rejected, "no_result": self.no_result}


def take_updates(results: Sequence[FLModel], expected_sites: Iterable[str], check: UpdateCheck,
                 log_rejection: Callable[[str], None] = lambda message: None,
                 decode: UpdateDecoder | None = None) -> RoundIntake:
    """Validate every result with `check` (after `decode`, when the weights travel encoded); the valid ones come
    back sorted by site name, whatever their arrival order."""
    by_site: dict[str, list[FLModel]] = {}
    for result in results:
        by_site.setdefault(site_name(result), []).append(result)
    updates, metrics, meta, rejected = [], {}, {}, {}
    for site in sorted(by_site):
        result = by_site[site][0]
        update = SiteUpdate(site, result.params or {}, reported_samples(result))
        try:
            if len(by_site[site]) > 1:
                raise UpdateRejected(site, f"the site sent {len(by_site[site])} updates for the same round")
            if decode is not None:
                update = decode(update)
            check(update, result.meta or {})
        except UpdateRejected as exc:
            log_rejection(str(exc))
            rejected[site] = exc.reason
            continue
        updates.append(update)
        metrics[site] = scalar_metrics(result)
        meta[site] = dict(result.meta or {})
    return RoundIntake(updates, metrics, meta, rejected, missing_sites(expected_sites, by_site))


def encoded_updates(sent: Weights, encoding: str) -> UpdateDecoder | None:
    """With `weights_encoding` float16, the decoder of a site's answer: its float16 differences checked (names
    and shapes the server sent, dtype, finite) and added to the float32 values `sent`; None when weights travel
    as trained (float32)."""
    if encoding == FLOAT32:
        return None

    def decode(update: SiteUpdate) -> SiteUpdate:
        try:
            params = decode_update(sent, update.params, encoding)
        except WeightsEncodingError as err:
            raise UpdateRejected(update.site, str(err)) from err
        return SiteUpdate(update.site, params, update.num_samples)
    return decode


def site_outcomes(intake: RoundIntake, failed_sites: Iterable[str]) -> dict[str, str]:
    """Each expected site's outcome in words, for results.json and the admin: what happened to its answer."""
    failed = set(failed_sites)
    outcomes = {u.site: "update accepted" for u in intake.updates}
    if intake.masked is not None:
        outcomes.update({site: "masked update summed" for site in intake.masked.survivors})
        outcomes.update({site: "dropped after sharing its keys: its masks were removed with the other sites' shares "
                               "and the round went on without it" for site in intake.masked.dropped})
        shared = set(intake.masked.secure_aggregation.get("shared", []))
        outcomes.update({site: "sent its keys, then no shares: left out before any mask was applied; the round went "
                               "on without it" for site in intake.masked.secure_aggregation.get("key_exchange", [])
                         if site not in shared})
    outcomes.update({site: f"update rejected: {reason}" for site, reason in intake.rejected.items()})
    outcomes.update({site: "its task failed at the site (see the site's job log)" if site in failed else
                     "no answer (the site's client or job process stopped, or it was too late)"
                     for site in intake.no_result})
    return dict(sorted(outcomes.items()))
