"""Evaluation workflow: send one model the server holds to every site, which scores it on its labelled cases and
answers with what its policy lets leave (means; quartiles and pseudonymised per-case rows over at least its
`min_cases` cases); results.json records each site's answer and the federation's case-weighted means. The flow is
`server_app.one_task`'s; `fl-eval-report` renders either record as a page. isic-evaluation scores an ISIC
classifier the same way."""

from __future__ import annotations

from typing import Any, ClassVar

from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.evaluation import CONFUSION, EVAL, EVALUATION_TASK, WITHHELD
from fl_contract.job_params import EvaluationParams, HeldModelParams, IsicEvaluationParams
from fl_contract.labels import REGIONS
from fl_contract.segmentation import CASE_ROWS, DICE, HD95, LESION_DICE, LESION_HD95, MEAN, cases_key, metric_key
from server_app.aggregation import scalar_metrics, site_name
from server_app.held_model_task import HeldModelTask
from server_app.results import RunRecorder

POOLED_KEYS = tuple(metric_key(EVAL, m, r) for m in (DICE, HD95, LESION_DICE, LESION_HD95) for r in (*REGIONS, MEAN))
"""The means the federation's row pools, each site weighted by its cases (the pooled mean of every case scored)."""


def pooled(sites: dict[str, dict[str, float]]) -> dict[str, float]:
    """The federation's case-weighted means over the sites that answered: the mean over all their cases, as if
    pooled, computed from the sites' means and counts alone."""
    weights = {site: metrics.get(cases_key(EVAL), 0.0) for site, metrics in sites.items()}
    total = sum(weights.values())
    if not total:
        return {}
    federation = {key: sum(weights[s] * m[key] for s, m in sites.items() if key in m) / total for key in POOLED_KEYS
                  if all(key in m for m in sites.values())}
    return {**federation, cases_key(EVAL): total}


class EvaluationController(HeldModelTask):
    """One `evaluate` task; results.json records each site's scores, what it withheld and why, its per-case rows
    where it sent them, and the federation's pooled means."""

    PARAMS: ClassVar[type[HeldModelParams]] = EvaluationParams
    TASK: ClassVar[str] = EVALUATION_TASK
    WORKFLOW: ClassVar[str] = "evaluation"
    META: ClassVar[tuple[str, ...]] = (CASE_ROWS, WITHHELD)
    """What of each site's answer's meta results.json keeps, by site."""

    def record_sites(self, recorder: RunRecorder, results: list[FLModel]) -> None:
        sites = {site_name(r): scalar_metrics(r) for r in results}
        recorder.record["sites"] = sites
        recorder.record["federation"] = self.federation(sites)
        for key in self.META:
            by_site: dict[str, Any] = {site_name(r): (r.meta or {})[key] for r in results if key in (r.meta or {})}
            if by_site:
                recorder.record[key] = by_site

    def federation(self, sites: dict[str, dict[str, float]]) -> dict[str, float]:
        return pooled(sites)


class IsicEvaluationController(EvaluationController):
    """One `evaluate` task for an ISIC classifier; results.json records each site's balanced accuracy, macro-F1,
    per-class recall and confusion matrix (small cells empty), what it withheld, and the images scored in all
    (balanced accuracy does not pool from the sites' values)."""

    PARAMS: ClassVar[type[HeldModelParams]] = IsicEvaluationParams
    WORKFLOW: ClassVar[str] = "isic-evaluation"
    META: ClassVar[tuple[str, ...]] = (CONFUSION, WITHHELD)

    def federation(self, sites: dict[str, dict[str, float]]) -> dict[str, float]:
        return {f"{EVAL}_images": sum(m.get(f"{EVAL}_images", 0.0) for m in sites.values())}
