"""A site ending the jobs the server no longer runs is not taken for dead while FLARE keeps it from its heartbeat.

After a server restart every site still has the job processes of the jobs the server was running. The server's
answer to a site's heartbeat names them (`ABORT_JOBS`); FLARE 2.9's client then ends them on its heartbeat thread
(`Communicator` -> `_clean_up_runs` -> `JobExecutor.abort_app`), waiting up to 10 s for each to end
(`JobExecutor._terminate_job`'s `max_wait`) before it sends the next heartbeat. A job process still syncing with
its vanished server job does not end on the abort (FLARE's `ClientRunner.init_run` loops until its own 60 s sync
timeout), so a site with two interrupted jobs sends no heartbeat for about 30 s. With the 20 s heartbeat timeout
our kits set (`provisioning.policy.SERVER_HEARTBEAT_TIMEOUT_S`, to notice a dead site quickly) the server then logs
out every site at once, and the job submitted meanwhile fails to start ("no replies") or loses every site ("client
dead"): 2 of 4 full test-suite runs on 2 cores failed a restart test so.

This wrapper of the server's heartbeat handler, installed by `server_app.recovery.JobRecovery` at start-up, answers
for that time: when its answer tells a site to end `n` jobs, the site's last-heard time is moved `n` x
`ORPHAN_END_WAIT_S` ahead, so the heartbeat timeout counts from when FLARE lets the site speak again. A site that
really dies meanwhile is noticed that much later, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nvflare.fuel.f3.cellnet.defs import CellChannelTopic
from nvflare.fuel.f3.message import Message
from nvflare.private.defs import CellMessageHeaderKeys

from server_app.cell_handlers import Handler, current_handler, install

ORPHAN_END_WAIT_S = 10.0
"""How long FLARE's client waits for one aborted job process to end before its next heartbeat (`max_wait` of
`JobExecutor._terminate_job`; tests/server/test_heartbeat_grace.py fails when FLARE changes it)."""


def allow_for_orphan_cleanup(server: Any, log: Callable[[str], None]) -> None:
    """Wrap `server`'s (FLARE's FederatedServer) heartbeat handler as the module says."""
    install(server, CellChannelTopic.HEART_BEAT,
            granting_grace(current_handler(server, CellChannelTopic.HEART_BEAT, server.client_heartbeat),
                           server.client_manager.clients, log))


def granting_grace(handler: Handler, clients: dict[str, Any], log: Callable[[str], None]) -> Handler:
    """`handler`, then: a reply that tells the site to end jobs moves the site's `last_connect_time` (looked up by
    the heartbeat's token in `clients`, FLARE's ClientManager's) ahead by the time FLARE will take ending them."""
    def heartbeat(request: Message) -> Message:
        reply = handler(request)
        ending = reply.get_header(CellMessageHeaderKeys.ABORT_JOBS) if reply is not None else None
        token = request.get_header(CellMessageHeaderKeys.TOKEN)
        client = clients.get(token) if token else None
        if ending and client is not None:
            grace = ORPHAN_END_WAIT_S * len(ending)
            client.last_connect_time = max(client.last_connect_time, time.time() + grace)
            log(f"{client.name} is told to end {len(ending)} job(s) the server no longer runs "
                f"({', '.join(ending)}); FLARE holds its next heartbeat until they have ended: allowing {grace:.0f} s")
        return reply

    return heartbeat
