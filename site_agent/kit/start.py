"""`site-agent start`: start the site's FLARE client, prove within seconds that the server let it join, and
supervise it in the foreground (what site IT runs, and what the service unit runs).

FLARE's own start script starts a client that, refused by the server (certificate from another CA, expired or not
yet valid, a site name its certificate does not carry), runs on silently and never joins. Here:
1. the fast preflight rows run first (certificate, site policy, server: the server must answer after mutual TLS);
2. the client starts the way the kit's `sub_start.sh` starts it, in its own process group, its output relayed;
3. if its log does not say "Successfully registered client" within the timeout, the client is stopped (its
   process group and every process it started, by PID), the reason and the fix go to the console and to
   `<kit>/site-agent.log`, and the command exits non-zero;
4. once registered it stays in the foreground: SIGTERM/SIGINT stop the client (exit 0), a client that dies ends
   the command with the client's status so that a service manager restarts it; an admin's `restart` restarts the
   client here, an admin's `shutdown` ends the command with 0. Under systemd (Type=notify) it reports READY once
   registered and feeds the watchdog while the client runs.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import psutil

from site_agent.kit.preflight import FAIL, CheckResult, check_certificate, check_policy, check_server, format_table
from site_agent.kit.processes import stop_process_tree
from site_agent.kit.startup import KitError, SiteKit, certificate_organisation

if TYPE_CHECKING:
    from werkzeug.serving import BaseWSGIServer

CLIENT_MODULE = "nvflare.private.fed.app.client.client_train"
REGISTERED = "Successfully registered client:"  # FLARE 2.9, nvflare/private/fed/client/fed_client_base.py
REJECTED = b"registration rejected: "  # FLARE 2.9, nvflare/private/fed/authenticator.py: the server's reason follows
LOG_NAME = "site-agent.log"

EXIT_REFUSED = 78  # EX_CONFIG: the kit or the server's answer needs a person; the service unit does not restart
EXIT_UNAVAILABLE = 69  # EX_UNAVAILABLE: the server is unreachable or slow; the service unit retries
DEFAULT_TIMEOUT_S = 10.0
STOP_GRACE_S = 10.0
_POLL_S = 0.5


class SiteLog:
    """What the command decides, on the console (stderr) and appended to `<kit>/site-agent.log`."""

    def __init__(self, path: Path):
        self.path = path

    def __call__(self, message: str) -> None:
        print(f"site-agent: {message}", file=sys.stderr, flush=True)
        stamp = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        with os.fdopen(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a") as log:
            log.writelines(f"{stamp} {line}\n" for line in message.splitlines())


def notify(message: str) -> None:
    """Tell systemd (Type=notify) how the site is doing; nothing when not run by systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):  # abstract socket namespace
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(message.encode(), address)
        except OSError:
            pass


class Watchdog:
    """Feeds systemd's watchdog (WatchdogSec) at half its interval while the client runs."""

    def __init__(self) -> None:
        usec = os.environ.get("WATCHDOG_USEC", "")
        self.interval = int(usec) / 2e6 if usec.isdigit() else 0.0
        self.last = 0.0

    def feed(self) -> None:
        if self.interval and time.monotonic() - self.last >= self.interval:
            notify("WATCHDOG=1")
            self.last = time.monotonic()


class StopRequest:
    """SIGTERM / SIGINT handler: the loops below see the request within one poll and stop the client."""

    def __init__(self) -> None:
        self.signum = 0
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


