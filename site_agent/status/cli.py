"""`site-agent status`: the site's status for site IT and the privacy officer, printed, or served as a page.

    site-agent status --kit KIT [--json]
    site-agent status --kit KIT --serve [--port 8442] [--host 127.0.0.1] [--allow-remote]

The page's token is kept in the kit (`local/status_token`, readable by the service account only) so that a restart
keeps the link and a Prometheus scrape job's `authorization` working; the command prints the link at start.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fl_runtime.status_server import add_serve_options

if TYPE_CHECKING:
    from werkzeug.serving import BaseWSGIServer

DEFAULT_PORT = 8442
TOKEN_FILE = "status_token"


def open_page(kit_dir: Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
              allow_remote: bool = False) -> tuple[BaseWSGIServer, str]:
    """The kit's page bound to host:port (not serving yet: call `serve_forever`) and its link with the token;
    StatusServerError when the address is refused or taken, KitError for a bad kit."""
    from fl_runtime.status_server import bind, load_or_create_token, page_url, status_app
    from site_agent.status.metrics import site_metrics
    from site_agent.status.snapshot import SiteStatus, SiteStatusSource

    source = SiteStatusSource(Path(kit_dir))
    token = load_or_create_token(source.kit.root / "local" / TOKEN_FILE)
    app = status_app("site_agent.status", "site_status.html", source, SiteStatus.to_json, site_metrics, token)
    server = bind(app, host, port, allow_remote)
    return server, f"site {source.kit.site_name}: status page at {page_url(server, token)}"


def _run(args: argparse.Namespace) -> int:
    """`site-agent status`: the page when `--serve`, else one status read, as JSON or as a few lines."""
    from site_agent.kit.startup import KitError

    try:
        if args.serve:
            from fl_runtime.status_server import serve

            return serve(lambda: open_page(Path(args.kit), args.host, args.port, args.allow_remote),
                         "site-agent status")
        from site_agent.status.snapshot import SiteStatusSource

        status = SiteStatusSource(Path(args.kit))()
    except KitError as exc:
        print(f"site-agent status: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(status.to_json(), indent=1))
        return 0
    c = status.connection
    print(f"site {status.site} (agent {status.agent_version}); server {c.server}: {c.server_status} "
          f"{'' if c.rtt_ms is None else f'in {c.rtt_ms} ms '}; client "
          f"{'pid ' + str(c.client_pid) if c.client_pid else 'not running'}; certificate until "
          f"{c.certificate_expires}")
    for job in status.jobs[:10]:
        print(f"  {job.job_id}  {job.kind:<20} {job.state:<8} round {job.round if job.round is not None else '-'}"
              f"  {job.results_sent} results, {job.bytes_sent} bytes sent{', masked' if job.masked else ''}")
    b = status.budget
    print(f"privacy budget: epsilon {b.epsilon:.4g} of {b.budget_epsilon}, delta {b.delta:.3g} of {b.budget_delta}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("status", help="the site's status (connection, jobs, what left, budget, policy, "
                                                  "audit, data); --serve serves it as a page with /metrics")
    parser.add_argument("--kit", required=True, help="folder of this site's startup kit")
    add_serve_options(parser, DEFAULT_PORT)
    parser.set_defaults(func=_run)
