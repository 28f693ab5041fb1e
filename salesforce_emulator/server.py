"""HTTPS plumbing: TLS per connection, bearer-token auth, the daily request budget, routing, error shapes.

Endpoint logic lives in the ``api_*`` modules as plain functions ``(Api, Request) -> Response`` registered in a
route table; this module only turns HTTP into those calls. Every response carries ``Sforce-Limit-Info:
api-usage=U/L`` like Salesforce's, every authenticated call counts against the budget and is counted per endpoint
kind (``Emulator.request_counts()``), and every error is a Salesforce-shaped JSON list.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from salesforce_emulator.errors import ApiError

if TYPE_CHECKING:
    from salesforce_emulator.api import Api

log = logging.getLogger(__name__)

DATA_PREFIX = r"/services/data/v(?P<version>\d+\.\d+)"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)
    user_id: str = ""  # the session's user (set by auth; empty: the integration user)

    def json(self) -> Any:
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise ApiError(400, "JSON_PARSER_ERROR", f"The request body is not valid JSON: {exc}") from exc

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    @property
    def version(self) -> str:
        return self.params.get("version", "59.0")

    @property
    def origin(self) -> str:
        client = self.headers.get("user-agent", "unknown").split(" ")[0]
        return f"com/salesforce/api/rest/{self.version};client={client}"


@dataclass
class Response:
    status: int = 200
    body: Any = None  # JSON-serialisable, or bytes/str sent as is
    content_type: str = "application/json;charset=UTF-8"
    headers: dict[str, str] = field(default_factory=dict)
    truncate: bool = False  # send the headers and half the body, then drop the connection (a network fault)

    def encode(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


Handler = Callable[["Api", Request], Response]


@dataclass(frozen=True)
class NetworkFault:
    """One request (of endpoint `kind`, or any) that answers only after `stall_seconds`, or whose response is cut
    off in the middle of its body (`drop`)."""

    kind: str | None = None
    stall_seconds: float = 0.0
    drop: bool = False


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    kind: str
    handler: Handler
    auth: bool = True


def route(method: str, path: str, kind: str, handler: Handler, auth: bool = True, data: bool = True) -> Route:
    return Route(method, re.compile("^" + (DATA_PREFIX if data else "") + path + "/?$"), kind, handler, auth)


class Dispatcher:
    """Auth, budget, counters and routing; shared by HTTP and by in-process composite subrequests."""

    def __init__(self, api: Api, routes: list[Route]):
        self.api = api
        self.routes = routes
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.fail_next: list[int] = []  # statuses to return for the next authenticated requests
        self.network_faults: list[NetworkFault] = []  # stalls and dropped connections still to inject

    def find(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        allowed = False
        for candidate in self.routes:
            match = candidate.pattern.match(path)
            if match:
                allowed = True
                if candidate.method == method:
                    return candidate, match.groupdict()
        if allowed:
            raise ApiError(405, "METHOD_NOT_ALLOWED", f"HTTP Method '{method}' not allowed")
        return None

    def handle(self, request: Request, nested: bool = False) -> Response:
        """Serve one request. ``nested`` (composite subrequests) skips auth, budget and counting: the outer
        call was checked and counted once."""
        try:
            found = self.find(request.method, request.path)
            if found is None:
                raise ApiError(404, "NOT_FOUND", "The requested resource does not exist")
            target, request.params = found
            if target.auth and not nested:
                self._authorize(request)
            fault = None
            if not nested:
                with self._lock:
                    self.counts[target.kind] += 1
                    fault = self._take_network_fault(target.kind)
            if fault is not None and fault.stall_seconds:
                time.sleep(fault.stall_seconds)
            response = target.handler(self.api, request)
            response.truncate = fault is not None and fault.drop
            return response
        except ApiError as exc:
            return Response(exc.status, exc.body())

    def _take_network_fault(self, kind: str) -> NetworkFault | None:
        for index, fault in enumerate(self.network_faults):
            if fault.kind in (None, kind):
                return self.network_faults.pop(index)
        return None

    def _authorize(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        user_id = self.api.session_user(token.strip()) if scheme.lower() in ("bearer", "oauth") else None
        if user_id is None:
            with self._lock:
                self.counts["unauthorized"] += 1
            raise ApiError(401, "INVALID_SESSION_ID", "Session expired or invalid")
        request.user_id = user_id
        with self._lock:
            if self.api.budget_used >= self.api.daily_request_limit:
                raise ApiError(403, "REQUEST_LIMIT_EXCEEDED", "TotalRequests Limit exceeded.")
            self.api.budget_used += 1
            status = self.fail_next.pop(0) if self.fail_next else None
        if status is not None:
            raise ApiError(status, "SERVER_UNAVAILABLE", "Injected fault: the server is temporarily unavailable")


class _HttpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _TlsServer
    timeout = 60

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Request(
            self.command,
            parts.path,
            parse_qs(parts.query, keep_blank_values=True),
            {k.lower(): v for k, v in self.headers.items()},
            body,
        )
        dispatcher = self.server.dispatcher
        try:
            response = dispatcher.handle(request)
        except Exception as exc:  # an emulator bug: report it as Salesforce would, and log it
            log.exception("unhandled error for %s %s", self.command, parts.path)
            response = Response(500, [{"message": f"{type(exc).__name__}: {exc}", "errorCode": "UNKNOWN_EXCEPTION"}])
        payload = response.encode()
        self.send_response(response.status)
        if payload or response.status != 204:
            self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(payload)))
        api = dispatcher.api
        self.send_header("Sforce-Limit-Info", f"api-usage={api.budget_used}/{api.daily_request_limit}")
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.end_headers()
        if payload and self.command != "HEAD":
            try:
                if response.truncate:
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                else:
                    self.wfile.write(payload)
            except OSError as exc:  # the client gave up (e.g. its read timed out on a stalled request)
                log.debug("%s %s: client went away: %s", self.command, parts.path, exc)
                self.close_connection = True

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], dispatcher: Dispatcher, context: Any):
        self.dispatcher = dispatcher
        self.context = context
        super().__init__(address, _HttpHandler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, in the connection's own thread, so a slow client never blocks accept().
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (TimeoutError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()


def serve_in_thread(host: str, port: int, dispatcher: Dispatcher, context: Any) -> tuple[_TlsServer, threading.Thread]:
    server = _TlsServer((host, port), dispatcher, context)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="salesforce-emulator-http", daemon=True
    )
    thread.start()
    return server, thread
