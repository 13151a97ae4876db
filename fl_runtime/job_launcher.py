"""The kits' job launcher: each FLARE job process is forked from a warm process that imported torch, MONAI, FLARE's
job-process modules and our task modules once, instead of a fresh Python that imports them after the job came.

FLARE starts every job in a new `python -m <worker module> ...` (client: `worker_process`, server:
`runner_process`); on 2 cores, four of them importing torch and MONAI at once took most of the 8-12 s from submit to
the first task (bench/README.md, job start-up), and the imports were most of the test suite's CPU. `fl-provision`
puts these launchers in every kit in place of FLARE's `process_launcher` (`--flare-job-launcher` keeps FLARE's).

Each FLARE parent (a site's client, the server) keeps one warm process (`fl_runtime.warm_job`, a fork server), its
own child in a session of its own, started from FLARE's parent the way FLARE starts a job process (fork and exec of
`sys.executable`, never a fork of the multi-threaded parent). A launch sends it the job's command line, environment,
working folder and the kit modules the job names; it forks a child that runs FLARE's worker module itself, in a
session of its own, and reports the child's exit code back. FLARE's own handle sees that child as it sees a process
it started: it polls and waits on it, kills its process group on terminate and maps its exit code (0, 1, 9)
unchanged. Any number of jobs fork from the one warm process, one after another or at once. A job gets FLARE's own
launch, and the parent's log says why, when no warm process is alive (died, could not start, did not answer), when
its environment, working folder or interpreter would differ from the job's (a new warm process then follows, and
the old one ends once its jobs have), or when the job has a `custom/` folder: a warm process never runs code a job
brought. A warm process that dies takes its running jobs with it (each job's FLARE worker stops when its parent
goes); their ends are then seen by their pids, and the log says their exit codes were lost.

Both sides use it and it imports no torch, so it sits in the contract package, the one package site and server share
(its FLARE imports are FLARE's job-launcher API only).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
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

from fl_runtime.warm_job import Channel

WARM_MODULE = "fl_runtime.warm_job"
CLIENT_WORKER = "nvflare.private.fed.app.client.worker_process"
SERVER_WORKER = "nvflare.private.fed.app.server.runner_process"
PYTHONPATH = "PYTHONPATH"


CELL_DRIVERS = tuple(f"nvflare.fuel.f3.drivers.{name}" for name in (
    "aio_grpc_driver", "aio_http_driver", "aio_tcp_driver", "grpc_driver", "tcp_driver", "file_driver"))
"""The connection drivers a job process's cell loads as it starts (FLARE's driver manager imports every module of
nvflare.fuel.f3.drivers), imported ahead by every warm process: the http driver's aiohttp is 0.2-0.5 CPU-s of each
job process's start, the one large import a forked job still had left (the others, FLARE's and our components'
modules not named in the job's config, take 0.05 CPU-s together)."""

FORK_REPLY_TIMEOUT_S = 120.0
"""How long a launch waits for the warm process's pid: it may be importing one large module ahead first (MONAI
takes 7 s alone on an idle 2-core machine). A warm process that does not answer is ended; the job gets FLARE's
launch."""

ORPHAN_POLL_S = 1.0
"""How often the jobs of a warm process that died are looked for by pid, until each has ended."""


