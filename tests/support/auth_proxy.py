"""An HTTP reverse proxy on loopback that lets a request through to a target server only with the
``Authorization`` header it was given (HTTP basic auth, or a bearer token), as a registry behind
an authenticating gateway: anything else is answered 401 without reaching the target."""
from __future__ import annotations

import base64
import http.server
import threading
import urllib.error
import urllib.request


class AuthProxy:
    """Forwards ``http://127.0.0.1:<port>/...`` to ``target`` (a base URL) for requests carrying
    Basic ``username:password`` or Bearer ``token``; :attr:`seen` holds every Authorization header
    received (None when missing)."""

    def __init__(self, target: str, *, username: str | None = None, password: str | None = None,
                 token: str | None = None):
        self.target = target.rstrip("/")
        self.accepted = set()
        if username is not None:
            self.accepted.add("Basic " + base64.b64encode(f"{username}:{password}".encode()).decode())
        if token is not None:
            self.accepted.add(f"Bearer {token}")
        self.seen: list[str | None] = []
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True, name="auth-proxy").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _forward(self) -> None:
                given = self.headers.get("Authorization")
                proxy.seen.append(given)
                if given not in proxy.accepted:
                    self._answer(401, b'{"error_code": 401, "message": "Unauthorized"}', "application/json")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
                request = urllib.request.Request(proxy.target + self.path, data=body, method=self.command,
                                                 headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        self._answer(answer.status, answer.read(), answer.headers.get("Content-Type", ""))
                except urllib.error.HTTPError as error:
                    self._answer(error.code, error.read(), error.headers.get("Content-Type", ""))

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        return Handler
