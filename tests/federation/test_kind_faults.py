"""The segmentation, PLayer-FL and inference kinds meet a site killed mid-job, the server killed and restarted,
and an abort, on a real provisioned federation of their own: each finishes without the dead site, resumes after
the restart (inference, one task, is closed with 'submit it again') and stops as "aborted" when aborted.
Processes are killed by their own PIDs (SIGKILL, as a crash would); test_faults.py has the fedavg-linear faults.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from harness.federation import HarnessFederation
from support import ADMIN, SITES, abort_running, provision_demo_federation, submit, wait_for_rounds, wait_for_server_log

from federation_tools.admin import follow_job
from federation_tools.demo_data import isic_demo_site
from federation_tools.demos.playerfl import DEMO_JOB_ARGS
from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.models import build_model
from fl_contract.params import JobParams
from fl_contract.segmentation import MODEL
from jobs.common import build_job, export
from jobs.evaluation.spec import KIND as EVALUATION_KIND
from jobs.evaluation.spec import EvaluationParams
from jobs.inference.spec import KIND as INFERENCE_KIND
from jobs.inference.spec import InferenceParams
from jobs.isic_evaluation.spec import KIND as ISIC_EVALUATION_KIND
from jobs.isic_evaluation.spec import IsicEvaluationParams
from jobs.playerfl.spec import KIND as PLAYERFL
from jobs.playerfl.spec import PLayerFLParams
from jobs.segmentation.spec import CPU_DEMO, SegmentationParams
from jobs.segmentation.spec import KIND as SEGMENTATION
from jobs.spec import JobKind
from provisioning.provision import Federation
from server_app.results import BEST_MODEL_FILE, GLOBAL_MODEL_FILE
from server_app.server_config import write_server_config
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.data.isic import read_isic_site
from site_agent.kit.site_config import SiteConfig, write_site_config

pytestmark = [pytest.mark.federation, pytest.mark.faults]


INFERENCE_CASES = 8  # 48^3 each: seconds of work per site, time to strike mid-job
ARCHITECTURE = {k: CPU_DEMO[k] for k in ("roi_size", "init_filters", "blocks_down", "blocks_up", "dropout_prob")}
INFERENCE = InferenceParams(model="run-1", min_clients=2, **ARCHITECTURE)
EVALUATION = EvaluationParams(model="run-1", dataset="brats_inference", min_clients=2, **ARCHITECTURE)
"""Scores the same model on the same cases (they carry labels too)."""
ISIC_EVALUATION = IsicEvaluationParams(model="isic-1", min_clients=2, image_size=32,
                                       model_args={"channels": [4, 4, 8, 8, 8], "hidden": 8})
GAUNTLET: dict[str, tuple[JobKind[Any], JobParams]] = {
    "brats-segmentation": (SEGMENTATION, SegmentationParams(num_rounds=3, min_clients=2, tracking=False, **CPU_DEMO)),
    "playerfl": (PLAYERFL, PLayerFLParams(**{**DEMO_JOB_ARGS, "num_rounds": 3, "local_epochs": 1, "min_clients": 2})),
}


@pytest.fixture(scope="module")
def fault_federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, HarnessFederation]]:
    """A federation of its own (these tests kill its processes), its sites with ISIC images and cases to segment."""
    workspace = tmp_path_factory.mktemp("kind-faults")
    federation = provision_demo_federation(workspace)
    for index, site in enumerate(SITES, start=1):  # PLayer-FL's ISIC data and cases to segment beside the others
        datasets = dict(SiteConfig.for_kit(federation.kit(site)).datasets)
        cases, results = workspace / "data" / site / "to-segment", workspace / "data" / site / "segmented"
        write_brats_site(cases, index, n_cases=INFERENCE_CASES, shape=(48, 48, 48), layout="nifti")
        results.mkdir()
        write_site_config(federation.kit(site), {**datasets, "isic": isic_demo_site(index, site, workspace / "data"),
                                                 "brats_inference": str(cases), "brats_results": str(results)})
    models = workspace / "server-models" / "run-1"  # the model an inference job sends: any SegResNet of the right shape
    models.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(build_model(MODEL, **INFERENCE.model_args()).state_dict(), models / BEST_MODEL_FILE)
    classifier = workspace / "server-models" / "isic-1"  # and an ISIC classifier of the declared network
    classifier.mkdir()
    network, arguments = ISIC_EVALUATION.model_spec()
    torch.save(build_model(network, **arguments).state_dict(), classifier / GLOBAL_MODEL_FILE)
    write_server_config(federation.kit(federation.server), {"run-1": str(models), "isic-1": str(classifier)})
    loopback = HarnessFederation(federation)
    try:
        loopback.bring_up(ADMIN)
        yield federation, loopback
    finally:
        loopback.stop(ADMIN)


@pytest.mark.parametrize("name", sorted(GAUNTLET))
def test_job_kind_survives_a_dead_site_a_server_restart_and_an_abort(fault_federation, tmp_path, name):
    """One job meets a site killed mid-round (it goes on without it) and the server killed and restarted (it
    resumes and completes every round); a second run of the job, beside the resumed one (FLARE runs up to 4 jobs at
    once), is aborted and keeps its completed rounds."""
    federation, loopback = fault_federation
    loopback.bring_up(ADMIN)  # whole, whatever an earlier test left down
    kind, params = GAUNTLET[name]
    job_dir = export(build_job(kind, params), tmp_path)
    session = loopback.session(ADMIN)
    try:
        job_id = submit(session, job_dir)
        wait_for_rounds(federation, job_id, 1, timeout=300)
        loopback.kill_participant("site-3")
        wait_for_rounds(federation, job_id, 2, timeout=120)
        loopback.kill_participant(federation.server)  # at once: the last round must still be ahead
    finally:
        session.close()
    loopback.bring_up(ADMIN)  # the server and site-3
    session = loopback.session(ADMIN)
    try:
        aborted_id = submit(session, job_dir)
        wait_for_rounds(federation, aborted_id, 1, timeout=300)
        abort_running(session, aborted_id)
        aborted = follow_job(session, aborted_id, timeout=120, progress=None)
        resumed = follow_job(session, job_id, timeout=600, progress=None)
    finally:
        session.close()

    results = resumed.results()
    without_site_3 = [r for r in results["rounds"] if "site-3" not in r["sites"]]
    assert resumed.completed, resumed.refusal()
    assert results["resumed_after_round"] >= 2 and [r["round"] for r in results["rounds"]] == [1, 2, 3]
    assert without_site_3 and "stopped answering" in without_site_3[0]["outcomes"]["site-3"], without_site_3[0]
    assert aborted.status == "FINISHED:ABORTED" and aborted.results()["status"] == "aborted"
    assert len(aborted.results()["rounds"]) >= 1


def test_a_rebooted_playerfl_site_comes_back_into_its_job_with_its_personal_layers(fault_federation, tmp_path):
    """site-3's machine "reboots" during a PLayer-FL job: every process of its kit is killed and, 15 s later, its
    service runs `site-agent start` as the unit `site-agent service` wrote says (and again 15 s after a start that
    gave up on a registration slowed by the load, as the unit's Restart=on-failure does). The server deploys the
    running job to it again; it is sent the round still waiting for it (every site is required) and starts from the
    state it saved after its last round before the reboot (its personal layers as it left them; a site back after
    missed rounds starts from the newest one it saved, test_playerfl_wire.py); the job completes with site-3 in
    every round and in the personalised-against-global matrix of its cross-site evaluation."""
    federation, loopback = fault_federation
    loopback.bring_up(ADMIN)  # whole, whatever an earlier test left down
    # every site required: the round waits for site-3 (quorum_wait_s), however long its reboot takes under load
    params = PLayerFLParams(**{**DEMO_JOB_ARGS, "num_rounds": 4, "local_epochs": 1, "min_clients": 3,
                               "quorum_wait_s": 300.0, "cross_site_evaluation": True})
    job_dir = export(build_job(PLAYERFL, params), tmp_path)
    session = loopback.session(ADMIN)
    try:
        job_id = submit(session, job_dir)
        wait_for_rounds(federation, job_id, 1, timeout=300)
        loopback.kill_participant("site-3")
        time.sleep(15)
        loopback.start_site_agent("site-3")
        # under load a start can give up on registration (its --timeout 30) and the unit start it again 15 s later
        loopback.wait_for_sites(ADMIN, SITES, timeout=180)
        outcome = follow_job(session, job_id, timeout=600, progress=None)
    finally:
        session.close()

    results = outcome.results()
    rounds = results["rounds"]
    assert outcome.completed, outcome.refusal()
    assert all("site-3" in r["sites"] for r in rounds), [r["sites"] for r in rounds]
    assert any("site-3" in r.get("waited_for_sites", {}) for r in rounds), [r.get("waited_for_sites") for r in rounds]
    site_log = (federation.kit("site-3") / job_id / "log.txt").read_text(errors="replace")
    assert "no saved state" not in site_log  # it went on from its own state, not as a new participant
    assert (federation.kit("site-3") / f"{job_id}.before-restart-1").is_dir()  # its interrupted run, kept
    cross = results["cross_site"]  # the rebooted site scores its personalised model and the global one too
    assert sorted(cross["sites"]) == SITES and cross["no_result"] == []
    assert all(set(row) == {"personalised", "global"} for row in cross["sites"].values())


def test_one_model_kinds_go_on_without_a_dead_site_and_stop_named_on_a_server_restart_or_an_abort(fault_federation,
                                                                                               tmp_path):
    """brats-inference, brats-evaluation and isic-evaluation are one task each (server_app.one_task), run
    side by side here through each fault: a site killed during the task and started again at once (a service's
    restart) gets the task again once the server has deployed the job to it again (the task still waiting for it,
    or sent again), and every site's cases are segmented, or scored, and its images scored; the server killed
    during it closes the job with 'submit it again'; an abort stops it. The last two faults strike the two
    segmentation kinds only: an ISIC evaluation of 40 small images is done before an abort lands, and with a third
    interrupted job the sites were still ending their orphaned job processes (10 s each) when the next job was
    deployed, which FLARE then failed to run."""
    federation, loopback = fault_federation
    loopback.bring_up(ADMIN)  # whole, whatever an earlier test left down
    job_dirs = [export(build_job(INFERENCE_KIND, INFERENCE), tmp_path / "inference"),
                export(build_job(EVALUATION_KIND, EVALUATION), tmp_path / "evaluation"),
                export(build_job(ISIC_EVALUATION_KIND, ISIC_EVALUATION), tmp_path / "isic-evaluation")]

    def submit_all(session: Any, kinds: int = len(job_dirs)) -> list[str]:
        ids = [submit(session, job_dir) for job_dir in job_dirs[:kinds]]
        for job_id in ids:
            wait_for_server_log(federation, job_id, "to the sites")
        return ids

    session = loopback.session(ADMIN)
    try:
        finished_ids = submit_all(session)
        loopback.kill_participant("site-3")
        loopback.bring_up(ADMIN)
        finished = [follow_job(session, job_id, timeout=300, progress=None) for job_id in finished_ids]
        interrupted = submit_all(session, kinds=2)
        loopback.kill_participant(federation.server)
    finally:
        session.close()
    loopback.bring_up(ADMIN)  # the server and site-3
    session = loopback.session(ADMIN)
    try:
        closed = [follow_job(session, job_id, timeout=120, progress=None) for job_id in interrupted]
        aborted_ids = submit_all(session, kinds=2)
        for job_id in aborted_ids:
            abort_running(session, job_id)
        aborted = [follow_job(session, job_id, timeout=120, progress=None) for job_id in aborted_ids]
    finally:
        session.close()

    images = {site: len(read_isic_site(SiteConfig.for_kit(federation.kit(site)).data_dir("isic", site),
                                       classes=PLAYERFL_CLASSES)) for site in SITES}
    expected = [("cases_segmented", dict.fromkeys(SITES, INFERENCE_CASES)),
                ("eval_cases", dict.fromkeys(SITES, INFERENCE_CASES)), ("eval_images", images)]
    for outcome, (answered, counts) in zip(finished, expected):
        results = outcome.results()
        assert outcome.completed and results["status"] == "finished", outcome.refusal()
        # FLARE gives site-3's new job process the task still waiting for it, or the workflow sends it again
        assert results.get("sent_again", ["site-3"]) == ["site-3"], results.get("sent_again")
        assert results["no_result"] == [] and sorted(results["sites"]) == SITES
        assert {site: r[answered] for site, r in results["sites"].items()} == counts, answered
    for outcome in closed:
        assert outcome.status == "FINISHED:ABNORMAL" and "submit it again" in outcome.meta.get("interrupted", "")
    for outcome in aborted:
        assert outcome.status == "FINISHED:ABORTED" and outcome.results()["status"] == "aborted"
