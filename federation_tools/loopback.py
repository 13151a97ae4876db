"""Run a provisioned federation's server and sites as local processes (demo, tests, a lead's dry run).

Processes are started the way the kits' `sub_start.sh` starts them, minus its restart loop and 5 s sleep, each in
its own process group with its log in the kit. `stop()` shuts the system down through the FLARE API, then
terminates every process we started and all their descendants (job workers) by PID, so nothing is left behind.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import psutil

from provisioning.provision import Federation
from site_agent.kit.processes import kill_processes, stop_process_tree
from site_agent.kit.service import SERVER_MODULE
from site_agent.kit.start import CLIENT_MODULE
from site_agent.kit.startup import certificate_organisation

if TYPE_CHECKING:
    from nvflare.fuel.flare_api.flare_api import Session

SERVER_STARTED = b"root - INFO - Server started"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for loopback federations in tests and the demo)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return cast(int, sock.getsockname()[1])  # an AF_INET address is (host, port)


@dataclass
class Participant:
    name: str
    kit: Path
    process: subprocess.Popen[bytes]
    log_path: Path


def _org_of(kit: Path) -> str:
    """The participant's org as its certificate says (FLARE's start scripts pass the same to the process)."""
    startup = kit / "startup"
    return certificate_organisation(startup / ("server.crt" if (startup / "server.crt").is_file() else "client.crt"))


class LoopbackFederation:
    def __init__(self, federation: Federation, python: str = sys.executable):
        self.federation = federation
        self.python = python
        self.participants: dict[str, Participant] = {}

    def _start(self, name: str, kit: Path, entry: tuple[str, ...], config: str, extra: list[str],
               prefix: tuple[str, ...] = ()) -> Participant:
        return self._run(name, kit, [*prefix, self.python, "-u", *entry, "-m", str(kit), "-s", config, "--set",
                                     "secure_train=true", f"org={_org_of(kit)}", "config_folder=config", *extra])

    def _run(self, name: str, kit: Path, command: list[str]) -> Participant:
        """Start `command` in the kit as participant `name`, its output appended to the kit's process.log."""
        if name in self.participants and self.participants[name].process.poll() is None:
            raise RuntimeError(f"{name} is already running (pid {self.participants[name].process.pid})")
        log_path = kit / "process.log"
        log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")  # names local files
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # umask 077: the job workspaces, logs, storage and checkpoints FLARE writes are the owner's only
        process = subprocess.Popen(command, cwd=kit, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   env=env, umask=0o077)
        log.close()
        participant = Participant(name, kit, process, log_path)
        self.participants[name] = participant
        return participant

    def start_server(self, timeout: float = 60.0, wait: bool = True,
                     entry: tuple[str, ...] = ("-m", SERVER_MODULE)) -> Participant:
        """Start the server and (with `wait`) return once its log says "Server started" (its admin server is up).

        Why wait: FLARE 2.9 answers in the moment after its port opens and before its context holds its
        configuration badly (a challenge answered without the server's certificate, seen once; a server that then
        failed every admin session, "invalid auth token signature", seen once: server_app.startup_signature now
        prevents that). `wait=False` is what sites and `fl-job submit` meet through a restart: the restart test runs
        that way. `entry` is what the interpreter runs (`python -u ENTRY ARGS`): FLARE's server module, or another
        program that takes the same arguments and runs it (a test's, to change how it starts)."""
        name = self.federation.server
        log_path = self.federation.kit(name) / "process.log"
        start = log_path.stat().st_size if log_path.is_file() else 0
        participant = self._start(name, self.federation.kit(name), entry, "fed_server.json", [])
        if not wait:
            return participant
        deadline = time.monotonic() + timeout
        with log_path.open("rb") as log:
            log.seek(start)
            seen = b""
            while SERVER_STARTED not in seen:
                self._raise_if_exited([name])
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the server did not log 'Server started' within {timeout:.0f} s; "
                                       f"see {log_path}")
                time.sleep(0.1)
                seen = seen[-len(SERVER_STARTED):] + log.read()  # only what the server wrote since
        return participant

    def start_site(self, name: str, kit: Path | None = None, prefix: tuple[str, ...] = ()) -> Participant:
        """Start a site from its kit (another kit may be given, e.g. to test a foreign certificate); `prefix` runs
        it through another command (`ip netns exec NS`: a site in a network namespace, behind an emulated link)."""
        return self._start(name, kit or self.federation.kit(name), ("-m", CLIENT_MODULE), "fed_client.json",
                           [f"uid={name}"], prefix)

    def bring_up(self, admin: str) -> None:
        """Start the server and every site that is not running now (all at first; later, the ones killed), then
        wait until every site has joined."""
        for name in (self.federation.server, *self.federation.sites):
            participant = self.participants.get(name)
            if participant is None or participant.process.poll() is not None:
                self.start_server() if name == self.federation.server else self.start_site(name)
        self.wait_for_sites(admin, self.federation.sites)

    def session(self, admin: str, timeout: float = 30.0) -> Session:
        """An admin session; a login that fails while the server is still starting (FLARE 2.9 can answer its
        identity challenge before its credentials are loaded) is tried again for up to `timeout`."""
        from nvflare.fuel.flare_api.flare_api import new_secure_session

        deadline = time.monotonic() + timeout
        while True:
            try:
                return new_secure_session(admin, str(self.federation.kit(admin)),
                                          timeout=max(1.0, deadline - time.monotonic()))
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def wait_for_sites(self, admin: str, sites: list[str], timeout: float = 60.0) -> None:
        """Wait until the server lists every site as connected; raise naming the missing ones."""
        deadline = time.monotonic() + timeout
        session = self.session(admin, timeout=timeout)
        try:
            connected: set[str] = set()
            while time.monotonic() < deadline:
                connected = {c.name for c in session.get_connected_client_list()}
                if set(sites) <= connected:
                    return
                self._raise_if_exited([self.federation.server, *sites])
                time.sleep(1.0)
        finally:
            session.close()
        raise TimeoutError(f"sites {sorted(set(sites) - connected)} did not register with the server within "
                           f"{timeout:.0f} s; see process.log in their kits and run `site-agent check --kit KIT`")

    def _raise_if_exited(self, names: list[str]) -> None:
        """Fail fast when one of the participants waited for has exited (one another test stopped is not)."""
        for p in (self.participants[name] for name in names if name in self.participants):
            if p.process.poll() is not None:
                raise RuntimeError(f"{p.name} exited with code {p.process.returncode}; see {p.log_path}")

    def _process_tree(self, name: str) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.participants[name].process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, admin: str | None = None, grace: float = 20.0) -> None:
        """Shut down via the FLARE API when possible, then make sure every process we started is gone."""
        trees = {name: self._process_tree(name) for name in self.participants}
        if admin and any(p.process.poll() is None for p in self.participants.values()):
            try:
                session = self.session(admin, timeout=5.0)
                try:
                    session.shutdown("all", wait=False)
                finally:
                    session.close()
                psutil.wait_procs([proc for tree in trees.values() for proc in tree], timeout=grace)
            except Exception:  # the system may be half up; the kill below still cleans up
                pass
        for name, tree in trees.items():
            self.stop_participant(name, tree)

    def stop_participant(self, name: str, processes: list[psutil.Process] | None = None, grace: float = 5.0) -> None:
        """Terminate one participant and all its descendants by PID (SIGTERM, then SIGKILL after `grace`)."""
        participant = self.participants[name]
        processes = processes if processes is not None else self._process_tree(name)
        stop_process_tree(participant.process.pid, processes, grace)
        participant.process.wait(timeout=5.0)

    def kill_participant(self, name: str) -> None:
        """Kill one participant and its job processes at once (SIGKILL, by PID), as a crash or power loss would."""
        kill_processes(self._process_tree(name))
        self.participants[name].process.wait(timeout=10.0)

    def kill_job_processes(self, name: str) -> int:
        """Kill the job worker processes of one participant (SIGKILL), leaving its client or server up; returns how
        many were killed."""
        workers = [p for p in self._process_tree(name) if _is_job_worker(p)]
        kill_processes(workers)
        return len(workers)

    @contextmanager
    def frozen(self, *names: str) -> Iterator[None]:
        """The sites frozen for the duration: each site's client and job processes stopped (SIGSTOP), so nothing is
        sent or answered, then resumed (SIGCONT) with the state they had. Their TCP connections stay up and no
        reconnect path runs, so this is a hung site, not a network outage (an emulated link's outage is).
        Unlike a kill, the site's running job goes on afterwards."""
        frozen = [process for name in names for process in self._process_tree(name)]
        for process in frozen:
            process.suspend()
        try:
            yield
        finally:
            for process in frozen:
                try:
                    process.resume()
                except psutil.NoSuchProcess:
                    pass

    def __enter__(self) -> LoopbackFederation:
        return self

    def __exit__(self, *exc: object) -> None:
        admins = list(self.federation.admins)
        self.stop(admins[0] if admins else None)


def _is_job_worker(process: psutil.Process) -> bool:
    """FLARE runs each job in a worker process of its own (client: worker_process, server: runner_process); a job
    run by the kits' warm process has that command line as its title, one string (fl_runtime.warm_job)."""
    try:
        return any(word.endswith(("worker_process", "runner_process"))
                   for part in process.cmdline() for word in part.split())
    except psutil.NoSuchProcess:
        return False

