"""examples/async_chat_backend.py end to end: uvicorn on 127.0.0.1, an httpx client reading its
server-sent events, the real query worker streaming from a loopback chat model."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from tests.integration.query_corpus import store_docs
from tests.loopback import LoopbackServer
from tests.sse_loopback import Script, StreamingChatServer

REPO = Path(__file__).resolve().parents[2]
DOCS = [
    {
        "doc_id": f"r{i}",
        "path": f"docs/r{i}.md",
        "heading": "Ретраи",
        "content": f"ретраи вариант {i}. Клиент повторяет запрос после ошибки 429.",
    }
    for i in range(1, 3)
]
PIECES = ["Клиент ", "повторяет ", "запрос ", "после ", "ошибки ", "429 [1]."]


@pytest.fixture()
def backend(celery_worker, conn, tenant, stack, use_settings):
    """The example's app served by uvicorn on a free port, over a loopback Anthropic model."""
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import async_chat_backend
    finally:
        sys.path.pop(0)
    from ragline.shared.sdk.async_client import AsyncRaglineClient

    store_docs(conn, tenant, DOCS)
    # the question embedding comes from a loopback Voyage (hashed vectors, as the stored ones)
    with StreamingChatServer(Script(PIECES, delay_s=0.2)) as chat, LoopbackServer() as voyage:
        use_settings(
            embed_provider="voyage",
            providers_voyage_base_url=voyage.url + "/v1",
            providers_voyage_api_key="test-key",
            answer_provider="anthropic",
            providers_anthropic_api_key="test-key",
            providers_anthropic_base_url=chat.url,
            answer_min_confidence=0,
            answer_grounding="off",
        )
        client = AsyncRaglineClient(stack.effective_redis_url(), timeout=30)
        app = async_chat_backend.create_app(client, tenant, ["g"])
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True
            thread.join(15)
            sock.close()


def sse_events(lines: Iterator[str]) -> Iterator[dict]:
    """``{"event", "id", "data"}`` per server-sent event."""
    ev: dict = {}
    for line in lines:
        if not line:
            if ev:
                yield ev
            ev = {}
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        ev[name] = json.loads(value) if name == "data" else value


def test_answer_streams_as_server_sent_events(backend):
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", backend + "/ask", json={"question": "ретраи после ошибки 429"}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = list(sse_events(r.iter_lines()))
        assert http.post(backend + "/ask", content=b"not json").status_code == 400
    kinds = [e["event"] for e in events]
    assert kinds[0] == "question" and kinds[-1] == "answer" and kinds.count("delta") >= 2
    shown = "".join(e["data"]["text"] for e in events if e["event"] == "delta")
    final = events[-1]["data"]
    assert shown == final["answer"] == "Клиент повторяет запрос после ошибки 429 [1]."
    assert final["sources"][0]["n"] == 1 and not final["no_answer"]
    assert all(e.get("id") for e in events[1:])  # every answer event can be resumed after
    # neither the stream nor the task's own copy of the answer stays in Redis once it was read
    import redis

    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.names import answer_stream_key

    r = redis.Redis.from_url(get_settings().effective_redis_url())
    task_id = events[0]["data"]["task_id"]
    time.sleep(1.5)  # the worker stores its result just after the terminal entry
    assert not r.exists(f"celery-task-meta-{task_id}") and r.xlen(answer_stream_key(task_id)) == 0


def test_a_client_that_reconnects_with_last_event_id_misses_nothing(backend):
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", backend + "/ask", json={"question": "ретраи после ошибки 429"}) as r:
            first: list[dict] = []
            for ev in sse_events(r.iter_lines()):
                first.append(ev)
                if ev["event"] == "delta":
                    break  # the connection drops mid-answer
        task_id, last_id = first[0]["data"]["task_id"], first[-1]["id"]
        with http.stream("GET", f"{backend}/answers/{task_id}", headers={"Last-Event-ID": last_id}) as r:
            rest = list(sse_events(r.iter_lines()))
        assert http.get(backend + "/answers/not-a-task").status_code == 404
    assert rest[-1]["event"] == "answer" and rest[0]["id"] > last_id
    shown = "".join(e["data"]["text"] for e in first + rest if e["event"] == "delta")
    assert shown == rest[-1]["data"]["answer"] == "Клиент повторяет запрос после ошибки 429 [1]."
