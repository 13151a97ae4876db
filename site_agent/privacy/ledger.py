"""The site's privacy budget ledger: one line per job started here, with the (epsilon, delta) it may spend.

The site guard checks the budget when a job is deployed and charges the job when it starts here, before its task
reads any data: from then on it may send everything its declaration allows, whether it finishes or not (a job that
never starts here, e.g. because another site refused it, is not charged). A job is charged once: a site back after
a restart, whose job the server deploys and starts again, goes on with the same job, whose spend covers every
round it may take part in. Totals add up by basic composition
(epsilons add, deltas add), an upper bound that holds whatever the jobs were. A job that would take either total
past the policy's budget is refused and not charged. Jobs that send weights without client-side DP are recorded
with no epsilon: they have no guarantee to count, and the policy's `min_dp_noise_multiplier` decides whether they
run.

    site-agent budget --kit KIT
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from site_agent.privacy.accounting import Spend
from site_agent.privacy.journal import Journal, table
from site_agent.privacy.policy import PolicyInForce, SitePolicy

LEDGER_FILE = "privacy_ledger.jsonl"


@dataclass(frozen=True)
class Totals:
    epsilon: float
    delta: float
    jobs: int


class Ledger:
    def __init__(self, folder: Path):
        self.journal = Journal(Path(folder) / LEDGER_FILE)

    def entries(self) -> list[dict[str, Any]]:
        return self.journal.read()

    def totals(self) -> Totals:
        return _totals(self.entries())

    def charged(self, job_id: str) -> bool:
        """The job has been charged here already (its job process started here before: a site back after a restart
        goes on with the same job, whose spend covers every round it may take part in)."""
        return any(e.get("job_id") == job_id for e in self.entries())

    def refusal(self, spend: Spend | None, policy: SitePolicy, job_id: str = "") -> str:
        """Why `spend` would take the site past its budget, or "" (always for `job_id` when it is charged already)."""
        spent = self.totals()
        if spend is None or (job_id and self.charged(job_id)) or (spent.epsilon + spend.epsilon <= policy.budget_epsilon
                             and spent.delta + spend.delta <= policy.budget_delta):
            return ""
        return (f"the job would spend epsilon {spend.epsilon:.4g}, delta {spend.delta:.3g} ({spend.basis}); "
                f"this site has spent epsilon {spent.epsilon:.4g}, delta {spent.delta:.3g} "
                f"of its budget epsilon {policy.budget_epsilon}, delta {policy.budget_delta} over {spent.jobs} jobs")

    def charge(self, job_id: str, kind: str, submitter: str, spend: Spend | None, policy: SitePolicy,
               masked: bool = False) -> str:
        """Record the job's spend and whether what it releases is masked (secure aggregation), and return "", or
        return why it would exceed the budget (nothing recorded). A job charged already is not charged again."""
        with self.journal.locked() as handle:
            if self.charged(job_id):
                return ""
            reason = self.refusal(spend, policy)
            if reason:
                return reason
            self.journal.append({
                "job_id": job_id, "job_kind": kind, "submitter": submitter,
                "epsilon": spend.epsilon if spend else None, "delta": spend.delta if spend else None,
                "basis": spend.basis if spend else (
                    "sends masked weights without client-side DP: the server sees only the sites' sum; no "
                    "guarantee to count" if masked else "sends weights without client-side DP: no guarantee to count"),
                "secure_aggregation": masked,
            }, handle)
        return ""


def _totals(entries: list[dict[str, Any]]) -> Totals:
    counted = [e for e in entries if e.get("epsilon") is not None]
    return Totals(sum(e["epsilon"] for e in counted), sum(e["delta"] for e in counted), len(entries))


def _masked(entry: dict[str, Any]) -> str:
    """The MASKED column: whether the job's release reached the server only secure-aggregated ("-": not recorded,
    an entry older than the column)."""
    if "secure_aggregation" not in entry:
        return "-"
    return "yes" if entry["secure_aggregation"] else "no"


def format_ledger(entries: list[dict[str, Any]], policy: SitePolicy | None) -> str:
    rows = [[e["time"], e["job_id"], e["job_kind"], e["submitter"],
             "-" if e["epsilon"] is None else f"{e['epsilon']:.4g}", "-" if e["delta"] is None else f"{e['delta']:.3g}",
             _masked(e), e["basis"]] for e in entries]
    lines = ([table(["TIME", "JOB", "KIND", "SUBMITTER", "EPSILON", "DELTA", "MASKED", "BASIS"], rows)] if rows
             else ["no job charged yet"])
    totals = _totals(entries)
    spent = f"spent: epsilon {totals.epsilon:.4g}, delta {totals.delta:.3g} over {totals.jobs} jobs"
    if policy is not None:
        spent += (f"; budget epsilon {policy.budget_epsilon}, delta {policy.budget_delta}; left epsilon "
                  f"{policy.budget_epsilon - totals.epsilon:.4g}, delta {policy.budget_delta - totals.delta:.3g}")
    return "\n".join([*lines, "", spent])


def _budget(args: argparse.Namespace) -> int:
    site = PolicyInForce.read(Path(args.kit) / "local")
    ledger = Ledger(site.records)
    print(f"privacy ledger {ledger.journal.path}" + (f" (no policy in force: {site.problem})" if site.problem else ""))
    print(format_ledger(ledger.entries(), site.policy))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("budget", help="the privacy budget ledger: (epsilon, delta) each job spent here")
    parser.add_argument("--kit", required=True, help="folder of this site's startup kit")
    parser.set_defaults(func=_budget)
