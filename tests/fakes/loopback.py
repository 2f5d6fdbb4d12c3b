"""A loopback HTTP server that replays recorded model responses and records the requests it
receives, so the official ``anthropic`` and ``openai`` clients can be pointed at it
(``base_url``) and their real request building and response parsing exercised offline.

    with ReplayServer([turn1, turn2]) as fake:
        client = anthropic.Anthropic(api_key="test-key", base_url=fake.url)
        ...
        assert fake.requests[1].body == {...}

Responses are served in order, one per request, whatever the path (each request's path is
recorded, to be asserted). When the list runs out the server answers 500 with a JSON error, so
an unexpected extra request fails the test loudly. Bound to 127.0.0.1 on a free port.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).parent / "recorded"


def recorded(name: str) -> Any:
    """The recorded response ``tests/fakes/recorded/<name>.json``, parsed."""
    return json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8"))


@dataclass
class Request:
    """One request the fake received: method, path (with query), headers (lower-cased names)
    and the body parsed as JSON (None when empty)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class ReplayServer:
    """Serve ``responses`` (JSON-able bodies, or ``(status, body)`` pairs) in order on
    ``http://127.0.0.1:<free port>``; ``requests`` records what arrived."""

    responses: list[Any]
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue = list(self.responses)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                with fake._lock:
                    fake.requests.append(
                        Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    nxt = fake._queue.pop(0) if fake._queue else (500, {"error": "no recorded response left"})
                status, payload = nxt if isinstance(nxt, tuple) else (200, nxt)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="replay-server", daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
