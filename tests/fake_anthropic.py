"""A fake Anthropic Messages API on loopback: a real HTTP server the real SDK talks to.

Scripted: each POST /v1/messages pops the next answer, a message body (200) or
(status, headers, body). Every request's JSON body and headers are kept.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def message(content: list[dict], stop_reason: str = "end_turn", usage: dict | None = None) -> dict:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage or {"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": 0,
                               "cache_read_input_tokens": 0}}


def tool_use(name: str, arguments, call_id: str = "toolu_1") -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def text(value: str) -> dict:
    return {"type": "text", "text": value}


class FakeAnthropic:
    def __init__(self, script: list | None = None, default=None):
        self.script = list(script or [])
        self.default = default  # answered when the script is empty (a callable of the request body)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                answer = fake.script.pop(0) if fake.script else (fake.default(body) if fake.default else None)
                status, headers, payload = (answer if isinstance(answer, tuple) else (200, {}, answer))
                if payload is None:
                    status, payload = 500, {"type": "error", "error": {"type": "api_error", "message": "empty"}}
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeAnthropic":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def error(status: int, kind: str, headers: dict | None = None) -> tuple:
    return status, headers or {}, {"type": "error", "error": {"type": kind, "message": kind}}
