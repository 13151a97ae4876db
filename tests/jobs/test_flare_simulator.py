"""FLARE's simulator starts each site's worker from a thread of its own, through one shared `build_ctx`: two threads
that write their site's name and then send it in the wrong order start two workers as the same site (seen under the
suite's load: site-2 trained on site-1's data). The simulator runner (`fl-job simulate`) closes it; these tests
play FLARE's own sequence on FLARE's own class with the threads forced into that order."""

from __future__ import annotations

import argparse
import copy
import inspect
import pickle
import threading
from pathlib import Path
from typing import Any

import pytest
from nvflare.private.fed.app.simulator import simulator_runner
from nvflare.private.fed.app.simulator.simulator_runner import SimulatorClientRunner

from federation_tools.flare_simulator import close_client_name_race

BUILD_CTX = "build_ctx"


def _sent_names(runner: SimulatorClientRunner) -> dict[str, str]:
    """Two site threads doing what `do_one_task` does (write the site's name, then send the dict to the site's
    worker), the second writing between the first's write and send: the name each worker is sent."""
    written, sent = threading.Event(), {}

    def start_site(name: str, wait_before_send: threading.Event | None, after_write: threading.Event | None) -> None:
        runner.build_ctx["client_name"] = name
        if after_write:
            after_write.set()
        if wait_before_send:
            wait_before_send.wait(10)
        sent[name] = pickle.loads(pickle.dumps({BUILD_CTX: runner.build_ctx}))[BUILD_CTX]["client_name"]

    first_may_send = threading.Event()
    first = threading.Thread(target=start_site, args=("site-1", first_may_send, written))
    first.start()
    written.wait(10)
    second = threading.Thread(target=start_site, args=("site-2", None, None))
    second.start()
    second.join(10)
    first_may_send.set()
    first.join(10)
    return sent


def _runner(tmp_path: Path) -> SimulatorClientRunner:
    args = argparse.Namespace(workspace=str(tmp_path), set=[], threads=2)
    build_ctx: dict[str, Any] = {"client_name": "site-1", "sp_end_point": "localhost:0:0"}
    return SimulatorClientRunner(str(tmp_path / "custom"), args, [], {}, argparse.Namespace(), build_ctx)


def test_flare_alone_sends_two_sites_the_same_name(tmp_path):
    """The race as FLARE has it: if this fails, FLARE fixed it and federation_tools.flare_simulator can go."""
    assert _sent_names(_runner(tmp_path)) == {"site-1": "site-2", "site-2": "site-2"}


@pytest.fixture
def unpatched_afterwards(monkeypatch):
    """FLARE's class as it was once the test ends, whatever the test patched into it."""
    monkeypatch.setattr(SimulatorClientRunner, "__init__", SimulatorClientRunner.__init__)
    monkeypatch.setattr(SimulatorClientRunner, "_per_thread_client_name", False, raising=False)


def test_the_runner_sends_each_site_its_own_name(tmp_path, unpatched_afterwards):
    close_client_name_race()
    close_client_name_race()  # once only: a second call wraps nothing again
    runner = _runner(tmp_path)

    assert _sent_names(runner) == {"site-1": "site-1", "site-2": "site-2"}
    assert runner.build_ctx.get("sp_end_point") == "localhost:0:0" and "client_name" in runner.build_ctx


def test_flare_writes_and_sends_the_name_as_this_workaround_assumes():
    """`do_one_task` still writes the name into the shared dict and sends that dict: what the workaround changes."""
    source = inspect.getsource(simulator_runner.SimulatorClientRunner.do_one_task)
    assert 'self.build_ctx["client_name"] = client.client_name' in source
    assert "SimulatorConstants.BUILD_CTX: self.build_ctx" in source


def test_a_copy_holds_the_name_of_the_thread_that_made_it(tmp_path, unpatched_afterwards):
    close_client_name_race()
    runner = _runner(tmp_path)
    runner.build_ctx["client_name"] = "site-3"

    for copied in (pickle.loads(pickle.dumps(runner.build_ctx)), copy.deepcopy(runner.build_ctx)):
        assert type(copied) is dict and copied == {"client_name": "site-3", "sp_end_point": "localhost:0:0"}
