"""A read-only status page with its Prometheus metrics, served on this machine to the people who run a kit.

The site's page (`site-agent status --serve`) and the study lead's (`fl-job status --serve`) are both Flask apps
made here, so that both get the same guards:

- every route answers 401 without the page's token: a `?token=` link (printed at start; the page then keeps it in
  an HttpOnly, SameSite=Strict cookie and drops it from the address bar) or `Authorization: Bearer TOKEN` (what a
  Prometheus scrape job sends);
- Jinja2 escapes every value, and the Content-Security-Policy allows no script, no frame and no fetch at all, so a
  job name or a refusal reason that holds markup is shown as text;
- the server binds to a loopback address unless the caller allows another one (`allow_remote`);
- a page load only reads what the kit records: it changes nothing and takes no lock a job waits on.

werkzeug's threaded server runs the app: no HTTP handling of our own.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import io
import ipaddress
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:  # Flask and werkzeug load when a page is made: the commands' --help stays fast
    from flask import Flask
    from werkzeug.serving import BaseWSGIServer
    from werkzeug.wrappers import Response as BaseResponse

TOKEN_COOKIE = "status_token"
REFRESH_S = 5
"""The page reloads itself this often (a meta refresh: the page runs no script)."""

_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                               "frame-ancestors 'none'; form-action 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


T = TypeVar("T")


class Reused(Generic[T]):
    """`read()`'s value, read again only once it is older than `seconds`, one read at a time: a page, its JSON and a
    Prometheus scrape arriving together read the kit's records (or ask the server) once."""

    def __init__(self, read: Callable[[], T], seconds: float):
        self.read, self.seconds = read, seconds
        self._lock = threading.Lock()
        self._value: tuple[float, T] | None = None

    def __call__(self) -> T:
        with self._lock:
            if self._value is None or time.monotonic() - self._value[0] > self.seconds:
                self._value = (time.monotonic(), self.read())
            return self._value[1]


class StatusServerError(ValueError):
    """The page cannot be served as asked (an address that is not this machine's loopback, a port in use)."""


def load_or_create_token(path: Path) -> str:
    """The page's token from `path`, made there (readable by this account only) the first time, so that a restarted
    service keeps the token its bookmarks and Prometheus scrape job hold."""
    path = Path(path)
    if path.is_file():
        token = path.read_text().strip()
        if token:
            return token
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


def _cookie_name() -> str:
    """The token's cookie, one per page: browsers share cookies across the ports of one host, and the site's page
    and the study lead's may run on the same machine."""
    from flask import request

    return f"{TOKEN_COOKIE}_{request.host.rsplit(':', 1)[-1]}"


def _presented_tokens() -> list[str]:
    from flask import request

    header = request.headers.get("Authorization", "")
    return [header[len("Bearer "):].strip() if header.startswith("Bearer ") else "",
            request.args.get("token", ""), request.cookies.get(_cookie_name(), "")]


def status_app(name: str, template: str, snapshot: Callable[[], Any], as_json: Callable[[Any], dict[str, Any]],
               metrics: Callable[[Any], bytes], token: str) -> Flask:
    """The page app: `/` renders `template` (found in package `name`'s templates/, beside this package's
    `status_base.html`) with `status=snapshot()`, `/status.json` serves `as_json` of it and `/metrics` the
    Prometheus text `metrics` makes of it."""
    from flask import Flask, Response, redirect, render_template, request
    from jinja2 import ChoiceLoader, PackageLoader
    from prometheus_client import CONTENT_TYPE_LATEST

    app = Flask(name, static_folder=None)  # no file is served, whatever the path
    app.jinja_loader = ChoiceLoader([PackageLoader(name), PackageLoader("fl_runtime")])

    @app.before_request
    def _guard() -> BaseResponse | None:
        if not any(hmac.compare_digest(presented.encode(), token.encode()) for presented in _presented_tokens()):
            return Response("401: this page needs its token (the link its command printed at start, or "
                            "Authorization: Bearer TOKEN)\n", status=401, mimetype="text/plain",
                            headers={"WWW-Authenticate": 'Bearer realm="status"'})
        if "token" in request.args and request.method == "GET":  # keep it in a cookie, out of the address bar
            answer = redirect(request.path, code=303)
            answer.set_cookie(_cookie_name(), token, httponly=True, samesite="Strict")
            return answer
        return None

    @app.after_request
    def _harden(response: Response) -> Response:
        response.headers.update(_HEADERS)
        return response

    @app.get("/")
    def _page() -> str:
        return render_template(template, status=snapshot(), refresh_s=REFRESH_S)

    @app.get("/status.json")
    def _json() -> dict[str, Any]:
        return as_json(snapshot())

    @app.get("/metrics")
    def _metrics() -> Response:
        return Response(metrics(snapshot()), mimetype=CONTENT_TYPE_LATEST)

    return app


def is_loopback(host: str) -> bool:
    """`host` resolves only to this machine's loopback addresses."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def bind(app: Flask, host: str, port: int, allow_remote: bool = False) -> BaseWSGIServer:
    """A threaded server for `app` on host:port (port 0: any free one; the server's `port` says which), refused on
    an address other than loopback unless `allow_remote`."""
    from werkzeug.serving import make_server

    if not allow_remote and not is_loopback(host):
        raise StatusServerError(f"{host!r} is not a loopback address: the status page binds to 127.0.0.1 unless "
                                "--allow-remote is given (then put it behind the hospital's reverse proxy with TLS)")
    said = io.StringIO()
    try:  # werkzeug prints why it cannot bind and exits (SystemExit); a supervisor serving the page must not
        with contextlib.redirect_stderr(said):
            return make_server(host, port, app, threaded=True)
    except (OSError, SystemExit) as exc:
        reason = " ".join(said.getvalue().split()) or str(exc)
        raise StatusServerError(f"cannot serve the status page on {host}:{port} ({reason}); "
                                "choose another --port") from None


def page_url(server: BaseWSGIServer, token: str) -> str:
    host = server.host if ":" not in server.host else f"[{server.host}]"
    return f"http://{host}:{server.port}/?token={token}"


def add_serve_options(parser: argparse.ArgumentParser, default_port: int) -> None:
    """--json, --serve, --host, --port and --allow-remote: the options both status commands take."""
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.add_argument("--serve", action="store_true", help="serve the read-only page and /metrics")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (loopback unless --allow-remote)")
    parser.add_argument("--port", type=int, default=default_port, help="port to serve on (0: any free port)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow an address other than loopback (put the page behind a TLS reverse proxy)")


def serve(open_server: Callable[[], tuple[BaseWSGIServer, str]], program: str) -> int:
    """Bind with `open_server` (the server and the line naming its link), print the line and serve until Ctrl-C or
    SIGTERM; 1 with the reason when the page cannot be served."""
    try:
        server, line = open_server()
    except StatusServerError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return 1
    print(f"{line} (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
