"""AsyncRaglineClient on the real stack: every method, replies read once, many questions on one
event loop without a thread each, and a cancelled question revoked with nothing left in Redis."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from ragline.shared.sdk.async_client import AsyncRaglineClient
from ragline.shared.sdk.client import RaglineError
from ragline.shared.sdk.names import CONTROL_CANCEL_QUESTION
from tests.integration.query_corpus import ISOLATION_DOCS, store_docs


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, ISOLATION_DOCS, dim=384)
    return tenant


class Recorder:
    """The task ids a client sends (its ``publish`` wrapped)."""

    def __init__(self, client: AsyncRaglineClient) -> None:
        self.ids: list[str] = []
        publish = client.publish

        async def recording(task, payload, queue, task_id=None, expires=None):
            self.ids.append(task_id)
            return await publish(task, payload, queue, task_id, expires)

        client.publish = recording  # type: ignore[method-assign]


def _result_keys(url: str, ids: list[str]) -> list[str]:
    r = redis.Redis.from_url(url)
    return [i for i in ids if r.exists(f"celery-task-meta-{i}")]


def test_async_client_methods_and_replies_read_once(celery_worker, corpus, stack):
    url = stack.effective_redis_url()

    async def main():
        async with AsyncRaglineClient(url, timeout=60) as client:
            sent = Recorder(client)
            found = await client.search("изоляция арендаторов", tenant=corpus, groups=["g"], mode="lexical")
            res = await client.ask("Как изолированы арендаторы?", tenant=corpus, groups=["g"], mode="lexical")
            hidden = await client.search("изоляция арендаторов", tenant=corpus, groups=["hr"], mode="lexical")
            with pytest.raises(RaglineError) as err:  # a structured error reply, raised
                await client._call(
                    "ragline.query.ask", {"query": "x", "tenant": corpus, "groups": ["g"], "k": 0}, 30
                )
            synced = await client.sync_acl(
                [{"tenant": corpus, "doc_id": "iso.md", "acl": ["hr"], "version": 5}]
            )
            gone = await client.send_event(
                {"type": "delete", "tenant": corpus, "doc_id": "iso.md", "version": 6}
            )
            return found, res, hidden, err.value, synced, gone, sent.ids

    found, res, hidden, err, synced, gone, ids = asyncio.run(main())
    assert [h.doc_id for h in found.hits] == ["iso.md"] and hidden.hits == []
    assert res.citations and res.citations[0].doc_id == "iso.md" and not res.no_answer
    assert err.error == "invalid payload"
    assert (synced.documents_updated, synced.chunks_updated) == (1, 1)
    assert gone.outcome == "deleted" and gone.chunks_deleted == 1
    assert len(ids) == 6 and _result_keys(url, ids) == []  # every reply deleted once read


def test_many_questions_on_one_loop_without_a_thread_each(celery_worker, corpus, stack):
    n = 40
    peak = [threading.active_count()]

    async def main():
        async with AsyncRaglineClient(stack.effective_redis_url(), timeout=120) as client:
            # warm: the in-process worker starts its pool threads and connections on demand
            warm = [client.search("изоляция", tenant=corpus, groups=["g"], mode="lexical") for _ in range(8)]
            first = (await asyncio.gather(*warm))[0]
            before = threading.active_count()
            publishers = [t for t in threading.enumerate() if t.name.startswith("ragline-publish")]
            assert len(publishers) == 1

            async def watch():
                while True:
                    peak[0] = max(peak[0], threading.active_count())
                    await asyncio.sleep(0.01)

            watcher = asyncio.create_task(watch())
            outs = await asyncio.gather(
                *(
                    client.search(f"изоляция {i}", tenant=corpus, groups=["g"], mode="lexical")
                    for i in range(n)
                )
            )
            watcher.cancel()
            return first, before, outs

    first, before, outs = asyncio.run(main())
    assert first.hits and all([h.doc_id for h in o.hits] == ["iso.md"] for o in outs)
    # the client's one publishing thread was already there; the in-process worker may add a pool
    # thread or two on demand, a thread per question would add n
    assert peak[0] - before < n // 4


def test_client_serves_a_second_event_loop(celery_worker, corpus, stack):
    client = AsyncRaglineClient(stack.effective_redis_url(), timeout=60)
    for _ in range(2):  # asyncio.run twice: connections of the first loop are not reused
        found = asyncio.run(client.search("изоляция", tenant=corpus, groups=["g"], mode="lexical"))
        assert [h.doc_id for h in found.hits] == ["iso.md"]
    asyncio.run(client.aclose())


def test_cancelled_question_is_revoked_and_leaves_nothing(celery_worker, corpus, stack):
    from celery.worker import state as worker_state

    url = stack.effective_redis_url()

    async def main():
        async with AsyncRaglineClient(url, timeout=30) as client:
            sent = Recorder(client)
            question = asyncio.create_task(
                client.ask("Как изолированы арендаторы?", tenant=corpus, groups=["g"], mode="lexical")
            )
            while not sent.ids and not question.done():
                await asyncio.sleep(0.001)
            assert not question.done(), question  # sent, not answered or failed yet
            question.cancel()
            with pytest.raises(asyncio.CancelledError):
                await question
            return sent.ids[0]  # leaving the block waits for the clean-up of the late reply

    task_id = asyncio.run(main())
    # the broadcast reaches the in-process worker's control thread, which adds the id to its
    # revoked set before it handles the backend: wait for both to settle
    deadline = time.monotonic() + 30
    while (
        task_id not in worker_state.revoked or _result_keys(url, [task_id])
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert task_id in worker_state.revoked
    assert _result_keys(url, [task_id]) == []  # answered or skipped, its reply is not left in Redis


def test_a_revoke_arriving_after_the_answer_leaves_nothing(celery_worker, corpus, stack):
    """The cancellation's race with its own answer, in order: the worker answers, the client
    deletes the reply, then the cancellation reaches the worker (Celery's revoke, which it runs,
    stores REVOKED for a task it no longer has, without the signal a skip sends)."""
    from ragline.shared.worker.celery_app import app

    url = stack.effective_redis_url()

    async def main():
        async with AsyncRaglineClient(url, timeout=30) as client:
            sent = Recorder(client)
            await client.search("изоляция", tenant=corpus, groups=["g"], mode="lexical")
            return sent.ids[0]

    task_id = asyncio.run(main())
    assert _result_keys(url, [task_id]) == []  # read once and deleted
    replies = app.control.broadcast(  # returns once the worker handled it
        CONTROL_CANCEL_QUESTION, arguments={"task_id": task_id}, reply=True, timeout=10
    )
    assert replies, "the worker did not answer the cancellation"
    assert all("error" not in reply for answer in replies for reply in answer.values()), replies
    assert _result_keys(url, [task_id]) == []


@pytest.mark.slow
def test_bench_g_smoke(celery_worker, monkeypatch, tmp_path):
    """Bench g at a tiny size on the session worker: the structure of what it writes and its
    consistency, never its timings."""
    from bench import async_client, common
    from tests.integration.test_bench_smoke import _check_result

    monkeypatch.setattr(common, "EXTERNAL_WORKER", True)
    data = _check_result(async_client.run(out_dir=tmp_path, **async_client.SMOKE), tmp_path, "async_client")
    raw, n = data["raw"], async_client.SMOKE["concurrency"]
    assert len(raw["rounds"]) == async_client.SMOKE["rounds"]
    for kind in ("async", "sync"):
        assert raw[kind]["n"] == n * async_client.SMOKE["rounds"] and raw[kind]["failed"] == 0
        assert raw[kind]["client_cpu_ms_per_question"]["median"] > 0
    # the synchronous client's burst runs a thread per question; the asyncio client's does not
    assert raw["sync"]["extra_threads"]["max"] >= n > raw["async"]["extra_threads"]["max"]
