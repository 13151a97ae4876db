"""The FLARE 2.9 internals `server_app.rejoin` takes a returning site back with, and its own small parts.

A FLARE upgrade that renames or reshapes one of them fails here, by name, before a hospital's restarted site
silently sits out its jobs again. The whole path runs on the provisioned federation in
tests/federation/test_faults.py, tests/federation/test_kind_faults.py and tests/federation/test_fedkt_faults.py.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from nvflare.apis.client import Client
from nvflare.apis.fl_constant import RunProcessKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.impl.wf_comm_server import WFCommServer
from nvflare.apis.job_def import Job
from nvflare.private.admin_defs import Message
from nvflare.private.defs import RequestHeader, TrainingTopic
from nvflare.private.fed.client.scheduler_cmds import StartJobProcessor
from nvflare.private.fed.server.admin import FedAdminServer
from nvflare.private.fed.server.job_runner import JobRunner
from nvflare.private.fed.server.server_engine import ServerEngine

from server_app.rejoin import Rejoin, jobs_listing, site_app
from server_app.results import site_returns


def _job(deploy_map: dict[str, list[str]]) -> Job:
    return Job(job_id="j1", resource_spec={}, deploy_map=deploy_map, meta={"job_id": "j1", "name": "fedavg"})


def test_the_job_runner_keeps_what_a_rejoin_reads_and_builds_flares_deploy_message(tmp_path):
    runner = JobRunner(workspace_root=str(tmp_path))
    assert isinstance(runner.running_jobs, dict) and isinstance(runner._pending_client_outcomes, dict)
    with runner.lock:
        pass
    message = JobRunner._make_deploy_message(_job({"app": ["site-1"]}), b"zip", "app", FLContext())
    assert isinstance(message, Message) and message.topic == TrainingTopic.DEPLOY
    assert message.get_header(RequestHeader.JOB_ID) == "j1" and message.get_header(RequestHeader.APP_NAME) == "app"


def test_the_engine_and_admin_server_calls_a_rejoin_makes_exist_with_their_arguments():
    calls = {
        ServerEngine.check_client_resources: ["job", "resource_reqs", "fl_ctx"],
        ServerEngine.send_app_command: ["job_id", "topic", "cmd_data", "timeout"],
        ServerEngine.register_app_command: ["topic", "cmd_func"],
        ServerEngine.sync_clients_from_main_process: [],
        ServerEngine.get_client_from_name: ["client_name"],
        FedAdminServer.send_requests_and_get_reply_dict: ["requests", "timeout_secs"],
        WFCommServer.client_is_active: ["client_name", "reason", "fl_ctx"],  # site_watch: the returned site is live
    }
    for call, arguments in calls.items():
        names = [p for p in inspect.signature(call).parameters if p not in ("self", "args", "kwargs")]
        assert names[: len(arguments)] == arguments, (call.__qualname__, names)
    source = inspect.getsource(ServerEngine.__init__)
    assert "self.run_processes" in source and "self.exception_run_processes" in source


def test_flares_start_job_message_is_the_one_a_rejoin_sends():
    """A rejoin builds the start-job message itself (FLARE's call waits only 20 s for the answer): the message
    FLARE builds, and the site's handler of it, must still be made of the same topic and headers."""
    built = inspect.getsource(ServerEngine.start_client_job)
    read = inspect.getsource(StartJobProcessor.process)
    for part in ("RequestHeader.JOB_ID", "RequestHeader.JOB_META", "ShareableHeader.RESOURCE_RESERVE_TOKEN"):
        assert part in built and part in read, part
    assert "TrainingTopic.START_JOB" in built and StartJobProcessor().get_topics() == [TrainingTopic.START_JOB]


def test_a_site_app_is_found_by_name_or_through_all_sites():
    assert site_app(_job({"server_app": ["server"], "site_app": ["site-1", "site-2"]}), "site-2") == "site_app"
    assert site_app(_job({"app": ["@ALL"]}), "site-9") == "app"
    assert site_app(_job({"app": ["server", "site-1"]}), "site-2") == ""


def _engine(participants: dict[str, Client], failed: bool = False) -> SimpleNamespace:
    return SimpleNamespace(run_processes={"j1": {RunProcessKey.PARTICIPANTS: participants}},
                           exception_run_processes={"j1": {}} if failed else {},
                           job_runner=SimpleNamespace(running_jobs={}))


def test_only_a_job_whose_server_process_runs_unfailed_and_lists_the_site_is_rejoined():
    old = {"t-old": Client("site-2", "t-old"), "t-1": Client("site-1", "t-1")}
    assert jobs_listing(_engine(old), "site-2") == ["j1"]
    assert jobs_listing(_engine(old), "site-3") == []
    assert jobs_listing(_engine(old, failed=True), "site-2") == []
    engine = _engine(old)
    engine.run_processes.clear()
    assert jobs_listing(engine, "site-2") == []


def test_the_new_token_replaces_the_old_one_among_the_participants():
    participants = {"t-old": Client("site-2", "t-old"), "t-1": Client("site-1", "t-1")}
    rejoin = Rejoin(_engine(participants), "j1", "site-2", first_heartbeat=None, log=print)  # type: ignore[arg-type]
    rejoin._replace_participant(Client("site-2", "t-new"))
    assert {token: c.name for token, c in participants.items()} == {"t-1": "site-1", "t-new": "site-2"}


def test_returns_name_the_round_a_site_was_back_at_and_the_rounds_it_missed():
    rounds = [{"round": n, "sites": sites} for n, sites in
              enumerate([["a", "b"], ["a"], ["a"], ["a", "b"], ["a"], ["a", "b"]], start=1)]
    assert site_returns(rounds) == {"b": [{"back_at_round": 4, "missed": [2, 3]},
                                          {"back_at_round": 6, "missed": [5]}]}
    assert site_returns(rounds[:3]) == {}
