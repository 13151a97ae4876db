"""The kits' warm job launcher (fl_runtime.job_launcher) with real processes: a job forked from the warm process runs
FLARE's command line as `__main__` with the job's environment, in a session of its own, with the modules imported
ahead; FLARE's return-code mapping, poll, wait and terminate hold; jobs one after another and at once fork from the
one warm process; a dead warm process, a changed environment or a job with a custom folder gets FLARE's own launch,
and the log says why; the jobs of a warm process that dies still end their handles.

The worker module here is a stand-in for FLARE's (FLARE's own needs a running parent to talk to): it records what it
saw and exits with the code it is given. The federation test runs FLARE's real worker through the launcher."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from nvflare.apis.event_type import EventType
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.job_launcher_spec import JobProcessArgs, JobReturnCode
from nvflare.apis.workspace import Workspace

from fl_runtime.job_launcher import WarmClientJobLauncher, job_modules
from fl_runtime.warm_job import READY

WORKER = """
import json, os, sys, time
if __name__ == "__main__":  # as FLARE's worker modules: imported ahead, they do nothing
    options = dict(item.split("=") for item in sys.argv[sys.argv.index("--set") + 1:])
    time.sleep(float(options["sleep"]))
    with open(options["out"], "w") as out:
        json.dump({"argv": sys.argv, "pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
                   "token": os.environ.get("NVFLARE_JOB_AUTH_TOKEN"), "ahead": "launcher_marker" in sys.modules,
                   "drivers": "nvflare.fuel.f3.drivers.aio_http_driver" in sys.modules,
                   "title": open("/proc/self/cmdline").read()}, out)
    sys.exit(int(options["rc"]))
