"""Streamed answers: the wire format of one question's Redis stream, and an asyncio reader.

A question sent with ``AskRequest.stream`` gets one Redis stream, named after the ask task's id
(:func:`ragline.shared.sdk.names.answer_stream_key`), into which the query worker adds entries as the
answer is generated (``query/answer/stream.py``). Every entry has a ``type``:

* ``delta``: ``text``, the next piece of the answer, already sanitised like the final answer
  (links and images only to URLs of the cited documents);
* ``answer``: ``data``, the final ``AskResponse`` (JSON) with validated citations;
* ``no_answer``: ``data``, an ``AskResponse`` with ``no_answer`` and its ``reason`` (citations that
  fail validation, a generator that broke off mid-answer, nothing relevant found);
* ``error``: ``data``, the task's error result (``{"error", "detail"}``: rate limited, deadline
  exceeded, internal error).

The last three are terminal: one of them ends every stream. Its response's ``answer`` is the
authoritative text and replaces what the deltas showed (a UI retracts the streamed text on
``no_answer`` and ``error``). A stream holds at most ``RAGLINE_ANSWER_STREAM_MAXLEN`` entries (the
worker merges deltas rather than let Redis trim any) and expires ``RAGLINE_ANSWER_STREAM_TTL_S``
after its last entry, so a reader that connects late, or reconnects with the last entry id it
saw, misses nothing within that time.

This module is producer code: it imports neither Celery nor any worker module.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from ragline.shared.sdk.client import RaglineTimeout
from ragline.shared.sdk.contracts import AskResponse
from ragline.shared.sdk.names import answer_stream_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

DELTA: Final = "delta"
ANSWER: Final = "answer"
NO_ANSWER: Final = "no_answer"
ERROR: Final = "error"
TERMINAL = frozenset({ANSWER, NO_ANSWER, ERROR})
#: read from the start of the stream
FIRST = "0-0"

EventType = Literal["delta", "answer", "no_answer", "error"]


class AnswerStreamTimeout(RaglineTimeout):
    """No entry arrived in the stream for ``timeout`` seconds: the query pool is down or slow, or
    the stream expired before it was read (a :class:`RaglineTimeout`, so a ``TimeoutError``)."""


@dataclass(frozen=True)
class AnswerEvent:
    """One entry of an answer stream; ``id`` is what a reconnecting reader passes as ``after``."""

    id: str
    type: EventType
    text: str = ""
    response: AskResponse | None = None
    error: str | None = None
    detail: Any = None

    @property
    def final(self) -> bool:
        return self.type in TERMINAL


# --------------------------------------------------------------------------------- wire format
def delta_fields(text: str) -> dict[str, str]:
    return {"type": DELTA, "text": text}


def terminal_fields(result: dict) -> dict[str, str]:
    """The terminal entry for an ask task's result (an ``AskResponse`` or an ``ErrorResult`` dict)."""
    if result.get("ok") is False:
        data = {"error": str(result.get("error") or "error"), "detail": result.get("detail")}
        return {"type": ERROR, "data": json.dumps(data, ensure_ascii=False, default=str)}
    kind = NO_ANSWER if result.get("no_answer") else ANSWER
    return {"type": kind, "data": json.dumps(result, ensure_ascii=False, default=str)}


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def decode_entry(entry_id: bytes | str, fields: dict) -> AnswerEvent:
    """An :class:`AnswerEvent` from one XREAD entry; an entry this reader cannot read is an error
    event (a newer worker, a damaged entry), so a reader never waits past it."""
    f = {_str(k): _str(v) for k, v in fields.items()}
    eid, kind = _str(entry_id), f.get("type", "")
    try:
        if kind == DELTA:
            return AnswerEvent(eid, DELTA, text=f.get("text", ""))
        if kind == ANSWER or kind == NO_ANSWER:
            resp = AskResponse.model_validate_json(f["data"])
            return AnswerEvent(eid, ANSWER if kind == ANSWER else NO_ANSWER, text=resp.answer, response=resp)
        if kind == ERROR:
            data = json.loads(f["data"])
            return AnswerEvent(eid, ERROR, error=str(data.get("error")), detail=data.get("detail"))
    except (KeyError, ValueError, AttributeError):
        pass
    return AnswerEvent(eid, ERROR, error="unreadable stream entry", detail={"type": kind})


# -------------------------------------------------------------------------------------- reader
async def read_answer(
    client: Redis,
    task_id: str,
    *,
    after: str = FIRST,
    timeout: float = 60.0,
    delete_at_end: bool = True,
) -> AsyncIterator[AnswerEvent]:
    """The events of ask task ``task_id``'s answer stream, from the entry after ``after`` (the
    last id a reader saw; the default reads from the start) up to and including the terminal one.

    Raises :class:`AnswerStreamTimeout` when no entry arrives for ``timeout`` seconds (also before
    the first one: the stream may not exist yet). With ``delete_at_end`` the stream is deleted
    once its terminal event was read (emptied), like every other ragline result that has been read once;
    a UI that fans one answer out to several readers passes ``False`` and lets it expire.
    Deleting empties it (``XTRIM``): the empty key itself expires with the stream's TTL.
    """
    key = answer_stream_key(task_id)
    loop = asyncio.get_running_loop()
    last = after
    idle_until = loop.time() + timeout
    while True:
        left = idle_until - loop.time()
        if left <= 0:
            raise AnswerStreamTimeout("stream timeout", {"task_id": task_id, "waited_s": timeout})
        # BLOCK 0 would wait forever: always a bounded wait, at least a millisecond
        found = await client.xread({key: last}, count=256, block=max(1, int(min(left, 5.0) * 1000)))
        if not found:
            continue
        for entry_id, fields in found[0][1]:
            event = decode_entry(entry_id, fields)
            last = event.id
            idle_until = loop.time() + timeout
            yield event
            if event.final:
                if delete_at_end:  # emptied: a producer's Redis user has no DEL (shared/sdk/redis_acl.py)
                    await client.xtrim(key, maxlen=0, approximate=False)
                return


def redis_client(url: str) -> Redis:
    """An asyncio Redis client for :func:`read_answer` (the broker's URL)."""
    # only where a reader is built: the query worker imports this module for the wire format alone
    from redis.asyncio import Redis

    return Redis.from_url(url, socket_connect_timeout=5)
