"""The (epsilon, delta) a job spends at this site: what the site charges to its privacy budget.

- A FedKT-CSD job spends its release's declared (epsilon, delta): the server adds the noise, once.
- A job that sends weights with client-side DP (clip C, noise multiplier z) runs one Gaussian mechanism per round on
  the site's update (site_agent/segmentation/dp.py: sensitivity C, noise std z C). The rounds compose; dp-accounting's
  PLD accountant gives the epsilon at CLIENT_DP_DELTA. The site takes part in every round (sampling rate 1: our
  controllers do not sample sites), so no amplification by sampling is claimed.
- A job that sends weights without client-side DP has no guarantee: it spends nothing that can be counted, and the
  site policy decides whether such jobs run at all (`min_dp_noise_multiplier`).
- A job that sends only counts and timings (inference) spends nothing: it is recorded with epsilon and delta 0.
- A data summary with `dp_noise_multiplier` z runs one Gaussian mechanism on all its counts together (noise std z times
  their L2 sensitivity, site_agent/summary/release.py); without it, it is recorded with epsilon and delta 0 and
  protected by the policy's `min_count` suppression only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from fl_contract.job_privacy import COUNTS, DP_STATISTICS, METRICS, SUMMARY, SitePrivacy

CLIENT_DP_DELTA = 1e-5
"""The delta at which the site accounts client-side DP (the usual choice for site-level DP, far below 1 / sites)."""
PLD_VALUE_DISCRETIZATION = 1e-3
SAMPLING_RATE = 1.0
"""Share of rounds in which the site sends an update: every round."""


@functools.cache
def client_dp_epsilon(noise_multiplier: float, rounds: int, delta: float = CLIENT_DP_DELTA) -> float:
    """Epsilon at `delta` of `rounds` Gaussian mechanisms with this noise multiplier (inf without noise); kept per
    arguments, as the PLD accountant takes a tenth of a second."""
    if noise_multiplier <= 0:
        return math.inf
    import dp_accounting
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    accountant = PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION)
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier), rounds)
    return float(accountant.get_epsilon(delta))


@dataclass(frozen=True)
class Spend:
    """What one job spends at the site, and how it was worked out (for the ledger and the privacy officer)."""

    epsilon: float
    delta: float
    basis: str


def job_spend(privacy: SitePrivacy) -> Spend | None:
    """The job's (epsilon, delta) at this site (0 for counts and scores), or None when it sends weights without
    client-side DP."""
    if privacy.release == COUNTS:
        return Spend(0.0, 0.0, "sends only counts and timings: no model, no statistic of the site's data")
    if privacy.release == METRICS:
        rows = ("per-case scores as pseudonymised rows where this site's policy shares them (share_case_metrics)"
                if privacy.case_metrics else "no per-case row")
        return Spend(0.0, 0.0, f"sends a model's scores on the site's labelled cases: means, quartiles over at least "
                               f"min_cases cases and {rows}; no model, no DP accounting")
    if privacy.release == SUMMARY:
        return summary_spend(privacy.dp_noise_multiplier)
    if privacy.release == DP_STATISTICS:
        if privacy.epsilon is None or privacy.delta is None:
            raise ValueError(f"a {privacy.kind} job must declare the epsilon and delta of its release")
        return Spend(privacy.epsilon, privacy.delta, "declared (epsilon, delta) of the one DP release")
    if not privacy.client_dp:
        return None
    epsilon = client_dp_epsilon(privacy.dp_noise_multiplier, privacy.num_rounds)
    return Spend(epsilon, CLIENT_DP_DELTA,
                 f"client-side DP: clip {privacy.dp_clip_norm}, noise multiplier {privacy.dp_noise_multiplier}, "
                 f"sampling rate {SAMPLING_RATE}, {privacy.num_rounds} rounds, PLD accountant")


def summary_spend(noise_multiplier: float) -> Spend:
    """A data summary's spend: one Gaussian mechanism with this noise multiplier on all its counts at once, or
    nothing to count without noise."""
    if noise_multiplier <= 0:
        return Spend(0.0, 0.0, "sends counts of at least min_count cases per cell and quantiles over at least "
                               "min_count cases; no DP accounting")
    return Spend(client_dp_epsilon(noise_multiplier, 1), CLIENT_DP_DELTA,
                 f"data summary: Gaussian noise on every count, noise multiplier {noise_multiplier} on their L2 "
                 "sensitivity, one release, PLD accountant")
