"""Real HTTP servers on 127.0.0.1 that speak the documented request/response shapes of the
providers ragline cannot reach here: Voyage (``/v1/embeddings``, ``/v1/rerank``), Anthropic
(``/v1/messages``), Ollama (``/api/embed``) and OpenAI-compatible chat (``/v1/chat/completions``).

The real SDKs reach them through ``base_url``. Faults are injectable per server: fixed latency,
a 429 storm (every Nth request answered 429 with ``Retry-After``), 500s, hangs past the client's
timeout, and garbage rerank indexes. Every request is counted on the server side.

Embeddings are deterministic hashed character-trigram vectors (L2-normalised), so similar texts
get similar vectors and tests and benchmarks run fast without a model.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


def hashed_embedding(text: str, dim: int) -> list[float]:
    vec = np.zeros(dim, dtype=np.float32)
    t = f"  {text.lower()}  "
    for i in range(len(t) - 2):
        h = int.from_bytes(hashlib.blake2b(t[i : i + 3].encode(), digest_size=8).digest(), "little")
        vec[h % dim] += 1.0 if (h >> 63) & 1 else -1.0
    norm = float(np.linalg.norm(vec)) or 1.0
    return (vec / norm).tolist()


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


@dataclass
class Faults:
    latency_s: float = 0.0
    every_nth_429: int = 0  # 0 = never; 3 = every third request
    retry_after_s: float = 1.0
    every_nth_500: int = 0
    fail_first_n: int = 0  # the first N requests answer 500
    hang_s: float = 0.0  # sleep this long before answering (simulates a hang past the timeout)
    garbage_rerank: bool = False  # rerank answers with out-of-range / duplicate indexes
    shuffle_embeddings: bool = True  # return embedding items out of order (clients must use `index`)
    #: answer embeddings from a table of pre-serialised vectors (one cheap hash per text): an embedder
    #: that costs the pipeline nothing, for measuring everything around it
    instant_vectors: bool = False


@dataclass
class Stats:
    requests: int = 0
    by_path: dict[str, int] = field(default_factory=dict)
    texts_embedded: int = 0
    answered_429: int = 0
    answered_500: int = 0
    bodies: list[dict] = field(default_factory=list)
    headers: list[dict] = field(default_factory=list)
    max_in_flight: int = 0
    in_flight: int = 0
    #: (start, end) epoch seconds of every request, for timelines (idle slots, ramp, drain)
    spans: list[tuple[float, float]] = field(default_factory=list)


def send_canned(
    handler: BaseHTTPRequestHandler, code: int, headers: dict, data: bytes, body: bool = True
) -> None:
    """Answer a request with a fixed status, headers and body (``body=False`` for HEAD)."""
    handler.send_response(code)
    for k, v in headers.items():
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    if body:
        handler.wfile.write(data)


def openai_completion(text: str, model: str, id_: str = "chatcmpl-1") -> dict:
    """A non-streamed OpenAI-compatible chat completion answering ``text``."""
    return {
        "id": id_,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def anthropic_message(text: str, model: str, id_: str, usage: dict) -> dict:
    """A non-streamed Anthropic Messages response answering ``text``."""
    return {
        "id": id_,
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "model": model,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


class ThreadedServer:
    """A threaded HTTP server on 127.0.0.1 serving ``self._handler()`` (a request handler class):
    ``with Server() as srv: srv.url``. Subclasses build their state, then call ``super().__init__()``."""

    def __init__(self) -> None:
        handler = self._handler()
        # a handler writes its headers and its body separately: with Nagle's algorithm on, the body
        # of an answer on a kept-alive connection waits for the client's delayed ACK (~40 ms on
        # Linux), a latency no real provider adds and one every timed call through it would carry
        handler.disable_nagle_algorithm = True
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LoopbackServer(ThreadedServer):
    """``with LoopbackServer() as srv: srv.url`` — a threaded HTTP server on 127.0.0.1."""

    def __init__(
        self,
        faults: Faults | None = None,
        dim: int = 384,
        answer_text: str | None = None,
        keep_bodies: int = 200,
        answer_fn=None,
    ) -> None:
        self.faults = faults or Faults()
        self.dim = dim
        self.answer_text = answer_text
        # answer_fn(request body) -> text: a scripted chat model (takes precedence over answer_text)
        self.answer_fn = answer_fn
        self.keep_bodies = keep_bodies
        self.stats = Stats()
        self._lock = threading.Lock()
        super().__init__()

    def instant_table(self, dim: int, n: int = 4096) -> list[str]:
        """``n`` random unit vectors of ``dim``, serialised once (``Faults.instant_vectors``)."""
        with self._lock:
            if getattr(self, "_instant", (None, None))[0] != dim:
                rng = np.random.default_rng(7)
                v = rng.standard_normal((n, dim)).astype(np.float32)
                v /= np.linalg.norm(v, axis=1, keepdims=True)
                self._instant = (dim, [json.dumps([round(float(x), 6) for x in row]) for row in v])
            return self._instant[1]

    def reset_stats(self) -> None:
        with self._lock:
            self.stats = Stats()

    # ------------------------------------------------------------------------------------------
    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _send(self, code: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                wait = getattr(self, "_answer_at", 0.0) - time.time()
                if wait > 0:
                    time.sleep(wait)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"status": "ok"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"detail": "invalid JSON"})
                    return
                path = self.path.split("?", 1)[0]
                f = server.faults
                started = time.time()
                with server._lock:
                    st = server.stats
                    st.requests += 1
                    n = st.requests
                    st.by_path[path] = st.by_path.get(path, 0) + 1
                    st.in_flight += 1
                    st.max_in_flight = max(st.max_in_flight, st.in_flight)
                    if len(st.bodies) < server.keep_bodies:
                        st.bodies.append({"path": path, **body})
                        st.headers.append({k.lower(): v for k, v in self.headers.items()})
                # fixed latency: the answer leaves latency_s after the request arrived, however long
                # building it took (hashing 128 texts is not the client's time)
                self._answer_at = started + f.latency_s
                try:
                    if f.hang_s:
                        time.sleep(f.hang_s)
                    if n <= f.fail_first_n or (f.every_nth_500 and n % f.every_nth_500 == 0):
                        with server._lock:
                            server.stats.answered_500 += 1
                        self._send(500, {"detail": "injected server error"})
                        return
                    if f.every_nth_429 and n % f.every_nth_429 == 0:
                        with server._lock:
                            server.stats.answered_429 += 1
                        self._send(429, {"detail": "rate limited"}, {"Retry-After": f"{f.retry_after_s:g}"})
                        return
                    route = {
                        "/v1/embeddings": self._embeddings,
                        "/v1/rerank": self._rerank,
                        "/v1/messages": self._messages,
                        "/api/embed": self._ollama_embed,
                        "/v1/chat/completions": self._chat,
                    }.get(path)
                    if route is None:
                        self._send(404, {"detail": f"no route {path}"})
                        return
                    route(body)
                finally:
                    with server._lock:
                        server.stats.in_flight -= 1
                        server.stats.spans.append((started, time.time()))

            # --- Voyage ---------------------------------------------------------------------
            def _embeddings(self, body: dict) -> None:
                texts = body.get("input")
                if isinstance(texts, str):
                    texts = [texts]
                if not isinstance(texts, list) or not texts or len(texts) > 1000:
                    self._send(400, {"detail": "input must be a non-empty list"})
                    return
                dim = int(body.get("output_dimension") or server.dim)
                if server.faults.instant_vectors:
                    self._instant_embeddings(texts, dim, body.get("model", "voyage-4"))
                    return
                items = [
                    {"object": "embedding", "embedding": hashed_embedding(t, dim), "index": i}
                    for i, t in enumerate(texts)
                ]
                if server.faults.shuffle_embeddings:
                    items.reverse()
                with server._lock:
                    server.stats.texts_embedded += len(texts)
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": items,
                        "model": body.get("model", "voyage-4"),
                        "usage": {"total_tokens": sum(_tokens(t) for t in texts)},
                    },
                )

            def _instant_embeddings(self, texts: list, dim: int, model: str) -> None:
                table = server.instant_table(dim)
                items = ",".join(
                    f'{{"object":"embedding","index":{i},"embedding":{table[zlib.crc32(str(t).encode()) % len(table)]}}}'
                    for i, t in enumerate(texts)
                )
                with server._lock:
                    server.stats.texts_embedded += len(texts)
                usage = sum(_tokens(str(t)) for t in texts)
                data = f'{{"object":"list","data":[{items}],"model":{json.dumps(model)},"usage":{{"total_tokens":{usage}}}}}'
                wait = getattr(self, "_answer_at", 0.0) - time.time()
                if wait > 0:
                    time.sleep(wait)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data.encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _rerank(self, body: dict) -> None:
                query = str(body.get("query", ""))
                docs = body.get("documents") or []
                q = set(re.findall(r"\w+", query.lower()))
                scored = []
                for i, d in enumerate(docs):
                    words = set(re.findall(r"\w+", str(d).lower()))
                    scored.append((len(q & words) / (len(q) or 1), i))
                scored.sort(key=lambda s: -s[0])
                top_k = body.get("top_k") or len(docs)
                data = [{"relevance_score": round(s, 4), "index": i} for s, i in scored[:top_k]]
                if server.faults.garbage_rerank:
                    data = (
                        [
                            {"relevance_score": 0.99, "index": len(docs) + 5},
                            {"relevance_score": 0.98, "index": -1},
                            {"relevance_score": 0.97, "index": "x"},
                        ]
                        + data[:1]
                        + data[:1]
                    )
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": body.get("model", "rerank-2.5"),
                        "usage": {"total_tokens": _tokens(query) * max(1, len(docs))},
                    },
                )

            # --- Anthropic ------------------------------------------------------------------
            def _messages(self, body: dict) -> None:
                text = server.answer_fn(body) if server.answer_fn else server.answer_text
                if text is None:
                    user = body.get("messages", [{}])[-1].get("content", "")
                    if isinstance(user, list):
                        user = " ".join(p.get("text", "") for p in user if isinstance(p, dict))
                    text = "Контекст: " + " ".join(str(user).split()[:30])
                system = body.get("system")
                cached = 0
                if isinstance(system, list) and any(
                    isinstance(b, dict) and b.get("cache_control") for b in system
                ):
                    cached = sum(_tokens(b.get("text", "")) for b in system if isinstance(b, dict))
                usage = {
                    "input_tokens": 100,
                    "output_tokens": _tokens(text),
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": cached,
                }
                model = body.get("model", "claude")
                self._send(200, anthropic_message(text, model, f"msg_{int(time.time() * 1000)}", usage))

            # --- Ollama / OpenAI-compatible ---------------------------------------------------
            def _ollama_embed(self, body: dict) -> None:
                texts = body.get("input")
                if isinstance(texts, str):
                    texts = [texts]
                with server._lock:
                    server.stats.texts_embedded += len(texts or [])
                self._send(
                    200,
                    {
                        "model": body.get("model"),
                        "embeddings": [hashed_embedding(t, server.dim) for t in texts or []],
                    },
                )

            def _chat(self, body: dict) -> None:
                text = (server.answer_fn(body) if server.answer_fn else server.answer_text) or "OK [1]"
                self._send(
                    200,
                    openai_completion(text, body.get("model", "m")),
                )

        return Handler


@contextmanager
def loopback_voyage(use_settings, **settings):
    """A loopback server the Voyage embedder (and reranker) point at, ``settings`` applied on top."""
    with LoopbackServer() as srv:
        use_settings(
            **{
                "embed_provider": "voyage",
                "providers_voyage_base_url": srv.url + "/v1",
                "providers_voyage_api_key": "test-key",
                **settings,
            }
        )
        yield srv


@contextmanager
def settings_env(**variables: str):
    """Environment variables for module-scoped fixtures (no ``use_settings``): set, with the settings
    and providers reloaded on the way in and on the way out."""
    import pytest

    from ragline.shared.config.settings import reset_settings
    from ragline.shared.worker import providers

    with pytest.MonkeyPatch.context() as mp:
        for key, value in variables.items():
            mp.setenv(key, value)
        reset_settings()
        providers.reset()
        try:
            yield
        finally:
            mp.undo()
            reset_settings()
            providers.reset()


@contextmanager
def loopback_voyage_env():
    """:func:`loopback_voyage` for module-scoped fixtures: a loopback server as the embedder."""
    with (
        LoopbackServer() as srv,
        settings_env(
            RAGLINE_EMBED_PROVIDER="voyage",
            RAGLINE_PROVIDERS_VOYAGE_BASE_URL=srv.url + "/v1",
            RAGLINE_PROVIDERS_VOYAGE_API_KEY="k",
        ),
    ):
        yield srv
