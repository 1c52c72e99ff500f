"""The live view's HTTP server: a read-only page, its static files and /api/snapshot, answered from one thread.

The connections are the front's (:mod:`.front`: one event loop, a deadline for each request's head, not a
per-byte timeout) and admitted as :mod:`.admission` says (sockets bounded in all and per client address,
some kept for addresses that proved the token). This module says what each request gets, with the
standard library's request parser (:class:`http.server.BaseHTTPRequestHandler`, run on the head's bytes).
The commands run it in a process of its own (:mod:`.process`), so that it never takes the GIL from the
mapper; nothing here touches a mapper object.

Policy (docs/live.md):
- GET and HEAD only; any other method is 405, and no endpoint changes anything;
- on a loopback address, no token is needed, but the Host header must name a loopback host (a web page
  elsewhere cannot read the view through DNS rebinding);
- with a token (required on any other address): ``?token=`` in the URL, else ``Authorization: Bearer``,
  else the page's cookie; 401 without one, 403 with a wrong one; compared in constant time, never logged.
  A right ``?token=`` sets the cookie and redirects to the URL without it, whatever cookie came with it:
  the token in the URL wins over a stale cookie.

The cookie is named after the port (:func:`cookie_name`), ``HttpOnly; SameSite=Strict; Path=/``. A
browser scopes cookies by host, not by port (RFC 6265, section 8.5): every service on the same host name,
whatever its port, receives this cookie, and can read the token in it. The per-port name does not change
that; what it does is keep two views on one host apart: each reads only its own cookie, so one view's
cookie (or an earlier run's on another port) is never presented as another's credential, and opening a
second view does not lock you out of the first. The token is a capability for this port's read-only view
and nothing else (not the mapper, not the pullers); against a service on the same host, a tunnel to a
loopback view (docs/live.md) keeps the token out of the browser altogether.
"""

from __future__ import annotations

import hmac
import io
import ipaddress
import logging
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mgst.testbed.live.admission import Admission
from mgst.testbed.live.board import Board, FolderBoard
from mgst.testbed.live.front import Connection, Front

log = logging.getLogger(__name__)

# Connections waiting to be accepted (the kernel's queue; the front accepts them at once, and admits or closes).
BACKLOG = 128
# Longest request target accepted (the page's URLs are short; a token adds about 60 characters).
MAX_TARGET = 1024
# Headers accepted per request, at most (the standard library's own limit is 100).
MAX_HEADERS = 40
# A token shorter than this is refused (mgst makes 43-character ones: 32 random bytes, URL-safe base64).
MIN_TOKEN = 16
COOKIE_PREFIX = "mgst_live_"  # + the port: see the module's docstring
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


def cookie_name(port: int) -> str:
    """The name of the cookie holding the token of the view on ``port``."""
    return f"{COOKIE_PREFIX}{port}"


def _static_files() -> dict[str, bytes]:
    folder = resources.files("mgst.testbed.live") / "static"
    return {name: (folder / name).read_bytes() for name in STATIC}


class _Site:
    """What every request of one view is answered from (the handler's ``server``)."""

    def __init__(self, board: Board | FolderBoard, token: str | None, loopback: bool, port: int,
                 admission: Admission[Connection]):
        self.board = board
        self.token = token
        self.loopback = loopback
        self.cookie = cookie_name(port)
        self.admission = admission
        self.files = _static_files()


