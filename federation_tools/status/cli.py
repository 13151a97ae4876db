"""`fl-job status`: the federation as the study lead sees it, printed, or served as a page with /metrics.

    fl-job status --admin-kit KIT [--json]
    fl-job status --admin-kit KIT --serve [--port 8443] [--host 127.0.0.1] [--allow-remote]

The page's token is kept in the admin kit (`local/status_token`, readable by its owner only); the command prints the
link at start. The page asks the server through the admin's own FLARE API session, so it shows what this admin may
see and needs no port of ours on the server.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from federation_tools.status.snapshot import StudyStatusSource

DEFAULT_PORT = 8443
TOKEN_FILE = "status_token"


def run(args: argparse.Namespace, username: str) -> int:
    """`fl-job status`: one read printed (or as JSON), or the page served until Ctrl-C."""
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    from federation_tools.status.snapshot import StudyStatusSource, admin_server

    kit = Path(args.admin_kit).resolve()
    try:
        session = new_secure_session(username, str(kit), timeout=args.connect_timeout)
    except (ConnectionError, TimeoutError) as exc:
        print(f"fl-job status: {exc} (the server's address is in {kit / 'startup' / 'fed_admin.json'})",
              file=sys.stderr)
        return 1
    source = StudyStatusSource(session, admin_server(kit))
    try:
        if args.serve:
            return _serve(args, kit, source)
        status = source()
    finally:
        source.link.close_own()
        session.close()
    if args.json:
        print(json.dumps(status.to_json(), indent=1))
        return 0
    print(f"server {status.server}: {status.server_status}; sites connected: {', '.join(status.connected) or 'none'}")
    for job in status.jobs:
        p = job.progress
        done = f"round {p.completed_rounds}/{p.num_rounds}" if p else ""
        print(f"  {job.job_id}  {job.kind or '-':<20} {job.status:<22} {done}")
    return 1 if status.problem else 0


def _serve(args: argparse.Namespace, kit: Path, source: StudyStatusSource) -> int:
    from federation_tools.status.metrics import study_metrics
    from federation_tools.status.snapshot import StudyStatus
    from fl_runtime.status_server import StatusServerError, bind, load_or_create_token, page_url, status_app

    token = load_or_create_token(kit / "local" / TOKEN_FILE)
    app = status_app("federation_tools.status", "study_status.html", source, StudyStatus.to_json, study_metrics,
                     token)
    try:
        server = bind(app, args.host, args.port, args.allow_remote)
    except StatusServerError as exc:
        print(f"fl-job status: {exc}", file=sys.stderr)
        return 1
    print(f"study status page at {page_url(server, token)} (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--admin-kit", required=True, help="the admin's startup kit folder")
    parser.add_argument("--connect-timeout", type=float, default=30.0)
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.add_argument("--serve", action="store_true", help="serve the read-only page and /metrics")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (loopback unless --allow-remote)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to serve on (0: any free port)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow an address other than loopback (put the page behind a TLS reverse proxy)")
