"""FLARE's server with a long start-up window, for tests: its admin server starts `DELAY_S` seconds late.

    python tests/harness/slow_start.py DELAY_S <the arguments of nvflare.private.fed.app.server.server_train>

In FLARE 2.9 the server's cell listens before its admin server starts and before its signing identity is in its
context (`server_app.startup_signature`). On an idle machine that window lasts milliseconds, so a restart test meets
it by chance; on a loaded hospital server, with sites knocking as it starts, it is longer. This runs FLARE's own
server start-up unchanged except that the admin server's creation waits first, so that the sites' heartbeats are
answered inside the window every time. HarnessFederation.start_server(admin_delay_s=...)
(tests/harness/federation.py) runs it by its path.
"""

from __future__ import annotations

import runpy
import sys
import time
from typing import Any

from nvflare.private.fed.app import utils

from site_agent.kit.service import SERVER_MODULE


def main() -> None:
    delay_s = float(sys.argv.pop(1))
    create_admin_server = utils.create_admin_server

    def late(*args: Any, **kwargs: Any) -> Any:
        time.sleep(delay_s)
        return create_admin_server(*args, **kwargs)

    utils.create_admin_server = late  # server_train imports it from here when run below
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