class FlareClient:
    """FLARE's client process for one kit, started as the kit's start script starts it (minus its restart loop and
    `local/custom` on the Python path), in its own process group, with its output relayed to ours."""

    def __init__(self, kit: SiteKit, org: str):
        command = [sys.executable, "-u", "-m", CLIENT_MODULE, "-m", str(kit.root), "-s", "fed_client.json",
                   "--set", "secure_train=true", f"uid={kit.site_name}", f"org={org}", "config_folder=config"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "4")}
        if kit.proxy:  # gRPC's own proxy settings: the connection to the server is tunnelled with CONNECT
            env.update(https_proxy=kit.proxy, grpc_proxy=kit.proxy)
        # umask 077: the job workspaces and logs FLARE writes are the service account's only, whatever the umask
        # site-agent was started with
        self.process = subprocess.Popen(command, cwd=kit.root, env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                        umask=0o077)
        self.registered = threading.Event()
        self.rejection = ""  # the server's reason when it refused to register the site
        self.last_lines: collections.deque[str] = collections.deque(maxlen=8)
        self._marker = f"{REGISTERED}{kit.site_name} ".encode()
        self._descendants: dict[int, psutil.Process] = {}
        threading.Thread(target=self._relay, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _relay(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if self._marker in line:
                self.registered.set()
            elif REJECTED in line and not self.rejection:
                self.rejection = line.split(REJECTED, 1)[1].decode(errors="replace").strip()
            self.last_lines.append(line.decode(errors="replace").rstrip())
            try:
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
            except (OSError, ValueError):  # our console went away: keep draining, or the client blocks on a full pipe
                pass

    def track(self) -> None:
        """Remember the client's descendants: job workers run in their own sessions and outlive a crashed client."""
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for child in children:
            self._descendants.setdefault(child.pid, child)

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM to the client's process group and to every process it started, SIGKILL to what is left after
        `grace`."""
        self.track()
        try:
            client = [psutil.Process(self.pid)]
        except psutil.NoSuchProcess:
            client = []
        stop_process_tree(self.pid, [*client, *self._descendants.values()], grace)
        self.process.wait()


@dataclass(frozen=True)
class Refusal:
    """Why the site did not join: printed and logged, then the command exits with `code`."""

    reason: str
    fix: str
    code: int


def fast_checks(kit_dir: Path) -> list[CheckResult]:
    """The preflight rows that decide whether the site can join (the data, device and disk rows do not).

    The certificate and server rows take a second and name every refusal the site can see, so a refused kit stops
    here at once. The policy row imports the site tasks (torch, ~0.5 GB, seconds): it runs in a child process, so
    the supervisor does not hold that memory for as long as the site runs.
    """
    try:
        kit = SiteKit.open(kit_dir)
    except KitError as exc:
        return [CheckResult("startup kit", FAIL, str(exc), "point --kit at the unpacked startup kit")]
    results = [check_certificate(kit), check_server(kit)]
    if _refusal_from(results) is None:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            results.insert(1, pool.submit(check_policy, kit).result())
    return results


def _refusal_from(results: list[CheckResult]) -> Refusal | None:
    """The first failing row decides (certificate before server: a bad certificate explains the server's refusal)."""
    failed = next((r for r in results if r.status == FAIL), None)
    if failed is None:
        return None
    return Refusal(f"{failed.name}: {failed.detail}", failed.fix,
                   EXIT_UNAVAILABLE if failed.transient else EXIT_REFUSED)


def _diagnose(kit: SiteKit, client: FlareClient, waited: float) -> Refusal:
    """Why the client did not register: the certificate and server rows name a refusal the site can see; otherwise
    the server took the certificate but not the site, and the client's last lines say what it saw."""
    refusal = _refusal_from([check_certificate(kit), check_server(kit)])
    if refusal:
        return refusal
    if client.rejection:
        return Refusal(f"the server refused to register {kit.site_name}: {client.rejection}",
                       f"ask the federation lead: the server admits only the sites it lists (adding {kit.site_name} "
                       "is a provisioning step, docs/admin-guide.md 'Adding a site'), and a disabled site stays "
                       "refused until an admin enables it", EXIT_REFUSED)
    returncode = client.process.poll()
    seen = "\n  ".join(client.last_lines) or "(no output)"
    if returncode is not None:
        return Refusal(f"the FLARE client exited with code {returncode} before registering; its last lines:\n  {seen}",
                       f"fix what these lines name (the whole log: {kit.root / 'log.txt'})", EXIT_UNAVAILABLE)
    return Refusal(f"the server accepted this site's certificate but did not register {kit.site_name} within "
                   f"{waited:.0f} s; the client's last lines:\n  {seen}",
                   "ask the federation lead whether the server's log names this site; if the server is busy, start "
                   "again with a longer --timeout", EXIT_UNAVAILABLE)


def exit_status(returncode: int) -> int:
    """The client's status as a shell reports it (a signal N gives 128+N); never 0 for a client nobody stopped."""
    if returncode < 0:
        return 128 - returncode
    return returncode or EXIT_UNAVAILABLE


def start_site(kit_dir: Path, timeout: float = DEFAULT_TIMEOUT_S, preflight: bool = True,
               status_port: int | None = None) -> int:
    """Start, watch and supervise the site's client; returns the exit status. `preflight=False` leaves the refusal
    to the registration watch alone (tests use it to show that the watch names a refusal by itself). With
    `status_port` the site's status page is served on 127.0.0.1 meanwhile (a page that cannot be served is logged;
    the site starts all the same)."""
    kit_dir = Path(kit_dir).resolve()
    log = SiteLog(kit_dir / LOG_NAME) if kit_dir.is_dir() else SiteLog(Path(os.devnull))
    stop = StopRequest()
    page = _status_page(kit_dir, status_port, log) if status_port is not None else None
    try:
        return _start(kit_dir, timeout, preflight, log, stop)
    finally:
        stop.restore()
        if page is not None:
            page.shutdown()


def _status_page(kit_dir: Path, port: int, log: SiteLog) -> BaseWSGIServer | None:
    """The site's status page served from a thread of this supervisor (site_agent.status): it reads the kit's
    records and probes the server at most twice a minute, so it costs the site's client nothing."""
    from fl_runtime.status_server import StatusServerError
    from site_agent.status.cli import open_page

    try:
        server, link = open_page(kit_dir, port=port)
    except (StatusServerError, KitError) as exc:
        log(f"no status page: {exc}")
        return None
    threading.Thread(target=server.serve_forever, name="status-page", daemon=True).start()
    log(link)
    return server


def _start(kit_dir: Path, timeout: float, preflight: bool, log: SiteLog, stop: StopRequest) -> int:
    if preflight:
        results = fast_checks(kit_dir)
        log(f"preflight for {kit_dir}:\n{format_table(results)}")
        refusal = _refusal_from(results)
        if refusal:
            return _give_up(refusal, log, "did not start the FLARE client")
    try:
        kit = SiteKit.open(kit_dir)
        org = certificate_organisation(kit.certificate)
    except KitError as exc:
        return _give_up(Refusal(str(exc), "ask the federation lead for this site's startup kit", EXIT_REFUSED), log,
                        "did not start the FLARE client")
    while not stop.signum:
        client = FlareClient(kit, org)
        status = _join(client, kit, timeout, log, stop)
        if status is None:
            status = _supervise(client, kit, log, stop)
        if status is not None:
            return status
    return 0


def _join(client: FlareClient, kit: SiteKit, timeout: float, log: SiteLog, stop: StopRequest) -> int | None:
    """Wait for the server to register the site: None once it has, else the exit status (the client stopped)."""
    log(f"started the FLARE client for {kit.site_name} (pid {client.pid}); waiting up to {timeout:.0f} s for the "
        f"server at {kit.server_host}:{kit.server_port} to register it")
    started = time.monotonic()
    watchdog = Watchdog()
    while not client.registered.wait(_POLL_S):
        watchdog.feed()
        if stop.signum:
            return _stop(client, stop, log)
        if client.rejection or client.process.poll() is not None or time.monotonic() - started > timeout:
            refusal = _diagnose(kit, client, time.monotonic() - started)
            client.stop()
            return _give_up(refusal, log, f"stopped the FLARE client (pid {client.pid})")
    log(f"{kit.site_name} registered with the server after {time.monotonic() - started:.1f} s; supervising "
        f"the client (pid {client.pid})")
    notify(f"READY=1\nSTATUS={kit.site_name} registered with {kit.server_host}:{kit.server_port}")
    return None


def _supervise(client: FlareClient, kit: SiteKit, log: SiteLog, stop: StopRequest) -> int | None:
    """Run until the client ends or we are asked to stop: the exit status, or None when an admin restarted it."""
    watchdog = Watchdog()
    while client.process.poll() is None:
        if stop.signum:
            return _stop(client, stop, log)
        watchdog.feed()
        client.track()
        time.sleep(_POLL_S)
    returncode = client.process.returncode
    client.stop()  # the job workers of a crashed client
    if (kit.root / "restart.fl").exists():
        log(f"an admin restarted {kit.site_name}: starting the FLARE client again")
        return None
    if returncode == 0 and (kit.root / "shutdown.fl").exists():
        log(f"an admin shut {kit.site_name} down; exiting")
        return 0
    status = exit_status(returncode)
    log(f"the FLARE client (pid {client.pid}) ended with code {returncode}; exiting with {status} so that the "
        f"service manager restarts the site (its log: {kit.root / 'log.txt'})")
    return status


def _stop(client: FlareClient, stop: StopRequest, log: SiteLog) -> int:
    notify("STOPPING=1")
    log(f"{signal.Signals(stop.signum).name}: stopping the FLARE client (pid {client.pid})")
    client.stop()
    log("stopped")
    return 0


def _give_up(refusal: Refusal, log: SiteLog, action: str) -> int:
    log(f"the site cannot join the federation: {refusal.reason}\nwhat to do: {refusal.fix}\n"
        f"{action}; exit code {refusal.code}")
    return refusal.code


def _run(args: argparse.Namespace) -> int:
    return start_site(Path(args.kit), args.timeout, status_port=args.status_port)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("start", help="start the site's FLARE client, check that it joins, supervise it")
    parser.add_argument("--kit", required=True, help="folder of this site's startup kit")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds the server has to register the site before the start counts as refused")
    parser.add_argument("--status-port", type=int, metavar="PORT",
                        help="also serve the site's status page on 127.0.0.1:PORT (site-agent status --serve)")
    parser.set_defaults(func=_run)
