"""A finished job's report on the study lead's page (`/jobs/JOB_ID`), from the results this admin downloaded
(`fl-job submit` and the console's `download_job` put them in `<admin kit>/transfer/JOB_ID/`): its parameters,
status and stop reason, per round the sites' outcomes and the validation curves, for a segmentation job the
Dice plot `fl-seg-report` draws, and for FedKT-CSD its class grids and both models of its evaluation round scored at
each site. Nothing is asked of the server: a job not downloaded has no report yet.

A job id is looked up only among the jobs the server listed and must be a FLARE job id (a UUID), so no request
reads a file outside the downloads.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from federation_tools.status.progress import Progress, progress_of
from fl_contract.fedkt_csd.protocol import weighted_balanced_accuracy
from server_app.fedkt_outputs import GRID_DIR
from server_app.progress import PROGRESS_STATS, round_progress
from server_app.results import RESULTS_FILE

if TYPE_CHECKING:
    from collections.abc import Callable

    from flask import Flask

    from federation_tools.status.snapshot import StudyStatus

JOB_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
SEGMENTATION, PLAYERFL, FEDKT_CSD = "brats-segmentation", "playerfl", "fedkt-csd"


@dataclass(frozen=True)
class JobReport:
    job_id: str
    kind: str
    status: str
    reason: str
    params: list[tuple[str, str]]
    rounds: list[dict[str, Any]]
    """Per round: its number and each site's outcome."""
    progress: Progress | None
    figures: list[tuple[str, str]]
    """The kind's own report figures: (caption, base64 PNG)."""
    results_file: str
    scores: list[ScoreTable] = field(default_factory=list)
    """The kind's models scored at the sites (FedKT-CSD's evaluation round)."""


@dataclass(frozen=True)
class ScoreTable:
    """One model scored on each site's held-out images: per site its images, balanced accuracy and the recall of each
    class it holds (None: the site holds none of the class), and the site-weighted balanced accuracy."""

    caption: str
    classes: list[str]
    rows: list[tuple[str, int, float, list[float | None]]]
    weighted: float


FEDKT_SCORES = (("evaluation", "classifier trained on the synthetic set"),
                ("latent_evaluation", "the released class Gaussians as a classifier of the encoded images"))


def results_path(downloads: Path, job_id: str) -> Path | None:
    """The downloaded results.json of `job_id` (None: not downloaded, or not a job id)."""
    if not JOB_ID.match(job_id):
        return None
    folder = Path(downloads) / job_id
    found = sorted(folder.rglob(RESULTS_FILE)) if folder.is_dir() else []
    return found[0] if found else None


def _encoded(paths: Sequence[Path | None]) -> list[tuple[str, str]]:
    return [(path.stem.replace("_", " "), base64.b64encode(path.read_bytes()).decode()) for path in paths if path]


@functools.lru_cache(maxsize=32)
def _figures(path: Path, modified: float, kind: str) -> tuple[tuple[str, str], ...]:
    """The kind's own report figures of the file, drawn by the report commands' code (cached per file version:
    matplotlib takes a second): segmentation's Dice plot and cross-site heatmap (`fl-seg-report`), PLayer-FL's
    sensitivity curve and cross-site heatmap (`playerfl-report`), FedKT-CSD's grids of the released classes."""
    if kind == FEDKT_CSD:
        return tuple(_encoded(sorted((path.parent / GRID_DIR).glob("*.png"))))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if kind == SEGMENTATION:
            from reports.segmentation import cross_site_plot, plot

            results = json.loads(path.read_text())
            return tuple(_encoded([plot(results, out / "validation_dice.png"),
                                   cross_site_plot(results, out / "cross_site_dice.png")]))
        if kind == PLAYERFL:
            from reports.playerfl.cli import cross_site_heatmap
            from reports.playerfl.plots import sensitivity_curves
            from reports.playerfl.runs import load_runs

            [run] = load_runs([path])
            return tuple(_encoded([
                sensitivity_curves(run, out / "layer_sensitivity.png") if run.split and run.split.get(
                    "federation_curve") else None,
                cross_site_heatmap(run, out / "cross_site_balanced_accuracy.png") if run.cross_site else None]))
    return ()


def score_tables(results: dict[str, Any], kind: str) -> list[ScoreTable]:
    """FedKT-CSD's evaluation round, both models; nothing for another kind or a run without the round."""
    tables = []
    for key, caption in FEDKT_SCORES if kind == FEDKT_CSD else ():
        sites = results.get(key) or {}
        if not sites:
            continue
        classes = sorted({name for metrics in sites.values() for name in metrics.get("recall", {})})
        rows = [(site, int(m["num_test"]), float(m["balanced_accuracy"]),
                 [m.get("recall", {}).get(name) for name in classes]) for site, m in sorted(sites.items())]
        tables.append(ScoreTable(caption, classes, rows, weighted_balanced_accuracy(sites)))
    return tables


def _scores(results: Any, kind: str) -> list[ScoreTable]:
    """`score_tables`, or none for results it cannot read (a hand-edited or foreign file): the rest still shows."""
    try:
        return score_tables(results, kind)
    except (AttributeError, KeyError, ValueError, TypeError):
        return []


def job_report(downloads: Path, job_id: str, kind: str) -> JobReport | None:
    """The report of a downloaded job, or None when it was not downloaded here."""
    path = results_path(downloads, job_id)
    if path is None:
        return None
    results = json.loads(path.read_text())
    job = results.get("job", {}) if isinstance(results, dict) else {}
    params = job.get("params", job) if isinstance(job, dict) else {}
    rounds = list(results.get("rounds", []))
    num_rounds = int(params.get("num_rounds", len(rounds)) or len(rounds)) if isinstance(params, dict) else len(rounds)
    seen = progress_of({PROGRESS_STATS: round_progress(results, num_rounds, None, 0.0)}) if rounds else None
    try:
        figures = list(_figures(path, path.stat().st_mtime, kind))
    except (KeyError, ValueError, TypeError):  # a run stopped before what the figure draws: the rest still shows
        figures = []
    return JobReport(
        job_id=job_id, kind=kind, status=str(results.get("status", "")), reason=str(results.get("error", "")),
        params=sorted((str(k), json.dumps(v)) for k, v in (params.items() if isinstance(params, dict) else [])),
        rounds=[{"round": r.get("round"), "outcomes": r.get("outcomes", {})} for r in rounds],
        progress=seen, figures=figures, results_file=str(path.relative_to(Path(downloads))),
        scores=_scores(results, kind))


def add_job_reports(app: Flask, source: Callable[[], StudyStatus], downloads: Path) -> None:
    """`/jobs/JOB_ID` on the study page: the report of a job the server lists and this admin downloaded."""
    from flask import abort, render_template

    from fl_runtime.status_server import REFRESH_S

    @app.get("/jobs/<job_id>")
    def _job(job_id: str) -> str:
        status = source()
        job = next((j for j in status.jobs if j.job_id == job_id), None)
        report = job_report(downloads, job_id, job.kind) if job is not None else None
        if report is None:
            abort(404, "no such job among the latest, or its results are not downloaded here "
                       "(the console's download_job JOB_ID)")
        return str(render_template("study_job.html", report=report, status=status, refresh_s=REFRESH_S))
