"""Faults on a real provisioned federation, met by the fedavg-linear reference job: an abort, FLARE ending a run
for too few sites, frozen sites, a dead job process, a site killed and started again mid-job, the server killed and
restarted (again and again, without waiting for it to be up).

Each ends in a named result: the job finishes without the dead site, takes the restarted site back (deployed the
job again by the server), stops as "aborted" with its completed rounds, or resumes after the restart from its last
completed round with the same final model an uninterrupted run gives.
Processes are killed by their own PIDs (SIGKILL, as a crash would). The other job kinds meet the same faults in
test_kind_faults.py, on a federation of their own (the two modules run side by side in the suite).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from harness.federation import HarnessFederation
from support import (
    ADMIN,
    SITES,
    abort_running,
    provision_demo_federation,
    server_results,
    submit,
    wait_for_rounds,
    wait_until,
)

from federation_tools.admin import JobOutcome, follow_job
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from provisioning.provision import Federation
from server_app.startup_signature import WINDOW_HIT
from site_agent.data.demo.linear_demo import generate_linear_sites
from site_agent.privacy.audit import AuditLog
from site_agent.privacy.ledger import Ledger

pytestmark = [pytest.mark.federation, pytest.mark.faults]


@pytest.fixture(scope="module")
def fault_federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Federation, HarnessFederation]]:
    """A federation of its own: these tests kill its processes."""
    loopback = HarnessFederation(provision_demo_federation(tmp_path_factory.mktemp("faults")))
    try:
        loopback.bring_up(ADMIN)
        yield loopback.federation, loopback
    finally:
        loopback.stop(ADMIN)


def _reference_weights(rounds: int | list[list[str]]) -> list[float]:
    """The reference FedAvg run (docs/algorithms.md#fedavg-reference-run) in numpy: 5 full-batch steps per site and
    round, sample-weighted; `rounds` is a count (every site in every round) or, per round, the sites that took part."""
    sites = dict(zip(SITES, ((x.astype(np.float64), y.astype(np.float64)) for x, y in generate_linear_sites()),
                     strict=True))
    took_part = [list(SITES)] * rounds if isinstance(rounds, int) else rounds
    w = np.zeros(2)
    for names in took_part:
        local = []
        for x, y in (sites[name] for name in names):
            v = w.copy()
            for _ in range(5):
                v -= 0.1 * 2 * x.T @ (x @ v - y) / len(y)
            local.append((len(y), v))
        w = sum(n * v for n, v in local) / sum(n for n, _ in local)
    return w.tolist()


def _resumed_as(said: list[str], job_id: str) -> str | None:
    """The job `job_id` was resumed as, from what the follower printed ("job X: ...; resumed as job Y")."""
    for line in said:
        if line.startswith(f"job {job_id}: ") and "; resumed as job " in line:
            return line.rsplit("; resumed as job ", 1)[1].strip()
    return None


def _lost_a_dead_sites_upload(outcome: JobOutcome) -> bool:
    """FLARE 2.9's known race: a site killed while its update streams to the server leaves the download pending;
    when the run ends the server job process fails decoding it and exits, so FLARE reports EXECUTION_EXCEPTION for
    a workflow that finished (results.json says so). Only that exact exit is accepted in place of COMPLETED, read
    from the server job's log as downloaded (FLARE removes the job's folder from the server kit once it ends)."""
    log = outcome.result_dir / "workspace" / "log.txt" if outcome.result_dir else None
    return (log is not None and log.is_file()
            and "failed to decode streamed submit_update" in log.read_text(errors="replace"))


def test_abort_stops_within_a_round_and_a_new_submission_never_resumes_it(fault_federation, tmp_path):
    """An aborted run keeps its completed rounds; the same kind submitted again with another setting starts afresh
    (a checkpoint belongs to its own run), and reaches the reference weights of its own configuration."""
    federation, loopback = fault_federation
    job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=200)), tmp_path / "long")
    again_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=3)), tmp_path / "again")
    session = loopback.session(ADMIN)
    try:
        job_id = submit(session, job_dir)
        wait_for_rounds(federation, job_id, 2)
        abort_running(session, job_id)
        done_at_abort = len(server_results(federation, job_id)["rounds"])  # read once the abort was accepted
        outcome = follow_job(session, job_id, timeout=120, progress=None)
        again = follow_job(session, submit(session, again_dir), timeout=180, progress=None)
    finally:
        session.close()

    results = json.loads((outcome.server_app_dir() / "results.json").read_text())
    assert outcome.status == "FINISHED:ABORTED", outcome.status
    # the round under way when the abort reached the workflow is named and not recorded; the rounds recorded after the
    # abort was accepted are those FLARE's abort message took to reach the server's job process (rounds of a second)
    assert results["status"] == "aborted" and results["error"] == f"aborted during round {len(results['rounds']) + 1}"
    assert 2 <= done_at_abort <= len(results["rounds"]) <= done_at_abort + 2, (done_at_abort, len(results["rounds"]))
    assert (outcome.server_app_dir() / "global_model.pt").is_file()
    fresh = again.results()
    assert again.completed and "resumed_after_round" not in fresh, fresh.get("resumed_after_round")
    assert fresh["rounds"][-1]["global_weights"]["weight"] == pytest.approx(_reference_weights(3), abs=1e-5)


def test_flare_ending_the_run_for_too_few_sites_names_the_site_and_why(fault_federation, tmp_path):
    """min_clients = every site and site-2's job process killed: FLARE ends the run; results.json says "failed"
    (not an admin's abort), naming site-2, that its job process failed, and the round that could not complete."""
    federation, loopback = fault_federation
    job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=200, min_clients=len(SITES), quorum_wait_s=0)),
                     tmp_path)
    session = loopback.session(ADMIN)
    try:
        job_id = submit(session, job_dir)
        wait_for_rounds(federation, job_id, 2)
        assert loopback.kill_job_processes("site-2") == 1
        outcome = follow_job(session, job_id, timeout=120, progress=None)
    finally:
        session.close()

    results = outcome.results()
    failed = results["failed_round"]
    assert results["status"] == "failed" and "site-2" in results["error"], results.get("error")
    assert "job process" in failed["outcomes"]["site-2"], failed
    assert failed["round"] == len(results["rounds"]) + 1 and failed["outcomes"]["site-1"] == "update accepted"


