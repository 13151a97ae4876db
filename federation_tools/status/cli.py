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

from fl_runtime.status_server import add_serve_options, serve

if TYPE_CHECKING:
    from werkzeug.serving import BaseWSGIServer

    from federation_tools.status.snapshot import StudyStatusSource

DEFAULT_PORT = 8443
TOKEN_FILE = "status_token"


def run(args: argparse.Namespace, username: str) -> int:
    """`fl-job status`: one read printed (or as JSON), or the page served until Ctrl-C."""
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    from federation_tools.status.snapshot import StudyStatusSource, admin_settings

    kit = Path(args.admin_kit).resolve()
    try:
        session = new_secure_session(username, str(kit), timeout=args.connect_timeout)
    except (ConnectionError, TimeoutError) as exc:
        print(f"fl-job status: {exc} (the server's address is in {kit / 'startup' / 'fed_admin.json'})",
              file=sys.stderr)
        return 1
    server, downloads = admin_settings(kit)
    source = StudyStatusSource(session, server, downloads)
    try:
        if args.serve:
            return serve(lambda: _open(args, kit, source), "fl-job status")
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


def _open(args: argparse.Namespace, kit: Path, source: StudyStatusSource) -> tuple[BaseWSGIServer, str]:
    from federation_tools.status.job_report import add_job_reports
    from federation_tools.status.metrics import study_metrics
    from federation_tools.status.snapshot import StudyStatus
    from fl_runtime.status_server import bind, load_or_create_token, page_url, status_app

    token = load_or_create_token(kit / "local" / TOKEN_FILE)
    app = status_app("federation_tools.status", "study_status.html", source, StudyStatus.to_json, study_metrics,
                     token)
    if source.downloads is not None:
        add_job_reports(app, source, source.downloads)
    server = bind(app, args.host, args.port, args.allow_remote)
    return server, f"study status page at {page_url(server, token)}"


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--admin-kit", required=True, help="the admin's startup kit folder")
    parser.add_argument("--connect-timeout", type=float, default=30.0)
    add_serve_options(parser, DEFAULT_PORT)
