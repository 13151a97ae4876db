"""The heartbeat grace for a site ending the jobs a restarted server no longer runs (server_app.heartbeat_grace):
the FLARE 2.9 internals it answers for, and FLARE's own dead-client sweep keeping such a site.

A FLARE upgrade that changes how long its client blocks its heartbeat fails here, by name. The whole path runs on the
provisioned federation in tests/federation/test_kind_faults.py (a server killed with two jobs running, a job
submitted right after its restart).
"""

from __future__ import annotations

import inspect
import time
from types import SimpleNamespace

from nvflare.apis.client import Client
from nvflare.fuel.f3.message import Message
from nvflare.private.defs import CellMessageHeaderKeys
from nvflare.private.fed.client.client_executor import JobExecutor
from nvflare.private.fed.client.communicator import Communicator
from nvflare.private.fed.server.fed_server import FederatedServer

from server_app.heartbeat_grace import ORPHAN_END_WAIT_S, granting_grace

TIMEOUT_S = 20.0


def test_flares_client_ends_the_servers_orphaned_jobs_on_its_heartbeat_thread_waiting_10_s_for_each():
    heartbeat = inspect.getsource(Communicator.send_heartbeat)
    assert heartbeat.index("self._clean_up_runs(engine, abort_jobs)") < heartbeat.index("time.sleep(2)")
    assert "CellMessageHeaderKeys.ABORT_JOBS" in heartbeat
    assert "engine.abort_app(job, heartbeat_cleanup=True)" in inspect.getsource(Communicator._clean_up_runs)
    assert f"max_wait = {ORPHAN_END_WAIT_S}" in inspect.getsource(JobExecutor._terminate_job)
    assert "client.last_connect_time < time.time() - self.heart_beat_timeout" in \
        inspect.getsource(FederatedServer.remove_dead_clients)


def _sweep(clients: dict[str, Client], after_s: float) -> list[str]:
    """FLARE's own dead-client sweep, `after_s` seconds from now: the names it logs out."""
    removed: list[str] = []
    server = SimpleNamespace(
        client_manager=SimpleNamespace(get_clients=lambda: dict(clients)), heart_beat_timeout=TIMEOUT_S,
        logout_client=lambda token: removed.append(clients.pop(token).name) or SimpleNamespace(name="x"),
        logger=SimpleNamespace(info=print, debug=print))
    real_time = time.time
    try:
        time.time = lambda: real_time() + after_s  # type: ignore[assignment]
        FederatedServer.remove_dead_clients(server)  # type: ignore[arg-type]
    finally:
        time.time = real_time  # type: ignore[assignment]
    return removed


def _heartbeat(token: str, reply_headers: dict[str, object], clients: dict[str, Client], said: list[str]) -> None:
    def flare(request: Message) -> Message:
        clients[token].last_connect_time = time.time()  # FLARE's ClientManager.heartbeat
        return Message(headers=dict(reply_headers))
    granting_grace(flare, clients, said.append)(Message(headers={CellMessageHeaderKeys.TOKEN: token}))


def test_a_site_told_to_end_two_jobs_outlives_the_timeout_until_flare_lets_it_speak_again():
    clients = {"t1": Client("site-1", "t1"), "t2": Client("site-2", "t2")}
    said: list[str] = []
    _heartbeat("t1", {CellMessageHeaderKeys.ABORT_JOBS: ["job-a", "job-b"]}, clients, said)
    _heartbeat("t2", {}, clients, said)
    assert said == ["site-1 is told to end 2 job(s) the server no longer runs (job-a, job-b); FLARE holds its next "
                    "heartbeat until they have ended: allowing 20 s"]
    # 30 s without a heartbeat: what FLARE's client takes for two jobs (2 x 10 s) and its 10 s heartbeat interval
    assert _sweep(clients, after_s=30) == ["site-2"]
    assert _sweep(clients, after_s=2 * ORPHAN_END_WAIT_S + TIMEOUT_S + 1) == ["site-1"]  # then it counts again


def test_a_heartbeat_of_an_unknown_token_or_refused_passes_through_unchanged():
    clients = {"t1": Client("site-1", "t1")}
    said: list[str] = []
    refused = Message(headers={CellMessageHeaderKeys.ABORT_JOBS: ["job-a"]})
    reply = granting_grace(lambda request: refused, clients, said.append)(
        Message(headers={CellMessageHeaderKeys.TOKEN: "other"}))
    assert reply is refused and said == [] and _sweep(clients, after_s=TIMEOUT_S + 1) == ["site-1"]