def test_a_frozen_site_every_site_frozen_and_a_restarted_site_leave_a_completed_job(fault_federation, tmp_path):
    """min_clients = every site: site-2's processes are frozen (SIGSTOP) for 30 s, past the server's 20 s heartbeat
    timeout, later every site's for 40 s, then site-3's client and job process are killed and started again 20 s
    later. A frozen site's TCP connections stay up and no reconnect runs: a site that stops answering (a hung
    machine, a VM paused for a snapshot), not a network outage, which tests/federation/test_network_faults.py
    black-holes with the link emulator. Each time the round waits for the sites (quorum_wait_s) instead of FLARE
    ending the run, or FLARE sends site-3's new job process the task of the round still waiting for it, once the
    server has deployed the job to it again; the job completes with every site in every round and the reference
    weights; the rounds that waited say for whom and how long."""
    federation, loopback = fault_federation
    rounds = 8
    job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=rounds, min_clients=len(SITES))), tmp_path)
    said: list[str] = []
    session = loopback.session(ADMIN)
    try:
        job_id = submit(session, job_dir)
        wait_for_rounds(federation, job_id, 2)
        with loopback.frozen("site-2"):
            time.sleep(30)
        wait_for_rounds(federation, job_id, 4, timeout=180)
        with loopback.frozen(*SITES):
            time.sleep(40)
        wait_for_rounds(federation, job_id, 6, timeout=180)
        loopback.kill_participant("site-3")
        time.sleep(20)
        loopback.bring_up(ADMIN)
        outcome = follow_job(session, job_id, timeout=300, progress=said.append)
    finally:
        session.close()
        loopback.bring_up(ADMIN)

    results = outcome.results()
    waited = {site: r["round"] for r in results["rounds"] for site in r.get("waited_for_sites", {})}
    assert outcome.completed and results["status"] == "finished", results.get("error")
    assert [r["round"] for r in results["rounds"]] == list(range(1, rounds + 1))
    assert all(set(r["sites"]) == set(SITES) for r in results["rounds"])
    assert "site-2" in waited, [r.get("waited_for_sites") for r in results["rounds"]]
    assert any("site-3 registered again: its job was deployed and started again" in line for line in said), said
    assert results["rounds"][-1]["global_weights"]["weight"] == pytest.approx(_reference_weights(rounds), abs=1e-5)


