"""An asyncio chat backend on ragline that streams each answer to its HTTP client as server-sent events.

From a fresh clone, one command installs ragline with this example's extra, starts the stack,
ingests docs/ and serves on http://127.0.0.1:8081::

    make install && .venv/bin/ragline up && .venv/bin/ragline ingest docs --tenant demo --acl public --wait && .venv/bin/python examples/async_chat_backend.py

(outside the repository's venv: ``pip install "ragline[server,examples]"``). Then::

    curl -N localhost:8081/ask -d '{"question": "Как ragline изолирует арендаторов?"}'

The reply is ``text/event-stream``: a ``question`` event with the ``task_id``, ``delta`` events
(``{"text"}``) while a chat generator writes (``RAGLINE_ANSWER_PROVIDER=anthropic`` or ``openai``; the
offline ``extractive`` one sends its answer whole), then one ``answer`` or ``no_answer`` event
(``{"answer", "sources", "no_answer", "reason", "degraded"}``) whose ``answer`` replaces the text the
deltas showed: on ``no_answer`` (citations that failed validation, a generator that broke off) the
UI retracts it. A failure is an ``error`` event with the HTTP status it stands for (429, 503, 504).
Every answer event carries an SSE ``id``: a client that lost the connection reconnects to
``GET /answers/{task_id}`` with ``Last-Event-ID`` (EventSource does this by itself) and gets the
rest, nothing missed.

One event loop serves every user: ``AsyncRaglineClient`` awaits replies on Redis instead of a
thread per question, and the answer stream is read with ``redis.asyncio`` (``XREAD BLOCK``). The
backend decides who the caller is (here a fixed tenant and group list; in a real service, from the
session, which should also own the task ids it hands out) and ragline filters by it in SQL.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from ragline.shared.sdk.answer_stream import FIRST, AnswerEvent, read_answer
from ragline.shared.sdk.async_client import AsyncRaglineClient
from ragline.shared.sdk.client import RaglineError, RaglineRateLimited, RaglineTimeout, RaglineUnavailable

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(event: str, data: dict, event_id: str | None = None) -> str:
    """One server-sent event (JSON data on one line)."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def payload(ev: AnswerEvent) -> dict:
    if ev.type == "delta":
        return {"text": ev.text}
    if ev.response is None:  # an error event read on a resumed stream
        return {"error": ev.error, "detail": ev.detail}
    r = ev.response
    return {
        "answer": r.answer,
        "sources": [
            {"n": c.n, "doc_id": c.doc_id, "locator": c.locator, "path": c.path} for c in r.citations
        ],
        "no_answer": r.no_answer,
        "reason": r.reason,
        "degraded": r.degraded,
    }


async def relay(events: AsyncIterator[AnswerEvent], task_id: str | None = None) -> AsyncIterator[str]:
    """The answer events as SSE; ragline's typed errors as a last ``error`` event."""
    if task_id:
        yield sse("question", {"task_id": task_id})
    try:
        async for ev in events:
            yield sse(ev.type, payload(ev), ev.id)
    except RaglineRateLimited as exc:
        yield sse("error", {"error": "rate limited", "status": 429, "retry_after_s": exc.retry_after_s})
    except RaglineTimeout:
        yield sse("error", {"error": "ragline did not answer in time", "status": 504})
    except RaglineUnavailable:
        yield sse("error", {"error": "ragline is unavailable", "status": 503})
    except RaglineError as exc:
        yield sse("error", {"error": exc.error, "status": 422})


def create_app(client: AsyncRaglineClient, tenant: str, groups: list[str]) -> Starlette:
    async def ask(request: Request) -> StreamingResponse | JSONResponse:
        try:
            body = await request.json()
            question = str(body["question"])
            history = body.get("history") or []
        except (ValueError, KeyError, TypeError, AttributeError):
            return JSONResponse({"error": 'body must be {"question": "...", "history": [...]}'}, 400)
        task_id = str(uuid.uuid4())
        events = client.ask_stream(question, tenant=tenant, groups=groups, history=history, task_id=task_id)
        return StreamingResponse(relay(events, task_id), media_type="text/event-stream", headers=SSE_HEADERS)

    async def resume(request: Request) -> StreamingResponse | JSONResponse:
        try:
            task_id = str(uuid.UUID(request.path_params["task_id"]))
        except ValueError:
            return JSONResponse({"error": "not a task id"}, 404)
        after = request.headers.get("last-event-id") or FIRST
        events = read_answer(client.redis, task_id, after=after, timeout=client.timeout)
        return StreamingResponse(relay(events), media_type="text/event-stream", headers=SSE_HEADERS)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    return Starlette(
        routes=[Route("/ask", ask, methods=["POST"]), Route("/answers/{task_id}", resume, methods=["GET"])],
        lifespan=lifespan,
    )


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument(
        "--broker",
        default=None,
        help="Redis URL (default: REDIS_URL, or the embedded one as RAGLINE_SERVICES_REDIS_ROLE, e.g. chat)",
    )
    ap.add_argument("--tenant", default="demo")
    ap.add_argument("--groups", default="public")
    args = ap.parse_args()
    client = AsyncRaglineClient(args.broker)
    groups = [g for g in args.groups.split(",") if g]
    uvicorn.run(create_app(client, args.tenant, groups), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