class _Handler(BaseHTTPRequestHandler):
    """One request, parsed from its head's bytes by the standard library; its answer written to a buffer."""

    server: _Site  # type: ignore[assignment]  (not a socketserver: the front serves the connections)
    server_version = "mgst-live"
    sys_version = ""

    def __init__(self, head: bytes, address: str, site: _Site):
        self._head = head
        self.answer = io.BytesIO()
        super().__init__(None, (address, 0), site)  # type: ignore[arg-type]  (parses and answers)

    def setup(self) -> None:
        self.rfile = io.BytesIO(self._head)
        self.wfile = self.answer

    def finish(self) -> None:
        pass

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
        site = self.server
        if site.loopback and not self._host_is_loopback():
            self._reply(HTTPStatus.FORBIDDEN, b"this view answers to a loopback host name only\n", "text/plain", body)
            return
        url = urlsplit(self.path)
        if site.token is not None:
            given_in_query = parse_qs(url.query).get("token", [None])[0]
            # the token in the URL first: it is what the user has just given (a cookie may be stale)
            if given_in_query is not None:
                ok = token_matches(site.token, given_in_query)
            else:
                bearer = self._bearer()
                cookies = self._cookies()
                if bearer is None and not cookies:
                    self._reply(HTTPStatus.UNAUTHORIZED, b"a token is needed: open the URL with ?token=...\n",
                                "text/plain", body, extra=(("WWW-Authenticate", 'Bearer realm="mgst-live"'),))
                    return
                ok = (token_matches(site.token, bearer) if bearer is not None
                      else any([token_matches(site.token, c) for c in cookies]))  # (a list: every one compared)
            if not ok:
                self._reply(HTTPStatus.FORBIDDEN, b"wrong token\n", "text/plain", body)
                return
            site.admission.trust(self.client_address[0])
            if given_in_query is not None:  # a cookie for the page's requests (replacing any), and a clean URL
                cookie = f"{site.cookie}={site.token}; HttpOnly; SameSite=Strict; Path=/"
                self._reply(HTTPStatus.SEE_OTHER, b"", "text/plain", body,
                            extra=(("Set-Cookie", cookie), ("Location", url.path or "/")))
                return
        path = url.path
        if path in ("/", "/index.html"):
            self._file("index.html", body)
        elif path.startswith("/static/") and path[len("/static/"):] in STATIC:
            self._file(path[len("/static/"):], body)
        elif path == "/api/snapshot":
            site.board.viewed = True
            self._reply(HTTPStatus.OK, site.board.latest, "application/json", body)
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

    def _cookies(self) -> list[str]:
        """The values of this view's cookie in the request (a browser may send one name twice); another
        view's, or any other cookie, is not looked at."""
        values = []
        for header in self.headers.get_all("Cookie", []):
            for part in header.split(";"):
                name, _, value = part.strip().partition("=")
                if name == self.server.cookie:
                    values.append(value)
        return values

    def _reply(self, status: HTTPStatus, data: bytes, ctype: str, body: bool,
               extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
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


# Answered to a request head over front.MAX_HEAD bytes.
_TOO_LARGE = (b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n"
              b"Connection: close\r\n\r\ntoo long\n")


class LiveServer:
    """Serves ``board`` on (``host``, ``port``): in a daemon thread (:meth:`start`) or in the calling one
    (:meth:`serve_forever`); off loopback, ``token`` is required. OSError if it cannot bind."""

    def __init__(self, board: Board | FolderBoard, host: str = "127.0.0.1", port: int = 0, token: str | None = None):
        loopback = is_loopback(host)
        if not loopback and token is None:
            raise ValueError(f"the live view on {host} (not loopback) needs a token")
        token = check_token(token) if token is not None else None
        bind_host = "127.0.0.1" if host == "localhost" else host
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        # (on "::", IPv4 too where the system can, as a plain IPv6 socket of Linux does)
        dualstack = bind_host == "::" and socket.has_dualstack_ipv6()
        self.sock = socket.create_server((bind_host, port), family=family, backlog=BACKLOG, dualstack_ipv6=dualstack)
        self.host = host
        self.port: int = self.sock.getsockname()[1]
        admission: Admission[Connection] = Admission(reserve=token is not None)
        try:
            self.site = _Site(board, token, loopback, self.port, admission)
        except BaseException:
            self.sock.close()
            raise
        self.front = Front(self.sock, self._answer, admission, oversized_answer=_TOO_LARGE)
        self.thread = threading.Thread(target=self.serve_forever, name="mgst-live", daemon=True)

    def _answer(self, head: bytes, address: str) -> bytes:
        return _Handler(head, address, self.site).answer.getvalue()

    @property
    def url(self) -> str:
        """The page's address (without the token)."""
        return page_url(self.host, self.port)

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`close`."""
        self.front.run()

    def start(self) -> LiveServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.front.stop()
        if self.thread.is_alive():
            self.thread.join(5)
        self.sock.close()
