"""A checkpoint belongs to one run: only the server's recovery clone of that run resumes it, and only unchanged."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from server_app.checkpoint import (
    ResumeRefused,
    job_digest,
    record_job_digest,
    record_resumer,
    run_checkpoint,
)
from server_app.site_events import (
    CLIENT_GONE,
    JOB_PROCESS_FAILED,
    REJOINED,
    RETURNED,
    append_event,
    describe,
    last_event_by_site,
    latest_of_kind,
)

CONFIG = {"workflow": "fedavg", "num_rounds": 5, "seed": 0}


def _save_round(root: Path, job_id: str, config: dict[str, object] = CONFIG) -> None:
    checkpoint = run_checkpoint(root, job_id, config)
    checkpoint.save(2, {"rounds": [{"round": 1}, {"round": 2}]}, {"global": {"w": np.arange(3.0)}})


def _zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def test_a_new_submission_of_the_same_job_starts_afresh(tmp_path):
    _save_round(tmp_path, "job-1")

    assert run_checkpoint(tmp_path, "job-2", CONFIG).load() is None
    assert run_checkpoint(tmp_path, "job-1", CONFIG).load() is None  # the run itself never reads its own back


def test_the_recovery_clone_resumes_its_run_and_two_runs_never_share_a_folder(tmp_path):
    _save_round(tmp_path, "job-1")
    _save_round(tmp_path, "job-2")
    record_resumer(tmp_path, "clone-of-1", "job-1")

    resumed = run_checkpoint(tmp_path, "clone-of-1", CONFIG).load()

    assert resumed is not None and resumed.completed_rounds == 2
    np.testing.assert_array_equal(resumed.params["global"]["w"], np.arange(3.0))
    assert run_checkpoint(tmp_path, "job-1", CONFIG).folder != run_checkpoint(tmp_path, "job-2", CONFIG).folder


def test_a_clone_of_another_configuration_is_refused_with_the_reason(tmp_path):
    record_job_digest(tmp_path, "job-1", "digest-a")
    _save_round(tmp_path, "job-1")
    record_job_digest(tmp_path, "clone-of-1", "digest-b")  # the sites' configuration differs
    record_resumer(tmp_path, "clone-of-1", "job-1")

    with pytest.raises(ResumeRefused, match="another configuration.*submit the job again"):
        run_checkpoint(tmp_path, "clone-of-1", CONFIG).load()
    record_resumer(tmp_path, "clone-2", "job-1")
    with pytest.raises(ResumeRefused):
        run_checkpoint(tmp_path, "clone-2", {**CONFIG, "num_rounds": 6}).load()


def test_checkpoint_files_are_owner_only(tmp_path):
    _save_round(tmp_path, "job-1")

    folder = run_checkpoint(tmp_path, "job-1", CONFIG).folder
    assert all(path.stat().st_mode & 0o077 == 0 for path in folder.iterdir())


def test_the_job_digest_covers_every_app_file_and_ignores_zip_order():
    server = {"config/config_fed_server.json": "{}"}
    site = {"config/config_fed_client.json": '{"local_steps": 5}'}
    edited = {"config/config_fed_client.json": '{"local_steps": 6}'}
    reordered = _zip({"b.json": "2", "a.json": "1"}), _zip({"a.json": "1", "b.json": "2"})

    assert job_digest({"server": _zip(server), "site": _zip(site)}) != job_digest({"server": _zip(server),
                                                                                   "site": _zip(edited)})
    assert job_digest({"app": reordered[0]}) == job_digest({"app": reordered[1]})


def test_site_events_name_the_latest_reason_per_site(tmp_path):
    append_event(tmp_path, "site-2", CLIENT_GONE, "no heartbeat within the server's timeout")
    append_event(tmp_path, "site-2", JOB_PROCESS_FAILED, "exit code 101")
    with (tmp_path / "site_events.jsonl").open("a") as out:
        out.write('{"site": "site-3", "kin')  # a torn line from a write cut short

    latest = last_event_by_site(tmp_path)

    assert list(latest) == ["site-2"] and describe(latest["site-2"]) == "its job process failed (exit code 101)"


def test_a_site_started_again_after_a_round_was_sent_is_back_for_that_round(tmp_path):
    """RoundWorkflow.await_sites sends a round again to a site whose job was started again after the round was sent
    (the round went to its old job process): only REJOINED at or after the send counts, not an earlier return, nor a
    deploy still under way."""
    append_event(tmp_path, "site-1", REJOINED, "its job was deployed and started again 2.0 s after it registered")
    sent_at = time.time()
    append_event(tmp_path, "site-2", RETURNED, "registered again")
    append_event(tmp_path, "site-3", RETURNED, "registered again")
    append_event(tmp_path, "site-3", REJOINED, "its job was deployed and started again 3.8 s after it registered")

    assert latest_of_kind(tmp_path, ["site-1", "site-2", "site-3"], REJOINED, sent_at) == {"site-3"}
    assert latest_of_kind(tmp_path, ["site-1", "site-2"], REJOINED) == {"site-1"}
    assert latest_of_kind(tmp_path, ["site-1", "site-2", "site-3"], RETURNED) == {"site-2"}
