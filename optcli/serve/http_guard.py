"""The HTTP port of `optcli serve`: a small reverse proxy in front of Triton's own HTTP server.

Triton 2.51's HTTP front end allocates an input's buffer from the shape a request declares before it
checks that shape (optcli/serve/request_check.py), so a single malformed request aborted the server.
Here every inference request is read (up to a byte bound), its JSON header checked against the
model's configuration, and only then passed on; a refused one gets Triton's own error form (400,
`{"error": "..."}`). Every other request (health, metadata, statistics, ...) passes unchanged.

Triton's HTTP server listens on a private loopback port, and every API of it is restricted to
requests carrying a header with a secret only this proxy knows (`--http-restricted-api`): a local
process cannot go around the check. gRPC goes to Triton directly: its front end compares the bytes
sent with the bytes the shape claims before allocating (the malformed requests of the load test
are refused there), and the server is restarted if anything kills it anyway (server.py).
"""
from __future__ import annotations

import http.client
import json
import queue
import re
import secrets
import socket
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from optcli.serve.request_check import ModelShapes, check_request_header, request_header

RESTRICTED_APIS = "health,metadata,inference,shared-memory,model-config,model-repository,statistics,trace,logging"
KEY_HEADER = "optcli-guard-key"
# JSON text is wider than the tensor it carries ("0.12345678," is 11 bytes for 4): a body may be this
# many times the tensor bound.
BODY_FACTOR = 4
_INFER = re.compile(r"^/v2/models/([^/?]+)(?:/versions/[^/?]+)?/(infer|generate|generate_stream)/?(?:\?.*)?$")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
               "transfer-encoding", "upgrade", "host", "content-length", KEY_HEADER}
UPSTREAM_TIMEOUT_S = 600.0


class HttpGuard:
    """Listens on (host, port) and forwards to Triton's HTTP server on 127.0.0.1:upstream_port."""

    def __init__(self, host: str, port: int, upstream_port: int) -> None:
        self.host, self.port, self.upstream_port = host, port, upstream_port
        self.key = secrets.token_hex(16)
        self.model: ModelShapes | None = None   # set once the model is loaded (its config comes from Triton)
        self.refused = 0
        self._idle: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue(maxsize=64)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def triton_flags(self) -> list[str]:
        """What Triton is started with so that only this proxy reaches its HTTP APIs."""
        return [f"--http-restricted-api={RESTRICTED_APIS}:{KEY_HEADER}={self.key}"]

    def upstream_json(self, path: str, timeout: float = 5.0) -> Any:
        """GET a JSON document from Triton's HTTP server (the proxy's own key on it)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=timeout)
        try:
            conn.request("GET", path, headers={KEY_HEADER: self.key})
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise OSError(f"GET {path}: HTTP {response.status}")
            return json.loads(body)
        finally:
            conn.close()

    def connection(self, fresh: bool = False) -> http.client.HTTPConnection:
        """A kept-alive connection to Triton from the pool (a client's every connection is a new handler
        thread here: a connection per thread would open one to Triton per client connection)."""
        if not fresh:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
        return http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=UPSTREAM_TIMEOUT_S)

    def give_back(self, conn: http.client.HTTPConnection) -> None:
        try:
            self._idle.put_nowait(conn)
        except queue.Full:
            conn.close()

    def start(self) -> None:
        guard = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            address_family = socket.AF_INET6 if ":" in guard.host else socket.AF_INET

        class Handler(_Handler):
            pass

        Handler.guard = guard
        self._server = Server((self.host, self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="optcli-http-guard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        while not self._idle.empty():
            self._idle.get_nowait().close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    guard: HttpGuard

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # Triton keeps the server log; a line per request here would only be noise

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._forward(None)

    def do_HEAD(self) -> None:  # noqa: N802
        self._forward(None)

    def do_DELETE(self) -> None:  # noqa: N802
        self._forward(None)

    def do_POST(self) -> None:  # noqa: N802
        body = self._read_body()
        if body is None:
            return
        match = _INFER.match(self.path)
        model = self.guard.model
        if match and model is None:  # nothing to check against yet: never pass a request on unchecked
            return self._refuse(503, "the model is not ready yet")
        if match and model is not None:
            if match.group(1) != model.name:
                return self._refuse(404, f"Request for unknown model: '{match.group(1)}' is not found")
            if match.group(2) == "infer":
                header, problem = request_header(body, self.headers.get("Inference-Header-Content-Length"))
                problem = problem or check_request_header(header, model)
                if problem:
                    return self._refuse(400, problem)
        self._forward(body)

    def do_PUT(self) -> None:  # noqa: N802
        self.do_POST()

    def _read_body(self) -> bytes | None:
        """The request body, decompressed, within the bound; None once a refusal has been sent."""
        model = self.guard.model
        limit = BODY_FACTOR * (model.max_request_bytes if model else 2**20)
        if self.headers.get("Transfer-Encoding"):
            self._refuse(411, "send the body with a Content-Length (chunked bodies are not taken)", close=True)
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._refuse(400, "Content-Length is not a number", close=True)
            return None
        if not 0 <= length <= limit:
            self._refuse(413, f"the request body is {length} bytes, over this server's bound of {limit}", close=True)
            return None
        body = self.rfile.read(length)
        encoding = (self.headers.get("Content-Encoding") or "identity").lower()
        if encoding in ("gzip", "deflate"):
            # Decompressed within the same bound: a small compressed body must not become a huge one.
            inflate = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
            try:
                body = inflate.decompress(body, limit + 1)
            except zlib.error as exc:
                self._refuse(400, f"the {encoding} body does not decompress ({exc})")
                return None
            if len(body) > limit or inflate.unconsumed_tail:
                self._refuse(413, f"the decompressed body is over this server's bound of {limit} bytes")
                return None
            del self.headers["Content-Encoding"]
        elif encoding != "identity":
            self._refuse(415, f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)")
            return None
        return body

    def _refuse(self, status: int, message: str, close: bool = False) -> None:
        self.guard.refused += 1
        self._send(status, [("Content-Type", "application/json")], json.dumps({"error": message}).encode(), close)

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes, close: bool = False) -> None:
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self, body: bytes | None) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers[KEY_HEADER] = self.guard.key
        for attempt in (0, 1):  # a kept-alive connection Triton closed (or a restarted server): once more
            conn = self.guard.connection(fresh=attempt > 0)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                if response.will_close:
                    conn.close()
                else:
                    self.guard.give_back(conn)
                break
            except (OSError, http.client.HTTPException):
                conn.close()
        else:
            self._send(503, [("Content-Type", "application/json")],
                       json.dumps({"error": "the server is not reachable (restarting?)"}).encode())
            return
        kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
        self._send(response.status, kept, data)
