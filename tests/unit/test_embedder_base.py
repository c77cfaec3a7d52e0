"""BatchingEmbedder with a fake provider: batch limits, retries, admission per attempt, index matching.

The fake's ``_request`` records every call and answers in reverse order, so any test that gets its
vectors back in input order also checks that the base matches them by ``index``. Admission is a
recording stand-in: the shared Redis limits are covered in tests/integration/test_providers_embed.py.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest

from ragline.shared.config.settings import Settings
from ragline.shared.worker.metrics import EMBED_429, EMBED_RETRIES
from ragline.shared.worker.providers import Embedder, ProviderError
from ragline.shared.worker.providers import embedder as embedder_module
from ragline.shared.worker.providers.batching import estimate_tokens
from ragline.shared.worker.providers.embedder import BatchingEmbedder, match_by_index
from ragline.shared.worker.providers.retry import TransientProviderError

DIM = 3


def vector(text: str) -> list[float]:
    """A distinct vector per text, so a vector under the wrong text is noticed."""
    return [float(len(text)), float(sum(map(ord, text)) % 1009), 1.0]


class RecordingAdmission:
    def __init__(self, settings, provider: str) -> None:
        self.provider = provider
        self.calls: list[tuple[int, bool]] = []  # (texts, took a batch slot)

    @contextmanager
    def admit(self, texts: list[str], batch: bool = True):
        self.calls.append((len(texts), batch))
        yield


class FakeEmbedder(BatchingEmbedder):
    provider = "fake"

    def __init__(self, settings: Settings, faults: list[Exception | None] | None = None) -> None:
        super().__init__(settings)
        self.faults = list(faults or [])  # one entry per request: raise it, or answer (None)
        self.requests: list[tuple[list[str], str, float | None]] = []
        self.answer = lambda texts: [{"index": i, "embedding": vector(t)} for i, t in enumerate(texts)][::-1]

    def _request(self, texts: list[str], input_type: str, timeout: float | None = None) -> list:
        self.requests.append((list(texts), input_type, timeout))
        fault = self.faults.pop(0) if self.faults else None
        if fault is not None:
            raise fault
        return self.answer(texts)


@pytest.fixture(autouse=True)
def recording_admission(monkeypatch):
    monkeypatch.setattr(embedder_module, "EmbedAdmission", RecordingAdmission)


def make(faults=None, **overrides) -> FakeEmbedder:
    settings = Settings(
        embed_dim=DIM,
        embed_backoff_base_s=0.01,
        embed_backoff_max_s=0.05,
        deadlines_query_embed_timeout_s=2.5,
        **overrides,
    )
    return FakeEmbedder(settings, faults)


def counter(metric) -> float:
    return metric.labels("fake")._value.get()


def test_satisfies_the_embedder_protocol():
    emb = make()
    assert isinstance(emb, Embedder)
    assert (emb.dim, emb._admission.provider) == (DIM, "fake")


def test_batches_hold_at_most_128_texts_in_input_order():
    texts = [f"короткий текст {i}" for i in range(300)]
    emb = make()
    vectors = emb.embed_documents(texts)
    assert [len(t) for t, _, _ in emb.requests] == [128, 128, 44]
    assert [t for batch, _, _ in emb.requests for t in batch] == texts
    assert vectors == [vector(t) for t in texts]
    assert emb._admission.calls == [(128, True), (128, True), (44, True)]


def test_batches_hold_the_token_budget():
    texts = [f"короткий текст {i}" for i in range(100)]  # ~7 estimated tokens each
    emb = make(embed_batch_tokens=50)
    vectors = emb.embed_documents(texts)
    sizes = [len(t) for t, _, _ in emb.requests]
    assert sum(sizes) == 100 and len(sizes) >= 10 and max(sizes) < 10
    assert all(sum(estimate_tokens(t) for t in batch) <= 50 for batch, _, _ in emb.requests)
    assert vectors == [vector(t) for t in texts]


def test_a_text_over_the_token_budget_goes_alone():
    texts = ["a", "б" * 600, "c"]  # the middle one is ~201 tokens
    emb = make(embed_batch_tokens=100)
    assert emb.embed_documents(texts) == [vector(t) for t in texts]
    assert [batch for batch, _, _ in emb.requests] == [["a"], ["б" * 600], ["c"]]


def test_transient_errors_are_retried_then_succeed_no_sooner_than_retry_after():
    before_retries, before_429 = counter(EMBED_RETRIES), counter(EMBED_429)
    emb = make(
        faults=[
            TransientProviderError("fake: HTTP 503", 503),
            TransientProviderError("fake: HTTP 429", 429, retry_after=0.3),
            None,
        ]
    )
    t0 = time.monotonic()
    vectors = emb.embed_documents(["один", "два"])
    elapsed = time.monotonic() - t0
    assert vectors == [vector("один"), vector("два")]
    assert [batch for batch, _, _ in emb.requests] == [["один", "два"]] * 3
    assert elapsed >= 0.3  # the 429 waited its Retry-After, longer than the 0.05 s backoff cap
    assert emb._admission.calls == [(2, True)] * 3  # every attempt is admitted again
    assert counter(EMBED_RETRIES) - before_retries == 2
    assert counter(EMBED_429) - before_429 == 1


def test_retries_exhausted_raise_provider_error():
    emb = make(faults=[TransientProviderError("fake: HTTP 500", 500)] * 10, embed_max_retries=2)
    with pytest.raises(ProviderError, match=r"fake: HTTP 500 \(gave up after 3 attempts\)"):
        emb.embed_documents(["текст"])
    assert len(emb.requests) == 3


def test_permanent_errors_are_not_retried():
    emb = make(faults=[ProviderError("fake: HTTP 401: bad key")], embed_max_retries=5)
    with pytest.raises(ProviderError, match="401"):
        emb.embed_documents(["текст"])
    assert len(emb.requests) == 1


def test_a_failing_batch_stops_the_run():
    emb = make(faults=[None, ProviderError("fake: HTTP 400")], embed_batch_size=2)
    with pytest.raises(ProviderError, match="400"):
        emb.embed_documents(["a", "b", "c", "d", "e"])
    assert [batch for batch, _, _ in emb.requests] == [["a", "b"], ["c", "d"]]


def test_vectors_are_reordered_by_index():
    texts = ["первый", "второй", "третий", "четвёртый"]
    emb = make()
    order = [2, 0, 3, 1]
    emb.answer = lambda ts: [{"index": i, "embedding": vector(ts[i])} for i in order]
    assert emb.embed_documents(texts) == [vector(t) for t in texts]


@pytest.mark.parametrize(
    "answer",
    [
        lambda ts: [{"index": 0, "embedding": vector(ts[0])}] * len(ts),  # duplicate index
        lambda ts: [{"index": i + 1, "embedding": vector(t)} for i, t in enumerate(ts)],  # out of range
        lambda ts: [{"index": i, "embedding": [1.0]} for i, _ in enumerate(ts)],  # wrong dimension
        lambda ts: [{"index": 0, "embedding": vector(ts[0])}],  # too few
        lambda ts: None,  # no list at all
    ],
)
def test_bad_answers_fail_without_retry(answer):
    emb = make(embed_max_retries=5)
    emb.answer = answer
    with pytest.raises(ProviderError, match="fake"):
        emb.embed_documents(["a", "b"])
    assert len(emb.requests) == 1


def test_match_by_index_reads_attributes_too():
    class Item:
        def __init__(self, index, embedding):
            self.index, self.embedding = index, embedding

    assert match_by_index([Item(1, [2, 2]), Item(0, [1, 1])], 2, 2, "fake") == [[1.0, 1.0], [2.0, 2.0]]


def test_query_is_one_attempt_within_the_query_deadline_without_a_batch_slot():
    emb = make()
    assert emb.embed_query("вопрос") == vector("вопрос")
    assert emb.requests == [(["вопрос"], "query", 2.5)]
    assert emb._admission.calls == [(1, False)]
    failing = make(faults=[TransientProviderError("fake: HTTP 503", 503)] * 3, embed_max_retries=5)
    with pytest.raises(Exception, match="fake: HTTP 503"):
        failing.embed_query("вопрос")
    assert len(failing.requests) == 1


def test_documents_are_document_input_with_the_client_timeout():
    emb = make()
    emb.embed_documents(["документ"])
    assert emb.requests == [(["документ"], "document", None)]


def test_retried_queries_and_prepared_texts():
    """A provider may put queries through the retry policy and rewrite texts (task prefixes)
    before batching, so the token budget counts what is sent."""

    class Prefixed(FakeEmbedder):
        single_attempt_queries = False

        def _prepare(self, texts, input_type):
            return [f"{input_type}: {t}" for t in texts]

    settings = Settings(embed_dim=DIM, embed_backoff_base_s=0.01, embed_backoff_max_s=0.05)
    emb = Prefixed(settings, faults=[TransientProviderError("fake: timeout")])
    assert emb.embed_query("вопрос") == vector("query: вопрос")
    assert [(b, t, timeout) for b, t, timeout in emb.requests] == [(["query: вопрос"], "query", None)] * 2
    assert emb._admission.calls == [(1, False)] * 2

    tight = Prefixed(Settings(embed_dim=DIM, embed_batch_tokens=8))
    tight.embed_documents(["x" * 6, "y" * 6])  # 3 tokens each alone, 6 with the prefix
    assert [b for b, _, _ in tight.requests] == [["document: " + "x" * 6], ["document: " + "y" * 6]]


def test_empty_input_sends_nothing():
    emb = make()
    assert emb.embed_documents([]) == []
    assert emb.requests == [] and emb._admission.calls == []
