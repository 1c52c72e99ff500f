"""The live view's HTTP server: a read-only page, its static files and /api/snapshot, in a daemon thread.

The standard library's ThreadingHTTPServer is enough here: the page polls one small snapshot a second,
the snapshot is already JSON bytes when it is served (built in the mapper's loop, :mod:`.snapshot`), and
connections are bounded. The commands run it in a process of its own (:mod:`.process`), so that it never
takes the GIL from the mapper; nothing here touches a mapper object.

Policy (docs/live.md):
- GET and HEAD only; any other method is 405, and no endpoint changes anything;
- on a loopback address, no token is needed, but the Host header must name a loopback host (a web page
  elsewhere cannot read the view through DNS rebinding);
- on any other address, a token is required (Authorization: Bearer, the page's cookie, or ``?token=`` on
  the first visit, which sets the cookie and redirects to a URL without it): 401 without one, 403 with a
  wrong one; compared in constant time, and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mgst.testbed.live.board import Board, FolderBoard

log = logging.getLogger(__name__)

# Connections served at once; more are closed at once (a page polls one at a time, and a lab has a few
# people watching): bounds the threads, and the GIL time, the view can take from the mapper.
MAX_CONNECTIONS = 16
# A client that sends nothing for this long (s) is dropped: a slow client cannot hold a thread.
CLIENT_TIMEOUT = 10.0
# Longest request target accepted (the page's URLs are short; a token adds about 60 characters).
MAX_TARGET = 1024
# Headers accepted per request, at most (the standard library's own limit is 100).
MAX_HEADERS = 40
# A token shorter than this is refused (mgst makes 43-character ones: 32 random bytes, URL-safe base64).
MIN_TOKEN = 16
COOKIE = "mgst_live"
STATIC = {  # the only files served: name -> content type
    "index.html": "text/html; charset=utf-8",
    "live.js": "text/javascript; charset=utf-8",
    "live.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "uPlot.LICENSE": "text/plain; charset=utf-8",
}
SECURITY_HEADERS = (
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'"),
)


def is_loopback(host: str) -> bool:
    """True if ``host`` (an address, or "localhost") is a loopback address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_live(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` (an IPv6 address in brackets) -> (host, port); ValueError saying what is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text
    host = host.strip("[]") if host.startswith("[") else host
    if not host:
        raise ValueError(f"{text!r}: give [HOST:]PORT, e.g. 8421 or 0.0.0.0:8421")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{text!r}: the port must be a number (0 picks a free one)") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{text!r}: the port must be in 0..65535")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"{text!r}: the host must be an IP address or localhost") from None
    return host, port


def check_token(token: str) -> str:
    """The token, stripped; ValueError if it is too short or has characters a header cannot carry."""
    token = token.strip()
    if len(token) < MIN_TOKEN:
        raise ValueError(f"the live view's token must have at least {MIN_TOKEN} characters")
    if not all(33 <= ord(ch) < 127 and ch not in ";,\"\\" for ch in token):
        raise ValueError("the live view's token must be printable ASCII, without spaces, quotes, ';', ',' or '\\'")
    return token


def token_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison (the time taken does not tell how much of a guess was right)."""
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def page_url(host: str, port: int) -> str:
    """The page's address on ``host``:``port`` (this machine's name for a wildcard address)."""
    if host in ("0.0.0.0", "::"):  # noqa: S104 (any address: named by the machine's name)
        host = socket.gethostname()
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def _static_files() -> dict[str, bytes]:
    folder = resources.files("mgst.testbed.live") / "static"
    return {name: (folder / name).read_bytes() for name in STATIC}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS
    board: Board | FolderBoard
    token: str | None
    loopback: bool
    files: dict[str, bytes]

    def __init__(self, address: tuple[str, int], family: int):
        self.address_family = family
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refused = 0  # connections closed because MAX_CONNECTIONS were being served
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "mgst-live"
    sys_version = ""
    timeout = CLIENT_TIMEOUT

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._serve(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(body=False)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # any other method (POST, PUT, DELETE, PATCH, OPTIONS, ...): not allowed
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self.close_connection = True
        self._reply(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: GET and HEAD only\n", "text/plain; charset=utf-8",
                    body=True, extra=(("Allow", "GET, HEAD"),))

    def _serve(self, body: bool) -> None:
        self.close_connection = True
        if len(self.path) > MAX_TARGET or len(self.headers) > MAX_HEADERS:
            self._reply(HTTPStatus.REQUEST_URI_TOO_LONG if len(self.path) > MAX_TARGET
                        else HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"too long\n", "text/plain", body)
            return
        srv = self.server
        if srv.loopback and not self._host_is_loopback():
            self._reply(HTTPStatus.FORBIDDEN, b"this view answers to a loopback host name only\n", "text/plain", body)
            return
        url = urlsplit(self.path)
        if srv.token is not None:
            given_in_query = parse_qs(url.query).get("token", [None])[0]
            given = self._bearer() or self._cookie() or given_in_query
            if given is None:
                self._reply(HTTPStatus.UNAUTHORIZED, b"a token is needed: open the URL with ?token=...\n",
                            "text/plain", body, extra=(("WWW-Authenticate", 'Bearer realm="mgst-live"'),))
                return
            if not token_matches(srv.token, given):
                self._reply(HTTPStatus.FORBIDDEN, b"wrong token\n", "text/plain", body)
                return
            if given_in_query is not None:  # first visit: a cookie for the page's requests, and a clean URL
                cookie = f"{COOKIE}={srv.token}; HttpOnly; SameSite=Strict; Path=/"
                self._reply(HTTPStatus.SEE_OTHER, b"", "text/plain", body,
                            extra=(("Set-Cookie", cookie), ("Location", url.path or "/")))
                return
        path = url.path
        if path in ("/", "/index.html"):
            self._file("index.html", body)
        elif path.startswith("/static/") and path[len("/static/"):] in STATIC:
            self._file(path[len("/static/"):], body)
        elif path == "/api/snapshot":
            srv.board.viewed = True
            self._reply(HTTPStatus.OK, srv.board.latest, "application/json", body)
        else:
            self._reply(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", body)

    def _file(self, name: str, body: bool) -> None:
        self._reply(HTTPStatus.OK, self.server.files[name], STATIC[name], body)

    def _host_is_loopback(self) -> bool:
        host = self.headers.get("Host", "")
        if host.startswith("["):
            name = host[1:host.find("]")] if "]" in host else host
        else:
            name = host.rsplit(":", 1)[0]
        return is_loopback(name)

    def _bearer(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:].strip() if auth[:7].lower() == "bearer " else None

    def _cookie(self) -> str | None:
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value
        return None

    def _reply(self, status: HTTPStatus, data: bytes, ctype: str, body: bool,
               extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for name, value in SECURITY_HEADERS + extra:
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        """To the log at debug level, the request target without its query (a token never reaches a log)."""
        path = urlsplit(getattr(self, "path", "")).path
        log.debug("%s %s %s -> %s", self.client_address[0], getattr(self, "command", "-"), path,
                  args[1] if len(args) > 1 else "")


class LiveServer:
    """Serves ``board`` on (``host``, ``port``) in a daemon thread; off loopback, ``token`` is required."""

    def __init__(self, board: Board | FolderBoard, host: str = "127.0.0.1", port: int = 0, token: str | None = None):
        loopback = is_loopback(host)
        if not loopback and token is None:
            raise ValueError(f"the live view on {host} (not loopback) needs a token")
        bind_host = "127.0.0.1" if host == "localhost" else host
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        self.httpd = _Server((bind_host, port), family)
        self.httpd.board = board
        self.httpd.token = check_token(token) if token is not None else None
        self.httpd.loopback = loopback
        self.httpd.files = _static_files()
        self.host = host
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                       name="mgst-live", daemon=True)

    @property
    def url(self) -> str:
        """The page's address (without the token)."""
        return page_url(self.host, self.port)

    def start(self) -> LiveServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
