"""FLARE's simulator (`python -m nvflare.private.fed.app.simulator.simulator`, same arguments), with the race that
can start one simulated site as another closed.

FLARE 2.9's simulator starts each site's worker process from a thread of its own, all sharing one `build_ctx` dict:
each thread writes its site's name into `build_ctx["client_name"]` and then sends the dict to its worker, which
becomes the site named there. Two threads that reach that step together (their connection polls tick on the same
1 s clock, and a loaded machine stretches the window) send the same name: on a 2-core machine running the test
suite with 4 workers, site-2's worker started as site-1, trained on site-1's data and sent it under site-2's
token, and the round's average came out wrong without any error (round 1 [1.306, -2.018] for the reference run's
[1.354, -2.023]). Here the shared dict keeps `client_name` per thread, so each worker gets the name its own
thread wrote; nothing else of FLARE's changes. The simulator's own process (forked on Linux; on a platform whose
`multiprocessing` spawns, it imports this module as `__mp_main__`) runs the client threads, and logs
SITE_NAMES_KEPT in the simulation's `server/log.txt` when the change is in place there.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import sys
import threading
from typing import Any

from nvflare.private.fed.app.simulator import simulator_runner
from nvflare.private.fed.app.simulator.simulator import define_simulator_parser, run_simulator
from nvflare.private.fed.app.utils import version_check

CLIENT_NAME = "client_name"
SITE_NAMES_KEPT = "each simulated site's start-up keeps its own site name (federation_tools.flare_simulator)"


class PerThreadClientName(dict[str, Any]):
    """A dict whose `client_name` entry is the calling thread's own: read, written, copied and pickled (what a
    thread sends to its site's worker) as that thread last wrote it, or as it was when the dict was made."""

    def __init__(self, values: dict[str, Any]):
        super().__init__(values)
        self._names = threading.local()

    def __setitem__(self, key: str, value: Any) -> None:
        if key == CLIENT_NAME:
            self._names.value = value
        super().__setitem__(key, value)  # for a thread that never wrote it: the last value written, as FLARE's

    def __getitem__(self, key: str) -> Any:
        if key == CLIENT_NAME and hasattr(self._names, "value"):
            return self._names.value
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def snapshot(self) -> dict[str, Any]:
        """A plain dict as this thread sees it."""
        return {key: self[key] for key in self}

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (self.snapshot(),)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(self.snapshot(), memo)


def close_client_name_race() -> None:
    """Give every client runner of FLARE's simulator a per-thread `client_name` (see the module's docstring)."""
    runner = simulator_runner.SimulatorClientRunner
    if getattr(runner, "_per_thread_client_name", False):
        return
    original = runner.__init__

    def __init__(self: Any, server_custom_folder: Any, args: Any, clients: Any, client_config: Any,
                 deploy_args: Any, build_ctx: dict[str, Any]) -> None:
        original(self, server_custom_folder, args, clients, client_config, deploy_args,
                 PerThreadClientName(build_ctx))
        self.logger.info(SITE_NAMES_KEPT)

    runner.__init__ = __init__
    runner._per_thread_client_name = True


def main(argv: list[str] | None = None) -> int:
    """FLARE's simulator command (same arguments and exit status), with the race closed."""
    if sys.platform == "darwin":  # as FLARE's own command does there
        multiprocessing.set_start_method("spawn")
    close_client_name_race()
    version_check()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    define_simulator_parser(parser)
    return int(run_simulator(parser.parse_args(argv)) or 0)


if __name__ == "__mp_main__":  # the simulator's process, where multiprocessing spawns it: it imports this module
    close_client_name_race()
if __name__ == "__main__":
    sys.exit(main())
