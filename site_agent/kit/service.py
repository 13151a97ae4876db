"""`site-agent service`: the systemd unit that runs a startup kit under the hospital's service manager.

For a site kit the unit runs `site-agent start` (Type=notify: the site counts as started once the server has
registered it). A refused kit exits 78 and is not restarted (it needs a person); a crashed client, an unreachable
server or a hung supervisor (watchdog) are restarted. For the server's kit (the federation lead's) the unit runs
FLARE's server the way its start script does, and restarts it when it fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from site_agent.kit.start import EXIT_REFUSED, STOP_GRACE_S
from site_agent.kit.startup import KitError, SiteKit, certificate_organisation

SERVER_MODULE = "nvflare.private.fed.app.server.server_train"
RESTART_SEC = 15
WATCHDOG_SEC = 60
START_SLACK_S = 60  # the preflight imports the site tasks (torch) and asks the server: seconds on a busy machine
SERVICE_TIMEOUT_S = 30.0  # registration timeout in the unit: more than an interactive start, for a booting server


def _unit(description: str, user: str, kit: Path, bin_dir: Path, service: list[str]) -> str:
    lines = ["[Unit]", f"Description={description}", "After=network-online.target", "Wants=network-online.target", "",
             "[Service]", f"User={user}", f"WorkingDirectory={kit}",
             f"Environment=PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin", "Environment=MALLOC_ARENA_MAX=4",
             *service,
             "# keys, job workspaces and logs readable by the service account only",
             "UMask=0077", "NoNewPrivileges=yes", "",
             "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def site_unit(kit: SiteKit, user: str, bin_dir: Path, timeout: float = SERVICE_TIMEOUT_S,
              status_port: int | None = None) -> str:
    """The site's unit: `site-agent start` supervises FLARE's client and tells systemd when the site has joined;
    with `status_port` it also serves the site's status page on 127.0.0.1 (its link goes to the journal)."""
    page = f" --status-port {status_port}" if status_port is not None else ""
    return _unit(f"FLARE site {kit.site_name} (hospital-fl site agent)", user, kit.root, bin_dir, [
        f"ExecStart={bin_dir / 'site-agent'} start --kit {kit.root} --timeout {timeout:g}{page}",
        "Type=notify",
        "NotifyAccess=main",
        f"# ready once the server registered the site: preflight and imports, then at most {timeout:g} s",
        f"TimeoutStartSec={timeout + START_SLACK_S:g}",
        f"WatchdogSec={WATCHDOG_SEC}",
        f"# exit {EXIT_REFUSED}: the server refused the kit, a person must act; anything else is retried",
        "Restart=on-failure",
        f"RestartSec={RESTART_SEC}",
        f"RestartPreventExitStatus={EXIT_REFUSED}",
        "# SIGTERM to site-agent, which stops the client and its job workers; SIGKILL to what is left",
        "KillMode=mixed",
        f"TimeoutStopSec={2 * STOP_GRACE_S + 10:g}",
    ])


def server_unit(kit_dir: Path, user: str, bin_dir: Path) -> str:
    """The server's unit: FLARE's server as its start script runs it, without the script's restart loop."""
    org = certificate_organisation(kit_dir / "startup" / "server.crt")
    return _unit(f"FLARE server ({kit_dir.name}, hospital-fl)", user, kit_dir, bin_dir, [
        f"ExecStart={bin_dir / 'python'} -u -m {SERVER_MODULE} -m {kit_dir} -s fed_server.json "
        f"--set secure_train=true org={org} config_folder=config",
        "Type=simple",
        "# an admin's `shutdown all` exits 0 and stays down; a crash is restarted, and sites reconnect by themselves",
        "Restart=on-failure",
        f"RestartSec={RESTART_SEC}",
        "TimeoutStopSec=30",
    ])


def unit_for(kit_dir: Path, user: str | None = None, timeout: float = SERVICE_TIMEOUT_S,
             bin_dir: Path | None = None, status_port: int | None = None) -> tuple[str, str]:
    """(unit file name, unit text) for a site kit or the server's kit, run by `user` (default: the kit's owner)
    with the programs of `bin_dir` (default: this environment's, so the unit runs the agent that wrote it)."""
    kit_dir = Path(kit_dir).resolve()
    user = user or kit_dir.owner()
    bin_dir = bin_dir or Path(sys.executable).parent
    if (kit_dir / "startup" / "fed_server.json").is_file():
        return f"fl-server-{kit_dir.name}.service", server_unit(kit_dir, user, bin_dir)
    kit = SiteKit.open(kit_dir)
    return f"fl-{kit.site_name}.service", site_unit(kit, user, bin_dir, timeout, status_port)


def _run(args: argparse.Namespace) -> int:
    try:
        name, text = unit_for(Path(args.kit), args.user, args.timeout, status_port=args.status_port)
    except KitError as exc:
        print(f"site-agent service: {exc}", file=sys.stderr)
        return 1
    if not args.out:
        print(text, end="")
        return 0
    Path(args.out).write_text(text)
    print(f"wrote {args.out}; to install it:\n"
          f"  sudo cp {args.out} /etc/systemd/system/{name}\n"
          f"  sudo systemctl daemon-reload && sudo systemctl enable --now {name}\n"
          f"  journalctl -u {name} -f     # the site's output, and why it stopped", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("service", help="write the systemd unit that runs this kit (a site, or the server)")
    parser.add_argument("--kit", required=True, help="a site's startup kit, or the server's")
    parser.add_argument("--user", help="account the service runs as (default: the kit folder's owner)")
    parser.add_argument("--timeout", type=float, default=SERVICE_TIMEOUT_S,
                        help="seconds the server has to register the site at each start (site kits)")
    parser.add_argument("--out", help="write the unit to this file (default: print it)")
    parser.add_argument("--status-port", type=int, metavar="PORT",
                        help="the site's unit also serves its status page on 127.0.0.1:PORT (site kits)")
    parser.set_defaults(func=_run)