def test_a_dead_job_process_is_named_and_a_restarted_site_takes_part_again(fault_federation, tmp_path):
    """site-2's job process is killed (its client stays up: FLARE alone would fail the whole job), then site-3's whole
    client with its job process, started again 20 s later as a service manager would. The job goes on with the sites
    left, each round naming who did not answer; the server deploys the running job to the returned site-3, which
    sends accepted updates again, and the final weights are the reference computed from the rounds each site took
    part in. results.json says when site-3 came back and which rounds it missed."""
    federation, loopback = fault_federation
    rounds_in_job = 40  # the rounds without site-3 take a second each: the job must outlast its 20 s away
    job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=rounds_in_job, min_clients=1)), tmp_path)
    said: list[str] = []  # what `fl-job submit` prints
    session = loopback.session(ADMIN)
    try:
        job_id = submit(session, job_dir)
        wait_for_rounds(federation, job_id, 1)
        assert loopback.kill_job_processes("site-2") == 1
        wait_for_rounds(federation, job_id, 2, timeout=60)
        loopback.kill_participant("site-3")
        time.sleep(20)
        # a site back before the server has noticed it gone answers the open round as if never away (FLARE took
        # over 25 s to notice on a loaded machine): the service manager's restart comes after a missed round
        wait_until(lambda: any("site-3" not in r["sites"] for r in server_results(federation, job_id)["rounds"]),
                   180, "no round closed without the killed site-3")
        loopback.bring_up(ADMIN)  # site-3 again, mid-job
        outcome = follow_job(session, job_id, timeout=300, progress=said.append)
    finally:
        session.close()
        loopback.bring_up(ADMIN)

    results = outcome.results()
    rounds = results["rounds"]
    assert outcome.completed or _lost_a_dead_sites_upload(outcome), outcome.refusal()
    assert results["status"] == "finished" and len(rounds) == rounds_in_job
    without_site_2 = [r for r in rounds if "site-2" not in r["sites"]]
    assert without_site_2 and "job process" in without_site_2[0]["outcomes"]["site-2"], without_site_2[0]
    missed = [r for r in rounds if "site-3" not in r["sites"]]
    assert missed and "registered again" in missed[-1]["outcomes"]["site-3"], [r["outcomes"] for r in missed[-1:]]
    back = [r["round"] for r in rounds if r["round"] > missed[-1]["round"]]
    assert back and all("site-3" in rounds[n - 1]["sites"] for n in back), [r["sites"] for r in rounds]
    assert results["returns"]["site-3"] == [{"back_at_round": back[0], "missed": [r["round"] for r in missed]}]
    assert any("site-3 registered again: its job was deployed and started again" in line for line in said), said
    assert f"job {job_id}: site-3 back at round {back[0]} (missed {', '.join(str(r['round']) for r in missed)})" \
        in said, said
    assert rounds[-1]["global_weights"]["weight"] == pytest.approx(
        _reference_weights([sorted(r["sites"]) for r in rounds]), abs=1e-5)
    site_3 = federation.kit("site-3")
    events = [e["event"] for e in AuditLog(site_3 / "local").entries(job_id)]
    assert events.count("job_started") == 2 and "job_redeployed" in events, events  # started again, the run kept
    assert [e["job_id"] for e in Ledger(site_3 / "local").entries()].count(job_id) == 1  # charged once
    assert "log.txt" in {p.name for p in (site_3 / f"{job_id}.before-restart-1").iterdir()}


ADMIN_DELAY_S = 6.0  # the sites knock as soon as the port opens: 4 s was hit 4 times in 4 on an idle machine


def test_the_server_killed_mid_job_resumes_from_its_last_completed_round(fault_federation, tmp_path):
    """The server killed mid-job and started again, SERVER_RESTARTS times (3 in the suite), each time without
    waiting for it to be up: the sites and the follower (`fl-job submit`) reconnect as fast as they do in production,
    through FLARE's start-up window. The first restart holds that window open for ADMIN_DELAY_S
    (tests/harness/slow_start.py), so the sites' heartbeats are answered inside it every time: without
    server_app.startup_signature every admin session, the follower's included, is then refused. Each restart resumes
    the job from its last completed round; the last copy completes every round with every site and the reference
    weights."""
    federation, loopback = fault_federation
    restarts = int(os.environ.get("SERVER_RESTARTS", "3"))
    rounds = 4 + 3 * restarts
    job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=rounds)), tmp_path)
    said: list[str] = []  # what `fl-job submit` prints, following the job (federation_tools.admin) across the restart
    session = loopback.session(ADMIN)
    try:
        job_id = submit(session, job_dir)
        with ThreadPoolExecutor(1) as follower:
            following = follower.submit(follow_job, session, job_id, 120 + 60 * restarts, True, said.append)
            current = job_id
            for restart in range(restarts):
                wait_for_rounds(federation, current, 3 * restart + 3, timeout=180)
                loopback.kill_participant(federation.server)
                loopback.start_server(wait=False, admin_delay_s=ADMIN_DELAY_S if restart == 0 else 0.0)
                wait_until(lambda job=current: _resumed_as(said, job) is not None, 120,
                           f"restart {restart + 1}: the follower saw the job resumed")
                current = str(_resumed_as(said, current))
            outcome = following.result()
    finally:
        session.close()
    loopback.bring_up(ADMIN)
    session = loopback.session(ADMIN)
    try:
        interrupted = session.get_job_meta(job_id)
    finally:
        session.close()

    results = json.loads((outcome.server_app_dir() / "results.json").read_text())
    assert WINDOW_HIT in (federation.kit(federation.server) / "process.log").read_text()
    assert any("lost the connection to the server" in line for line in said), said
    assert "reconnected to the server" in said and f"resumed as job {outcome.job_id}" in "\n".join(said), said
    assert interrupted["status"] == "FINISHED:ABNORMAL" and interrupted["resumed_as"]
    assert outcome.completed, outcome.refusal()
    assert results["resumed_after_round"] >= 3 * restarts and outcome.job_id == current
    assert [r["round"] for r in results["rounds"]] == list(range(1, rounds + 1))
    assert all(sorted(r["sites"]) == SITES for r in results["rounds"]), [r["sites"] for r in results["rounds"]]
    assert results["rounds"][-1]["global_weights"]["weight"] == pytest.approx(_reference_weights(rounds), abs=1e-5)