class ForkedJob:
    """A job process the warm process forked, as FLARE's `ProcessAdapter` uses a `Popen`: pid, poll and wait."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()

    def end(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        self._ended.wait(timeout)
        return self.returncode


class WarmProcess:
    """One warm process (a fork server), the socket to it and the jobs it forked; it imports `preload` at once."""

    def __init__(self, preload: list[str]):
        """Start the process as FLARE starts a job's (a fresh `sys.executable` in a session of its own, never a fork of
        this multi-threaded parent) with one end of a socket pair, send it `preload` and read its answers on a thread
        of their own: a job's end must reach its handle while no launch is waiting."""
        self.logger = logging.getLogger(type(self).__name__)
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
        self.channel = Channel(ours)
        self.jobs: dict[int, ForkedJob] = {}
        self.retired = False
        self._replies: queue.Queue[ForkedJob | str | None] = queue.Queue()
        self._request_lock = threading.Lock()
        self._jobs_lock = threading.Lock()
        try:
            self.channel.send({"preload": preload})
        except OSError:
            self.discard()
            raise
        threading.Thread(target=self._read, name=f"warm-process-{self.process.pid}", daemon=True).start()

    def staleness(self, env: dict[str, str], custom_dir: str) -> str | None:
        """Why no job can fork from this process any more (it exited, or its working folder or environment is no
        longer the parent's; `env` is FLARE's environment for a job, credentials aside), or None."""
        if (code := self.process.poll()) is not None:
            return f"the warm process {self.process.pid} exited with code {code}"
        if os.getcwd() != self.cwd:
            return f"the working folder changed from {self.cwd} to {os.getcwd()}"
        expected = {**self.env, PYTHONPATH: self.env[PYTHONPATH] + os.pathsep + custom_dir}
        changed = sorted(k for k in expected.keys() | env.keys() if expected.get(k) != env.get(k))
        return f"the environment changed since it started ({', '.join(changed)})" if changed else None

    @staticmethod
    def refusal(argv: list[str], custom_dir: str, worker: str) -> str | None:
        """Why a job FLARE would start as `argv` may not fork from a warm process at all (None: it may)."""
        if argv[:3] != [sys.executable, "-m", worker]:
            return f"the job's command {' '.join(argv[:3])!r} is not `{sys.executable} -m {worker}`"
        if os.path.exists(custom_dir):
            return f"the job has a custom code folder ({custom_dir})"
        return None

    def fork(self, job_id: str, argv: list[str], env: dict[str, str], modules: list[str]) -> ForkedJob:
        """The job's process, forked by the warm process (raises OSError when it is gone, fails or does not
        answer within FORK_REPLY_TIMEOUT_S)."""
        with self._request_lock:
            self.channel.send({"job": job_id, "argv": argv, "env": env, "cwd": self.cwd, "modules": modules})
            try:
                reply = self._replies.get(timeout=FORK_REPLY_TIMEOUT_S)
            except queue.Empty:
                raise TimeoutError(f"no answer within {FORK_REPLY_TIMEOUT_S:.0f} s") from None
        if reply is None:
            raise ConnectionError("it closed its socket")
        if isinstance(reply, str):
            raise OSError(reply)
        return reply

    def _read(self) -> None:
        """The warm process's answers: a forked job's pid (registered here, before its end can be read), a failed
        fork, an ended job's exit code; at the socket's end, the jobs still running are watched by pid."""
        try:
            while (message := self.channel.read()) is not None:
                if "exited" in message:
                    with self._jobs_lock:
                        job = self.jobs.pop(message["exited"], None)
                        last = self.retired and not self.jobs
                    if job:
                        job.end(message["code"])
                    if last:
                        _shut(self.channel.sock)  # retired and idle: the socket's end ends it
                elif "pid" in message:
                    with self._jobs_lock:
                        job = self.jobs[message["pid"]] = ForkedJob(message["pid"])
                    self._replies.put(job)
                else:
                    self._replies.put(str(message["error"]))
        except (OSError, ValueError):  # a broken socket or line: the process is of no more use
            _shut(self.channel.sock)
        self._replies.put(None)
        self.process.wait()
        self.channel.sock.close()
        self._watch_orphans()

    def _watch_orphans(self) -> None:
        """End the handles of jobs the warm process forked but can no longer report (it died): each once its pid
        is gone, with code 1, FLARE's execution error."""
        while True:
            with self._jobs_lock:
                running = list(self.jobs.values())
            for job in running:
                if not _alive(job.pid):
                    with self._jobs_lock:
                        del self.jobs[job.pid]
                    self.logger.warning(f"job process {job.pid} ended after its warm process {self.process.pid} "
                                        f"(exit code {self.process.returncode}); its own exit code was lost")
                    job.end(1)
            if not running:
                return
            time.sleep(ORPHAN_POLL_S)

    def retire(self) -> None:
        """No more jobs: the process ends now if idle, else once its last job has ended."""
        with self._jobs_lock:
            self.retired = True
            idle = not self.jobs
        if idle:
            self.discard()

    def discard(self) -> None:
        """End the warm process (its socket's end ends it; its running jobs stop as their parent goes) and reap it."""
        _shut(self.channel.sock)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.channel.sock.close()


