"""Real servers that alerts go to, in the test's own process: an HTTP server and an SMTP server."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.integration.support.servers import wait_for  # noqa: F401  (re-exported: the alert and schedule tests wait with it)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int


class WebhookReceiver:
    """``http.server`` on a free 127.0.0.1 port, in a thread: records every POST and answers the scripted
    status codes in turn (200 once the script is used up)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.script: list[int] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    code = receiver.script.pop(0) if receiver.script else 200
                    receiver.requests.append(Request(self.path, dict(self.headers.items()), body, code))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def reset(self, *script: int) -> None:
        with self._lock:
            self.requests.clear()
            self.script = list(script)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class BlackHole:
    """A port that takes connections and never answers: a webhook that hangs until its timeout."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def close(self) -> None:
        self.sock.close()