"""


class StandInLauncher(WarmClientJobLauncher):
    worker = "launcher_worker"


@pytest.fixture
def launcher(tmp_path, monkeypatch):
    """A launcher whose warm process imports `launcher_marker` ahead; its processes are ended by PID. Each test
    starts it (FLARE's SYSTEM_START) in its own phase: pytest changes the environment between phases."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "launcher_worker.py").write_text(WORKER)
    (modules / "launcher_marker.py").write_text("")
    (modules / "launcher_slow.py").write_text(f"import time\nopen({str(tmp_path / 'slow')!r}, 'w')\ntime.sleep(2)\n")
    monkeypatch.syspath_prepend(str(modules))  # the warm and the cold job process import from the parent's path
    launcher = StandInLauncher(preload=["launcher_marker"])
    yield launcher
    launcher.handle_event(EventType.SYSTEM_END, FLContext())
    for child in psutil.Process().children(recursive=True):
        child.kill()


def launch(launcher, tmp_path, job_id="job-1", rc=0, sleep=0.0):
    for folder in ("startup", "local"):  # what FLARE's Workspace asks of a kit
        (tmp_path / "ws" / folder).mkdir(parents=True, exist_ok=True)
    workspace = Workspace(str(tmp_path / "ws"), site_name="site-1")
    Path(workspace.get_app_config_dir(job_id)).mkdir(parents=True, exist_ok=True)
    fl_ctx = FLContext()
    fl_ctx.set_prop(FLContextKey.WORKSPACE_OBJECT, workspace, private=True, sticky=False)
    out = tmp_path / f"{job_id}.json"
    fl_ctx.set_prop(FLContextKey.JOB_PROCESS_ARGS, {
        JobProcessArgs.EXE_MODULE: ("-m", launcher.worker), JobProcessArgs.WORKSPACE: ("-m", str(tmp_path / "ws")),
        JobProcessArgs.JOB_ID: ("-n", job_id), JobProcessArgs.AUTH_TOKEN: ("-t", "secret-token"),
        JobProcessArgs.OPTIONS: ("--set", f"rc={rc} sleep={sleep} out={out}")}, private=True, sticky=False)
    return launcher.launch_job({"job_id": job_id}, fl_ctx), out


def start(launcher, capfd=None, timeout=20.0) -> int:
    """Start the launcher's warm process; with `capfd`, wait until it has imported its modules (its stderr line)."""
    launcher.handle_event(EventType.SYSTEM_START, FLContext())
    pid = warm_pid(launcher)
    deadline, err = time.monotonic() + timeout, ""
    while capfd and READY not in err:
        assert time.monotonic() < deadline, f"warm process {pid} not ready: {err}"
        time.sleep(0.05)
        err += capfd.readouterr().err
    return pid


def warm_pid(launcher, timeout=20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if launcher._warm is not None and launcher._warm.process.poll() is None:
            return int(launcher._warm.process.pid)
        time.sleep(0.05)
    raise AssertionError("no warm process")


def test_jobs_fork_from_the_one_warm_process_as_flares_command(launcher, tmp_path, caplog, capfd):
    warm = start(launcher, capfd)
    with caplog.at_level(logging.INFO):
        handle, out = launch(launcher, tmp_path)
        handle.wait()
        again, again_out = launch(launcher, tmp_path, "job-2")
        again.wait()

    seen = json.loads(out.read_text())
    assert handle.poll() == JobReturnCode.SUCCESS and again.poll() == JobReturnCode.SUCCESS
    assert seen["ppid"] == warm and seen["ahead"] and seen["drivers"] and seen["pid"] == handle.adapter.pid
    assert json.loads(again_out.read_text())["ppid"] == warm and warm_pid(launcher) == warm
    assert seen["argv"][0].endswith("launcher_worker.py") and seen["argv"][1:3] == ["-m", str(tmp_path / "ws")]
    assert seen["token"] == "secret-token"  # FLARE's credentials come as environment, never on the command line
    assert seen["title"].startswith(f"{sys.executable} -m launcher_worker -m ") and "secret-token" not in seen["title"]
    assert seen["cwd"] == os.getcwd()
    assert f"job job-1: forked from warm process {warm} as process {seen['pid']}" in caplog.text


@pytest.mark.parametrize(("rc", "expected"), [(1, JobReturnCode.EXECUTION_ERROR), (9, JobReturnCode.ABORTED),
                                              (3, JobReturnCode.EXECUTION_ERROR)])
def test_return_codes_map_as_flares(launcher, tmp_path, rc, expected):
    start(launcher)
    handle, _ = launch(launcher, tmp_path, rc=rc)
    handle.wait()

    assert handle.poll() == expected


def test_a_running_job_polls_unknown_and_terminate_kills_its_process_group(launcher, tmp_path):
    warm = start(launcher)
    handle, out = launch(launcher, tmp_path, sleep=60)

    assert handle.poll() == JobReturnCode.UNKNOWN
    job = handle.adapter.pid
    assert os.getsid(job) == job != warm  # a session of its own, as FLARE starts job processes
    handle.terminate()
    handle.wait()
    assert handle.poll() == JobReturnCode.EXECUTION_ERROR and not out.exists()
    assert warm_pid(launcher) == warm  # the warm process lives on for the next job


def test_a_dead_warm_process_gives_flares_own_launch_and_says_why(launcher, tmp_path, caplog):
    warm = start(launcher)
    os.kill(warm, signal.SIGKILL)
    launcher._warm.process.wait()
    with caplog.at_level(logging.INFO):
        handle, out = launch(launcher, tmp_path, rc=9)
        handle.wait()

    seen = json.loads(out.read_text())
    assert handle.poll() == JobReturnCode.ABORTED
    assert seen["pid"] != warm and not seen["ahead"] and seen["token"] == "secret-token"
    assert f"job job-1: FLARE's own launch, since the warm process {warm} exited with code -9" in caplog.text
    assert warm_pid(launcher) != warm  # the next job is warm again


def test_a_second_job_while_the_first_runs_forks_too_and_a_job_with_custom_code_gets_flares_launch(launcher, tmp_path,
                                                                                                 caplog, capfd):
    warm = start(launcher, capfd)
    with caplog.at_level(logging.INFO):
        first, _ = launch(launcher, tmp_path, "job-1", sleep=60)
        second, out = launch(launcher, tmp_path, "job-2")
        second.wait()
        first.terminate()
        first.wait()
        custom = Path(Workspace(str(tmp_path / "ws"), site_name="site-1").get_app_custom_dir("job-3"))
        custom.mkdir(parents=True)
        third, third_out = launch(launcher, tmp_path, "job-3")
        third.wait()

    seen = json.loads(out.read_text())
    assert seen["ahead"] and seen["ppid"] == warm and second.poll() == JobReturnCode.SUCCESS
    assert f"job job-3: FLARE's own launch, since the job has a custom code folder ({custom})" in caplog.text
    assert json.loads(third_out.read_text())["ppid"] == os.getpid() and warm_pid(launcher) == warm


def test_a_changed_environment_gives_flares_launch_and_a_new_warm_process_once_the_old_ones_jobs_end(
        launcher, tmp_path, caplog, monkeypatch):
    warm = start(launcher)
    running, _ = launch(launcher, tmp_path, "job-1", sleep=60)
    monkeypatch.setenv("SITE_PROXY", "http://proxy:3128")
    with caplog.at_level(logging.INFO):
        cold, out = launch(launcher, tmp_path, "job-2")
        cold.wait()

    assert json.loads(out.read_text())["ppid"] == os.getpid()
    assert "job job-2: FLARE's own launch, since the environment changed since it started (SITE_PROXY)" in caplog.text
    assert warm_pid(launcher) != warm  # the next job is warm again, with the new environment
    assert psutil.Process(warm).status() != psutil.STATUS_ZOMBIE  # the old one still serves job-1
    running.terminate()
    running.wait()
    psutil.Process(warm).wait(timeout=10)  # and ends once job-1 has


def test_the_jobs_of_a_warm_process_that_dies_still_end_their_handles_and_the_log_says_why(launcher, tmp_path,
                                                                                         caplog):
    warm = start(launcher)
    handle, _ = launch(launcher, tmp_path, sleep=60)
    os.kill(warm, signal.SIGKILL)  # the stand-in worker does not watch its parent as FLARE's does: it runs on
    time.sleep(0.5)
    assert handle.poll() == JobReturnCode.UNKNOWN
    with caplog.at_level(logging.INFO):
        os.kill(handle.adapter.pid, signal.SIGTERM)
        handle.wait()

    assert handle.poll() == JobReturnCode.EXECUTION_ERROR
    assert (f"job process {handle.adapter.pid} ended after its warm process {warm} (exit code -9); its own exit code "
            "was lost") in caplog.text
    assert warm_pid(launcher) != warm


def test_a_job_sent_while_the_warm_process_imports_waits_only_for_the_module_being_imported(tmp_path, launcher,
                                                                                           capfd):
    slow = StandInLauncher(preload=["launcher_slow", "launcher_marker"])
    warm = start(slow)
    while not (tmp_path / "slow").exists():
        time.sleep(0.05)
    handle, out = launch(slow, tmp_path)  # while launcher_slow sleeps in its import
    handle.wait()
    start(slow, capfd)  # the rest of the list after the fork
    later, later_out = launch(slow, tmp_path, "job-2")
    later.wait()
    slow.handle_event(EventType.SYSTEM_END, FLContext())

    assert handle.poll() == JobReturnCode.SUCCESS and not json.loads(out.read_text())["ahead"]
    assert json.loads(later_out.read_text())["ahead"] and json.loads(later_out.read_text())["ppid"] == warm


def test_an_idle_warm_process_ends_by_itself_when_its_socket_closes_as_the_parent_stops(launcher):
    start(launcher)
    warm = launcher._warm.process
    launcher.handle_event(EventType.SYSTEM_END, FLContext())

    assert warm.returncode == 0 and launcher._warm is None  # it ended, not killed (a dead parent closes it too)


def test_a_job_asks_the_warm_process_for_the_kit_modules_its_config_names(tmp_path):
    (tmp_path / "config_fed_client.json").write_text(json.dumps({"executors": [{"executor": {
        "path": "site_agent.tasks.fedavg_linear.LinearRegressionTask", "args": {"path": "/data/site-1"}}}],
        "components": [{"id": "clock", "path": "site_agent.tasks.transfers.TaskClock"}]}))
    kit = ["site_agent.tasks.segmentation", "site_agent.tasks.fedavg_linear", "site_agent.tasks.transfers"]

    assert job_modules(str(tmp_path), kit) == ["site_agent.tasks.fedavg_linear", "site_agent.tasks.transfers"]
    assert job_modules(str(tmp_path / "absent"), kit) == []
