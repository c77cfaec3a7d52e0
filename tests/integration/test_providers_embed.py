"""Voyage and Ollama embedders against real HTTP servers on 127.0.0.1 (tests/loopback.py), with the
cluster-wide in-flight limiter and RPM/TPM budgets in the test session's Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from ragline.shared.worker.providers import ProviderError
from tests.conftest import REPO
from tests.loopback import Faults, LoopbackServer, hashed_embedding

TEXTS = [f"Требование {i}: приложение проверяет права доступа на сервере." for i in range(10)]


def _voyage(use_settings, srv, **kw):
    from ragline.shared.worker.providers import get_embedder

    use_settings(
        embed_provider="voyage",
        providers_voyage_base_url=srv.url + "/v1",
        providers_voyage_api_key="test-key",
        embed_backoff_base_s=0.01,
        embed_backoff_max_s=0.05,
        **kw,
    )
    return get_embedder()


def _counter(metric, provider: str) -> float:
    return metric.labels(provider)._value.get()


def test_vectors_are_matched_by_index_not_position(use_settings):
    with LoopbackServer() as srv:  # answers items in reverse order
        emb = _voyage(use_settings, srv)
        vectors = emb.embed_documents(TEXTS)
        q = emb.embed_query("Кто проверяет права?")
    np.testing.assert_allclose(vectors, [hashed_embedding(t, 384) for t in TEXTS], atol=1e-6)
    np.testing.assert_allclose(q, hashed_embedding("Кто проверяет права?", 384), atol=1e-6)
    doc_body, query_body = srv.stats.bodies
    assert (doc_body["model"], doc_body["input_type"], doc_body["output_dimension"]) == (
        "voyage-4",
        "document",
        384,
    )
    assert query_body["input_type"] == "query"
    assert srv.stats.headers[0]["authorization"] == "Bearer test-key"
    assert "test-key" not in repr(emb)


def test_batches_hold_at_most_128_texts_and_the_token_budget(use_settings):
    texts = [f"короткий текст {i}" for i in range(300)]
    with LoopbackServer() as srv:
        emb = _voyage(use_settings, srv)
        assert len(emb.embed_documents(texts)) == 300
        assert [len(b["input"]) for b in srv.stats.bodies] == [128, 128, 44]
        srv.reset_stats()
        emb = _voyage(use_settings, srv, embed_batch_tokens=200)  # ~7 tokens each: ~28 texts a batch
        assert len(emb.embed_documents(texts[:100])) == 100
        sizes = [len(b["input"]) for b in srv.stats.bodies]
    assert sum(sizes) == 100 and len(sizes) >= 4 and max(sizes) < 128


def test_429_storm_is_retried_honouring_retry_after(use_settings):
    from ragline.shared.worker.metrics import EMBED_429, EMBED_RETRIES

    before_429, before_retries = _counter(EMBED_429, "voyage"), _counter(EMBED_RETRIES, "voyage")
    with LoopbackServer(faults=Faults(every_nth_429=2, retry_after_s=0.3)) as srv:
        emb = _voyage(use_settings, srv, embed_batch_size=2)
        t0 = time.monotonic()
        vectors = emb.embed_documents(TEXTS[:6])  # 3 batches; every 2nd request is a 429
        elapsed = time.monotonic() - t0
    np.testing.assert_allclose(vectors, [hashed_embedding(t, 384) for t in TEXTS[:6]], atol=1e-6)
    assert srv.stats.answered_429 >= 2
    assert elapsed >= 0.3 * srv.stats.answered_429  # each 429 waited at least its Retry-After
    assert _counter(EMBED_429, "voyage") - before_429 == srv.stats.answered_429
    assert _counter(EMBED_RETRIES, "voyage") - before_retries == srv.stats.answered_429


def test_500s_are_retried_then_succeed(use_settings):
    with LoopbackServer(faults=Faults(fail_first_n=2)) as srv:
        emb = _voyage(use_settings, srv)
        assert len(emb.embed_documents(TEXTS[:3])) == 3
    assert srv.stats.answered_500 == 2 and srv.stats.requests == 3


def test_persistent_500_gives_up_after_the_retry_budget(use_settings):
    with LoopbackServer(faults=Faults(every_nth_500=1)) as srv:
        emb = _voyage(use_settings, srv, embed_max_retries=2)
        with pytest.raises(Exception, match="voyage"):
            emb.embed_documents(TEXTS[:3])
    assert srv.stats.requests == 3


def test_hang_past_the_timeout_is_retried_then_fails(use_settings):
    with LoopbackServer(faults=Faults(hang_s=2.0)) as srv:
        emb = _voyage(use_settings, srv, embed_timeout_s=0.3, embed_max_retries=1)
        with pytest.raises(Exception, match="Timeout|timed out"):
            emb.embed_documents(TEXTS[:2])
        assert srv.stats.requests == 2


def test_empty_input_sends_nothing(use_settings):
    with LoopbackServer() as srv:
        emb = _voyage(use_settings, srv)
        assert emb.embed_documents([]) == [] and srv.stats.requests == 0


_WORKER = r"""
import json, os, sys, threading
from ragline.shared.worker.providers import get_embedder
emb = get_embedder()
texts = [f"процесс {os.getpid()} текст {i}" for i in range(int(sys.argv[1]))]
errors = []
def run():
    try:
        assert len(emb.embed_documents(texts)) == len(texts)
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=run) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps({"errors": errors}))
"""


def _run_processes(srv, cap: int, n_texts: int, procs: int = 3) -> list[dict]:
    env = {
        **os.environ,
        "RAGLINE_EMBED_PROVIDER": "voyage",
        "RAGLINE_PROVIDERS_VOYAGE_BASE_URL": srv.url + "/v1",
        "RAGLINE_PROVIDERS_VOYAGE_API_KEY": "test-key",
        "RAGLINE_EMBED_BATCH_SIZE": "4",
        "RAGLINE_EMBED_MAX_IN_FLIGHT": str(cap),
    }
    ps = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(n_texts)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs)
    ]
    out = []
    for p in ps:
        stdout, stderr = p.communicate(timeout=180)
        assert p.returncode == 0, stderr[-2000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


@pytest.mark.slow
def test_in_flight_cap_holds_across_processes(stack):
    """3 processes x 2 threads each send 3 batches; the server never sees more than the cap at once."""
    with LoopbackServer(faults=Faults(latency_s=0.15)) as srv:
        results = _run_processes(srv, cap=2, n_texts=12)
        assert all(r["errors"] == [] for r in results)
        assert srv.stats.requests == 18
        assert srv.stats.max_in_flight == 2
        # control: with a high cap the same load does overlap more, so the check above can fail
        srv.reset_stats()
        _run_processes(srv, cap=100, n_texts=12)
        assert srv.stats.max_in_flight > 2


def test_rate_limits_block_past_the_budget(stack):
    from ragline.shared.worker.providers.ratelimit import LimiterTimeout, RateLimits

    rl = RateLimits(stack.effective_redis_url(), f"test-rpm-{time.time_ns()}", rpm=2, tpm=1000)
    rl.wait(10, wait_s=0.2)
    rl.wait(10, wait_s=0.2)
    with pytest.raises(LimiterTimeout, match="rpm"):
        rl.wait(10, wait_s=0.2)
    tpm = RateLimits(stack.effective_redis_url(), f"test-tpm-{time.time_ns()}", rpm=100, tpm=50)
    tpm.wait(40, wait_s=0.2)
    with pytest.raises(LimiterTimeout, match="tpm"):
        tpm.wait(40, wait_s=0.2)


def test_in_flight_lease_expires_when_a_holder_dies(stack):
    from ragline.shared.worker.providers.ratelimit import InFlightLimiter, redis_client

    lim = InFlightLimiter(
        redis_client(stack.effective_redis_url()), f"test-{time.time_ns()}", limit=1, lease_s=0.3
    )
    assert lim.try_acquire() is not None  # never released, like a killed worker
    assert lim.try_acquire() is None
    time.sleep(0.35)
    assert lim.try_acquire() is not None


def test_garbage_indexes_are_rejected():
    from ragline.shared.worker.providers.embedder import match_by_index

    good = [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}]
    assert match_by_index(good, 2, 2, "voyage") == [[1.0, 0.0], [0.0, 1.0]]
    for bad in (
        [{"index": 0, "embedding": [1.0, 0.0]}] * 2,
        [{"index": 5, "embedding": [1.0, 0.0]}, good[0]],
        [{"index": 0, "embedding": [1.0]}, good[0]],
        good[:1],
    ):
        with pytest.raises(ProviderError):
            match_by_index(bad, 2, 2, "voyage")


def test_ollama_embedder(use_settings):
    from ragline.shared.worker.providers import get_embedder

    with LoopbackServer(faults=Faults(fail_first_n=1)) as srv:
        use_settings(embed_provider="ollama", providers_ollama_base_url=srv.url, embed_backoff_base_s=0.01)
        emb = get_embedder()
        vectors = emb.embed_documents(TEXTS[:3])
        q = emb.embed_query("вопрос")
    assert emb.model == "nomic-embed-text"
    np.testing.assert_allclose(
        vectors, [hashed_embedding("search_document: " + t, 384) for t in TEXTS[:3]], atol=1e-6
    )
    np.testing.assert_allclose(q, hashed_embedding("search_query: вопрос", 384), atol=1e-6)
    assert srv.stats.answered_500 == 1 and srv.stats.bodies[1]["model"] == "nomic-embed-text"


def test_queries_do_not_wait_for_batch_slots(use_settings):
    from ragline.shared.worker.providers.ratelimit import LimiterTimeout

    with LoopbackServer() as srv:
        emb = _voyage(use_settings, srv, embed_max_in_flight=1, embed_admission_wait_s=0.3)
        slots = emb._admission.slots
        token = slots.try_acquire()  # another worker's batch holds the only slot
        try:
            assert len(emb.embed_query("вопрос пользователя")) == 384
            with pytest.raises(LimiterTimeout):
                emb.embed_documents(["документ"])
        finally:
            slots.release(token)
        assert len(emb.embed_documents(["документ"])) == 1
    assert [b["input_type"] for b in srv.stats.bodies] == ["query", "document"]


def test_query_embedding_makes_one_attempt_within_the_query_deadline(use_settings):
    """A failing embedder costs a question one request, not the ingest retry policy (the query path
    degrades to lexical search instead of retrying in the background)."""
    with LoopbackServer(faults=Faults(every_nth_500=1)) as srv:
        emb = _voyage(use_settings, srv, embed_max_retries=6)
        with pytest.raises(Exception, match="voyage"):
            emb.embed_query("вопрос")
        time.sleep(0.2)  # nothing retries behind our back
        assert srv.stats.by_path.get("/v1/embeddings") == 1
        srv.reset_stats()
        with pytest.raises(Exception, match="voyage"):
            emb.embed_documents(["документ"])
        assert srv.stats.by_path.get("/v1/embeddings") == 7  # documents keep the full retry policy


def test_a_freed_slot_wakes_a_waiter_instead_of_waiting_for_its_poll(stack):
    import threading

    from ragline.shared.worker.providers.ratelimit import InFlightLimiter, redis_client

    url = stack.effective_redis_url()
    name = f"test-wake-{time.time_ns()}"
    holder = InFlightLimiter(redis_client(url), name, limit=1, lease_s=30)
    token = holder.try_acquire()
    assert token is not None
    got: list[float] = []

    def wait_for_slot() -> None:
        lim = InFlightLimiter(redis_client(url), name, limit=1, lease_s=30)
        lim.poll_s = 5.0  # without a wake-up it would look again only after 5-10 s
        with lim.slot(wait_s=20):
            got.append(time.monotonic())

    waiter = threading.Thread(target=wait_for_slot)
    waiter.start()
    time.sleep(0.3)
    assert not got  # blocked while the only slot is held
    released = time.monotonic()
    holder.release(token)
    waiter.join(20)
    assert got and got[0] - released < 2.5  # woken by the release, not by its 5 s fallback