def _shut(sock: socket.socket) -> None:
    """Shut the socket both ways (the warm process reads its end), whatever state it is in."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        status: str = psutil.Process(pid).status()
        return bool(status != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


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
    `path`s, in the kit's order (none when the config cannot be read: the job then imports what it needs itself)."""
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
            return []
    return [module for module in candidates if module in named]


class _WarmJobLauncher(ProcessJobLauncher):
    """FLARE's process launcher, forking jobs from a warm process when it can take them."""

    worker = ""

    def __init__(self, preload: list[str] | None = None):
        super().__init__()
        self.logger = logging.getLogger(type(self).__name__)
        self.preload = list(preload or [])
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
                self._warm = WarmProcess([self.worker, *CELL_DRIVERS, *self.preload])
                self._absent = ""
                self.logger.info(f"warm job process {self._warm.process.pid} started")
            except OSError as exc:
                self._warm, self._absent = None, f"the warm process could not start ({exc})"
                self.logger.warning(f"{self._absent}; jobs start as FLARE starts them")

    def _give_up(self, warm: WarmProcess, why: str) -> None:
        """Take `warm` out of use; the next job's end starts a new one (starting it at once would put its imports
        on the cores the job that found it unusable needs)."""
        with self._lock:
            if self._warm is warm:
                self._warm, self._absent = None, why

    def launch_job(self, job_meta: dict[str, Any], fl_ctx: FLContext) -> JobHandleSpec:
        """The job with FLARE's command and environment, forked from the warm process when it can take it, else by
        FLARE's own launch; either handle starts a new warm process when the job ends, should the old one be gone."""
        workspace: Workspace = fl_ctx.get_prop(FLContextKey.WORKSPACE_OBJECT)
        job_id = job_meta.get(JobConstants.JOB_ID)
        custom_dir = workspace.get_app_custom_dir(job_id)
        argv = shlex.split(self.get_command(job_meta, fl_ctx), True)
        env = dict(os.environ)
        add_custom_dir_to_path(custom_dir, env)  # what FLARE's launcher gives the job process
        credentials = get_credential_env(fl_ctx.get_prop(FLContextKey.JOB_PROCESS_ARGS) or {})
        with self._lock:
            warm, absent = self._warm, self._absent
        stale = warm.staleness(env, custom_dir) if warm else None
        refusal = (stale or warm.refusal(argv, custom_dir, self.worker)) if warm else absent
        job: ForkedJob | None = None
        if warm and stale:
            self._give_up(warm, stale)
            warm.retire()
        elif warm and not refusal:
            try:
                job = warm.fork(str(job_id), argv, {**env, **credentials},
                                job_modules(workspace.get_app_config_dir(job_id), self.preload))
            except OSError as exc:
                refusal = f"the warm process {warm.process.pid} did not fork the job ({exc})"
                self._give_up(warm, refusal)
                warm.discard()
        if warm is None or job is None:
            self.logger.warning(f"job {job_id}: FLARE's own launch, since {refusal}")
            handle = super().launch_job(job_meta, fl_ctx)
            return WarmJobHandle(handle.adapter, self._ensure_warm)
        self.logger.info(f"job {job_id}: forked from warm process {warm.process.pid} as process {job.pid}")
        return WarmJobHandle(ProcessAdapter(process=job), self._ensure_warm)


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
