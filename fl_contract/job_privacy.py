"""What a job declares to each site about the privacy it spends there, recorded in the job's meta.

FLARE gives a site's guard the job's meta when the job is deployed, not its configuration, so the job builder
(`jobs.common`) writes the kind and the privacy parameters into the meta, and the site decides from them before
the job starts. When the job starts, the site compares the declaration with the real arguments of its site task
(`site_agent.privacy.site_guard`), so a meta edited to look safer than the job is refused there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JOB_KIND_KEY = "job_kind"
SITE_PRIVACY_KEY = "site_privacy"

WEIGHTS = "weights"
"""The site sends model weights (all or some layers) every round: client-side DP protects them, if any."""
DP_STATISTICS = "dp_statistics"
"""The site sends secure-aggregated statistics once; the server releases their sum with (epsilon, delta)-DP."""
COUNTS = "counts"
"""The site sends only counts and timings of work it did locally (e.g. cases segmented): no model, no statistic of
its data; nothing to charge to a privacy budget."""
METRICS = "metrics"
"""The site sends a model's scores on its labelled cases: means, and quartiles over at least its policy's
`min_cases` cases; per-case rows (pseudonymised) only where the job asks for them (`case_metrics`) and the site's
policy allows them. No model, no DP accounting: nothing is charged to the budget."""
SUMMARY = "summary"
"""The site sends counts of its cases by header values, sizes, intensities and label contents, each cell of at least
its policy's `min_count` cases, and quantiles over at least that many (`fl_contract.data_summary`); with the job's
`dp_noise_multiplier` the counts carry Gaussian noise charged to the budget, and no quantile or model name leaves."""
RELEASES = (WEIGHTS, DP_STATISTICS, COUNTS, METRICS, SUMMARY)


def release_of(site_task: type) -> str:
    """What a site task class sends (its RELEASE attribute); a task that does not say is held to the rules for
    weights, the stricter ones."""
    release = getattr(site_task, "RELEASE", WEIGHTS)
    return str(release)


@dataclass(frozen=True)
class SitePrivacy:
    """A job's declaration. Every field after `release` is named like the job parameter it copies, when the kind
    has that parameter; kinds without it get the default."""

    kind: str
    release: str
    dp_clip_norm: float = 0.0
    dp_noise_multiplier: float = 0.0
    num_rounds: int = 1
    epsilon: float | None = None
    delta: float | None = None
    min_clients: int = 1
    secure_aggregation: bool = False
    case_metrics: bool = False

    @property
    def client_dp(self) -> bool:
        """Client-side DP is on: the update is clipped and noised before it leaves the site."""
        return self.dp_clip_norm > 0 and self.dp_noise_multiplier > 0

    @property
    def masked(self) -> bool:
        """What the site releases reaches the server only secure-aggregated (FedKT-CSD's statistics always are)."""
        return self.secure_aggregation or self.release == DP_STATISTICS

    @classmethod
    def declare(cls, kind: str, release: str, params: Mapping[str, Any]) -> SitePrivacy:
        """The declaration of a job of `kind` whose site task sends `release`, from the job's parameters."""
        return cls(kind, release, **{name: params[name] for name in PARAMETERS if name in params})

    def meta(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        return {JOB_KIND_KEY: fields.pop("kind"), SITE_PRIVACY_KEY: fields}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> SitePrivacy:
        """The declaration in a job's meta; ValueError naming what is missing or malformed."""
        kind, declared = meta.get(JOB_KIND_KEY), meta.get(SITE_PRIVACY_KEY)
        if not isinstance(kind, str) or not isinstance(declared, dict):
            raise ValueError(f"the job does not declare its kind and privacy (meta fields {JOB_KIND_KEY!r} and "
                             f"{SITE_PRIVACY_KEY!r}); build it with the jobs/ definitions")
        unknown = sorted(set(declared) - {f.name for f in dataclasses.fields(cls)} - {"kind"})
        if unknown or declared.get("release") not in RELEASES:
            raise ValueError(f"the job's {SITE_PRIVACY_KEY} is malformed: unknown fields {unknown}, release "
                             f"{declared.get('release')!r} (expected one of {list(RELEASES)})")
        try:
            privacy = cls(kind=kind, **declared)
        except TypeError as exc:
            raise ValueError(f"the job's {SITE_PRIVACY_KEY} is malformed: {exc}") from exc
        for name in PARAMETERS:
            value, flag = getattr(privacy, name), name in FLAGS
            if flag and not isinstance(value, bool):
                raise ValueError(f"the job's {SITE_PRIVACY_KEY}.{name} is {value!r}, not true or false")
            if not flag and value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"the job's {SITE_PRIVACY_KEY}.{name} is {value!r}, not a number")
        return privacy


PARAMETERS = tuple(f.name for f in dataclasses.fields(SitePrivacy) if f.name not in ("kind", "release"))
"""The job parameters a declaration copies."""
FLAGS = tuple(f.name for f in dataclasses.fields(SitePrivacy) if f.type == "bool")
"""The declaration's true-or-false fields."""
