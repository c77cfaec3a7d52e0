"""A chat model on 127.0.0.1 that streams in each provider's documented server-sent-event format.

* Anthropic Messages (``POST /v1/messages`` with ``"stream": true``): ``message_start``,
  ``content_block_start``, ``ping``, one ``content_block_delta`` (``text_delta``) per scripted
  piece, ``content_block_stop``, ``message_delta`` (stop reason, output tokens), ``message_stop``;
  an ``error`` event (``{"type": "error", "error": {"type": ..., "message": ...}}``) on request.
* OpenAI-compatible chat completions (``POST /v1/chat/completions`` with ``"stream": true``):
  ``data: {"object": "chat.completion.chunk", "choices": [{"delta": {"content": ...}}]}`` per
  piece, a finish chunk, a usage chunk (``stream_options.include_usage``) and ``data: [DONE]``;
  an error chunk (``data: {"error": {...}}``) on request.

Faults: ``cut_after`` drops the connection after that many pieces (a truncated body),
``end_after`` ends the body cleanly there but without the end marker (a proxy that gave up),
``error_after`` sends the provider's error event after that many pieces, and
``delay_s`` waits between pieces. A request without ``stream`` gets the whole text in the
non-streamed shape. Every request body is kept.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.loopback import ThreadedServer, anthropic_message, openai_completion


@dataclass
class Script:
    pieces: list[str] = field(default_factory=lambda: ["OK ", "[1]"])
    cut_after: int | None = None
    end_after: int | None = None
    error_after: int | None = None
    error_type: str = "overloaded_error"
    delay_s: float = 0.0


class StreamingChatServer(ThreadedServer):
    """``with StreamingChatServer(Script([...])) as srv: srv.url``."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.bodies: list[dict] = []
        super().__init__()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                server.bodies.append(body)
                path = self.path.split("?", 1)[0]
                text = "".join(server.script.pieces)
                if not body.get("stream"):
                    self._json(path, body, text)
                elif path == "/v1/messages":
                    self._anthropic(body)
                elif path == "/v1/chat/completions":
                    self._openai(body)
                else:
                    self.send_error(404)

            # -- plumbing: chunked transfer, so the client reads each event as it is sent ---------
            def _start_stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

            def _chunk(self, data: str) -> None:
                raw = data.encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()

            def _end_stream(self) -> None:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _cut(self) -> None:
                """The connection drops mid-body: no terminating chunk."""
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)

            def _pieces(self):
                s = server.script
                for i, piece in enumerate(s.pieces):
                    if s.cut_after is not None and i == s.cut_after:
                        yield "cut", None
                        return
                    if s.end_after is not None and i == s.end_after:
                        yield "end_early", None
                        return
                    if s.error_after is not None and i == s.error_after:
                        yield "error", None
                        return
                    if s.delay_s:
                        time.sleep(s.delay_s)
                    yield "piece", piece
                yield "end", None

            # -- Anthropic Messages SSE -------------------------------------------------------
            def _event(self, name: str, data: dict) -> None:
                self._chunk(f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n")

            def _anthropic(self, body: dict) -> None:
                self._start_stream()
                self._event(
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {
                            "id": "msg_loopback",
                            "type": "message",
                            "role": "assistant",
                            "content": [],
                            "model": body.get("model", "claude"),
                            "stop_reason": None,
                            "stop_sequence": None,
                            "usage": {"input_tokens": 100, "output_tokens": 1},
                        },
                    },
                )
                self._event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                self._event("ping", {"type": "ping"})
                n = 0
                for kind, piece in self._pieces():
                    if kind == "cut":
                        return self._cut()
                    if kind == "end_early":
                        return self._end_stream()
                    if kind == "error":
                        self._event(
                            "error",
                            {
                                "type": "error",
                                "error": {"type": server.script.error_type, "message": "Overloaded"},
                            },
                        )
                        return self._end_stream()
                    if kind == "piece":
                        n += 1
                        self._event(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": 0,
                                "delta": {"type": "text_delta", "text": piece},
                            },
                        )
                self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
                self._event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": n},
                    },
                )
                self._event("message_stop", {"type": "message_stop"})
                self._end_stream()

            # -- OpenAI-compatible chat completion chunks ---------------------------------------
            def _data(self, data: dict | str) -> None:
                payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
                self._chunk(f"data: {payload}\n\n")

            def _openai(self, body: dict) -> None:
                self._start_stream()
                base = {
                    "id": "chatcmpl-loopback",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": body.get("model", "m"),
                }
                self._data(
                    {
                        **base,
                        "choices": [
                            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                        ],
                    }
                )
                n = 0
                for kind, piece in self._pieces():
                    if kind == "cut":
                        return self._cut()
                    if kind == "end_early":
                        return self._end_stream()
                    if kind == "error":
                        self._data({"error": {"type": server.script.error_type, "message": "Overloaded"}})
                        return self._end_stream()
                    if kind == "piece":
                        n += 1
                        self._data(
                            {
                                **base,
                                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                            }
                        )
                self._data({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._data(
                        {
                            **base,
                            "choices": [],
                            "usage": {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n},
                        }
                    )
                self._data("[DONE]")
                self._end_stream()

            # -- not streamed ------------------------------------------------------------------
            def _json(self, path: str, body: dict, text: str) -> None:
                if path == "/v1/messages":
                    usage = {"input_tokens": 100, "output_tokens": 5}
                    out = anthropic_message(text, body.get("model", "claude"), "msg_loopback", usage)
                else:
                    out = openai_completion(text, body.get("model", "m"), "chatcmpl-loopback")
                data = json.dumps(out, ensure_ascii=False).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
