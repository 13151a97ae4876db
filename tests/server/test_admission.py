"""The server's participants list: what fl-provision writes into the server kit, and how the admission component
reads it (every bad list named; re-read on change; a broken edit keeps the last good list; none means nobody).

The refusals themselves, on a real provisioned server, are in tests/federation/test_admission.py.
"""

from __future__ import annotations

import json
import os

import pytest
from support import ADMIN

from federation_tools.admin import waiting_reason
from provisioning.policy import SCHEDULE_INTERVAL_S, SCHEDULE_TRIES
from provisioning.provision import Federation, customise, load_template, provision, running_server_hint
from server_app.admission import (
    PARTICIPANTS_FILE,
    Participants,
    ParticipantsError,
    ParticipantsList,
    read_participants,
    write_participants,
)
from server_app.scheduler import expected_sites

LISTED = Participants("fed", frozenset({"site-1", "site-2"}), frozenset({ADMIN}))


def test_the_server_kit_lists_the_project_and_retries_waiting_jobs_every_few_seconds(tmp_path):
    federation = provision(customise(load_template(None), sites=["site-1", "site-2"], admins={ADMIN: "lead"}), tmp_path)
    local = federation.kit(federation.server) / "local"
    resources = json.loads((local / "resources.json").read_text())
    components = {c["id"]: c for c in resources["components"]}

    assert read_participants(local / PARTICIPANTS_FILE) == Participants(
        federation.project, frozenset(federation.sites), frozenset(federation.admins))
    assert os.stat(local / PARTICIPANTS_FILE).st_mode & 0o777 == 0o600
    assert components["site_admission"]["path"] == "server_app.admission.SiteAdmission"
    assert components["job_scheduler"] == {
        "id": "job_scheduler", "path": "server_app.scheduler.NamingJobScheduler",
        "args": {"max_jobs": 4, "min_schedule_interval": SCHEDULE_INTERVAL_S,
                 "max_schedule_interval": SCHEDULE_INTERVAL_S, "max_schedule_count": SCHEDULE_TRIES}}


def test_provisioning_again_says_how_a_running_server_admits_the_new_site(tmp_path):
    kits = tmp_path / "fed"
    assert running_server_hint(Federation("fed", kits / "prod_00", "localhost", ["site-1"])) is None  # no server yet
    hint = running_server_hint(Federation("fed", kits / "prod_01", "localhost", ["site-1", "site-9"]))
    assert hint is not None and f"{PARTICIPANTS_FILE} is copied from {kits / 'prod_01' / 'localhost' / 'local'}" in hint


def test_only_listed_names_of_each_kind_may_join():
    assert LISTED.refusal("site-1", "regular") is None and LISTED.refusal(ADMIN, "admin") is None
    refused = LISTED.refusal("site-9", "regular")
    assert refused is not None and "site 'site-9' is not a participant of project 'fed'" in refused
    assert "site-2" not in refused  # a refused client does not learn who is listed
    assert LISTED.refusal("site-1", "admin") is not None  # a site's name is no admin's
    assert "admin 'x@y.org'" in str(LISTED.refusal("x@y.org", "admin"))


@pytest.mark.parametrize(("content", "message"), [
    (None, "not found"),
    ("{", "unreadable"),
    ('["site-1"]', "no 'project' name"),
    ('{"project": "fed", "sites": "site-1"}', "'sites' must be a list of names, not 'site-1'"),
    ('{"project": "fed", "sites": ["site-1"], "admins": [""]}', "'admins' must be a list of names"),
])
def test_a_bad_list_is_named_with_the_fix(tmp_path, content, message):
    path = tmp_path / PARTICIPANTS_FILE
    if content is not None:
        path.write_text(content)
    with pytest.raises(ParticipantsError, match=message) as refused:
        read_participants(path)
    assert str(path) in str(refused.value) and "run fl-provision again" in str(refused.value)


def test_the_list_is_re_read_on_change_and_a_broken_edit_keeps_the_last_good_one(tmp_path):
    warnings: list[str] = []
    path = write_participants(tmp_path, LISTED)
    in_force = ParticipantsList(path, warnings.append)
    assert in_force.refusal("site-9", "regular") is not None

    write_participants(tmp_path, Participants("fed", LISTED.sites | {"site-9"}, LISTED.admins))
    assert in_force.refusal("site-9", "regular") is None

    path.write_text("{ half an edit")
    assert in_force.refusal("site-9", "regular") is None and in_force.refusal("site-8", "regular") is not None
    assert len(warnings) == 1 and "unreadable" in warnings[0] and "last good list stays in force" in warnings[0]


def test_without_a_list_nobody_joins(tmp_path):
    warnings: list[str] = []
    refused = ParticipantsList(tmp_path / PARTICIPANTS_FILE, warnings.append).refusal("site-1", "regular")
    assert refused is not None
    told, logged = refused
    assert "no participants list" in told and "not found" in logged
    assert "every registration is refused" in warnings[0]


def test_a_waiting_job_expects_the_sites_its_deploy_map_names_or_every_listed_one():
    assert expected_sites({"app": ["@ALL"]}, LISTED.sites) == {"site-1", "site-2"}
    assert expected_sites({"app": ["server", "site-2"], "other": ["site-7"]}, LISTED.sites) == {"site-2", "site-7"}


def test_the_follower_reads_the_schedulers_latest_reason():
    meta = {"schedule_history": ["2026-12-01 10:51:40: connected sites (1) < min_sites (3)",
                                 "2026-12-01 10:51:45: connected sites (2) < min_sites (3); not connected: site-3"]}
    assert waiting_reason(meta) == "connected sites (2) < min_sites (3); not connected: site-3"
    assert waiting_reason({}) == "" and waiting_reason({"schedule_history": ["scheduled"]}) == "scheduled"
