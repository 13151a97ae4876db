"""The kits' job launcher: each FLARE job process starts from a warm process that imported torch, MONAI, FLARE's
job-process modules and our task modules before the job came, instead of a fresh Python that imports them after.

FLARE starts every job in a new `python -m <worker module> ...` (client: `worker_process`, server:
`runner_process`); on 2 cores, four of them importing torch and MONAI at once took most of the 8-12 s from submit to
the first task (bench/README.md, job start-up). `fl-provision` puts these launchers in every kit in place of FLARE's
`process_launcher` (`--flare-job-launcher` keeps FLARE's).

Each FLARE parent (a site's client, the server) keeps one warm process (`fl_contract.warm_job`), its own child in a
session of its own, started from FLARE's parent the way FLARE starts a job process (fork and exec of
`sys.executable`, never a fork of the multi-threaded parent). A launch hands the job's command line, environment and
working folder to it and it runs FLARE's worker module itself: the job process is still the parent's child, so
FLARE's own handle waits for it, kills its process group on terminate and maps its exit code (0, 1, 9) unchanged,
and the worker's watch of its parent process sees the FLARE parent. When that job ends a new warm process starts
(importing the modules of the classes the job used, of those the kit lists), so the next job is warm too; starting
it at once would put its imports on the cores the starting job needs. A job gets FLARE's own launch, and the parent's
log says why, when no warm process is alive (taken by a job still running, died, could not start), when its
environment, working folder or interpreter would differ from the job's, or when the job has a `custom/` folder: a
warm process never runs code a job brought.

Both sides use it and it imports no torch, so it sits in the contract package, the one package site and server share
(its FLARE imports are FLARE's job-launcher API only).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_constant import FLContextKey, JobConstants
from nvflare.apis.fl_context import FLContext
from nvflare.apis.job_launcher_spec import JobHandleSpec, JobReturnCode
from nvflare.apis.workspace import Workspace
from nvflare.app_common.job_launcher.process_launcher import ProcessHandle, ProcessJobLauncher
from nvflare.utils.job_launcher_utils import (
    add_custom_dir_to_path,
    generate_client_command,
    generate_server_command,
    get_credential_env,
)
from nvflare.utils.process_utils import ProcessAdapter

WARM_MODULE = "fl_contract.warm_job"
CLIENT_WORKER = "nvflare.private.fed.app.client.worker_process"
SERVER_WORKER = "nvflare.private.fed.app.server.runner_process"
PYTHONPATH = "PYTHONPATH"


class WarmProcess:
    """One warm process and the socket to it; it imports `preload` at once and waits for a job."""

    def __init__(self, preload: list[str]):
        ours, theirs = socket.socketpair()
        # FLARE's job environment: the parent's, with the parent's import path as PYTHONPATH
        self.env = {**os.environ, PYTHONPATH: os.pathsep.join(sys.path)}
        self.cwd = os.getcwd()
        try:
            self.process = subprocess.Popen([sys.executable, "-m", WARM_MODULE, "--fd", str(theirs.fileno())],
                                            pass_fds=(theirs.fileno(),), start_new_session=True, env=self.env)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.channel = ours
        try:
            self.channel.sendall(json.dumps({"preload": preload}).encode() + b"\n")
        except OSError:
            self.discard()
            raise

    def refusal(self, argv: list[str], env: dict[str, str], custom_dir: str, worker: str) -> str | None:
        """Why this process cannot run the job FLARE would start as `argv` with `env`, FLARE's environment for the
        job, credentials aside (None: it can)."""
        if (code := self.process.poll()) is not None:
            return f"the warm process {self.process.pid} exited with code {code}"
        if argv[:3] != [sys.executable, "-m", worker]:
            return f"the job's command {' '.join(argv[:3])!r} is not `{sys.executable} -m {worker}`"
        if os.path.exists(custom_dir):
            return f"the job has a custom code folder ({custom_dir})"
        if os.getcwd() != self.cwd:
            return f"the working folder changed from {self.cwd} to {os.getcwd()}"
        expected = {**self.env, PYTHONPATH: self.env[PYTHONPATH] + os.pathsep + custom_dir}
        changed = sorted(k for k in expected.keys() | env.keys() if expected.get(k) != env.get(k))
        return f"the environment changed since it started ({', '.join(changed)})" if changed else None

    def hand_over(self, argv: list[str], env: dict[str, str]) -> None:
        """Send the job; the process becomes it (raises OSError when the process is gone)."""
        try:
            self.channel.sendall(json.dumps({"argv": argv, "env": env, "cwd": self.cwd}).encode() + b"\n")
        finally:
            self.channel.close()

    def discard(self) -> None:
        """End an idle warm process (closing its socket ends it) and reap it."""
        self.channel.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class WarmJobHandle(ProcessHandle):
    """FLARE's process handle (same terminate, poll, wait and return-code mapping) that reports the job's end once."""

    def __init__(self, adapter: ProcessAdapter, ended: Callable[[], None]):
        super().__init__(process_adapter=adapter)
        self._ended: Callable[[], None] | None = ended

    def _report(self) -> None:
        ended, self._ended = self._ended, None
        if ended:
            ended()

    def poll(self) -> int:
        code: int = super().poll()
        if code != JobReturnCode.UNKNOWN:
            self._report()
        return code

    def wait(self) -> None:
        super().wait()
        self._report()


def job_modules(app_config_dir: str, candidates: list[str]) -> list[str]:
    """The modules of `candidates` (the kit's preload list) whose classes a job's app config names as component
    `path`s; all of `candidates` when the config names none of them or cannot be read."""
    named: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("path"), str):
                named.add(node["path"].rpartition(".")[0])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for config in Path(app_config_dir).glob("config_fed_*.json"):
        try:
            walk(json.loads(config.read_text()))
        except (OSError, ValueError):
            return list(candidates)
    used = [module for module in candidates if module in named]
    return used or list(candidates)


class _WarmJobLauncher(ProcessJobLauncher):
    """FLARE's process launcher, handing jobs to a warm process when one can take them."""

    worker = ""

    def __init__(self, preload: list[str] | None = None):
        super().__init__()
        self.logger = logging.getLogger(type(self).__name__)
        self.preload = list(preload or [])
        self._next_preload = self.preload
        self._warm: WarmProcess | None = None
        self._absent = "no warm process started yet"
        self._stopped = False
        self._lock = threading.Lock()

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        super().handle_event(event_type, fl_ctx)
        if event_type == EventType.SYSTEM_START:
            self._ensure_warm()
        elif event_type == EventType.SYSTEM_END:
            with self._lock:
                self._stopped = True
                warm, self._warm = self._warm, None
            if warm:
                warm.discard()

    def _ensure_warm(self) -> None:
        """Start a warm process unless one is alive (or the parent is stopping); a failure is logged and the next
        jobs get FLARE's own launch."""
        with self._lock:
            if self._stopped or (self._warm and self._warm.process.poll() is None):
                return
            try:
                self._warm = WarmProcess([self.worker, *self._next_preload])
                self._absent = ""
                self.logger.info(f"warm job process {self._warm.process.pid} started")
            except OSError as exc:
                self._warm, self._absent = None, f"the warm process could not start ({exc})"
                self.logger.warning(f"{self._absent}; jobs start as FLARE starts them")

    def launch_job(self, job_meta: dict[str, Any], fl_ctx: FLContext) -> JobHandleSpec:
        """The job with FLARE's command and environment, in the warm process when it can take it (it is then taken,
        whatever happens, so that no two jobs share one), else by FLARE's own launch; either handle starts the next
        warm process when the job ends."""
        workspace: Workspace = fl_ctx.get_prop(FLContextKey.WORKSPACE_OBJECT)
        job_id = job_meta.get(JobConstants.JOB_ID)
        custom_dir = workspace.get_app_custom_dir(job_id)
        argv = shlex.split(self.get_command(job_meta, fl_ctx), True)
        env = dict(os.environ)
        add_custom_dir_to_path(custom_dir, env)  # what FLARE's launcher gives the job process
        credentials = get_credential_env(fl_ctx.get_prop(FLContextKey.JOB_PROCESS_ARGS) or {})
        with self._lock:
            warm, self._warm = self._warm, None
            absent, self._absent = self._absent, f"the warm process was taken by job {job_id}, still running"
            self._next_preload = job_modules(workspace.get_app_config_dir(job_id), self.preload)
        refusal = warm.refusal(argv, env, custom_dir, self.worker) if warm else absent
        if warm and not refusal:
            try:
                warm.hand_over(argv, {**env, **credentials})
            except OSError as exc:
                refusal = f"the warm process {warm.process.pid} did not take the job ({exc})"
        if refusal:
            if warm:
                warm.discard()
            self.logger.warning(f"job {job_id}: FLARE's own launch, since {refusal}")
            handle = super().launch_job(job_meta, fl_ctx)
            return WarmJobHandle(handle.adapter, self._ensure_warm)
        assert warm is not None
        self.logger.info(f"job {job_id}: launched in warm process {warm.process.pid}")
        return WarmJobHandle(ProcessAdapter(process=warm.process), self._ensure_warm)


class WarmClientJobLauncher(_WarmJobLauncher):
    """A site kit's launcher: FLARE's `ClientProcessJobLauncher` command, run by a warm process."""

    worker = CLIENT_WORKER

    def get_command(self, job_meta: dict[str, Any], fl_ctx: FLContext) -> str:
        command: str = generate_client_command(fl_ctx)
        return command


class WarmServerJobLauncher(_WarmJobLauncher):
    """The server kit's launcher: FLARE's `ServerProcessJobLauncher` command, run by a warm process."""

    worker = SERVER_WORKER

    def get_command(self, job_meta: dict[str, Any], fl_ctx: FLContext) -> str:
        command: str = generate_server_command(fl_ctx)
        return command
