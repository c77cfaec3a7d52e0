"""The base class of the HTTP embedders: everything around one request, written once.

Every API embedder needs the same loop around its request, and getting any part of it wrong costs
either the provider's quota or the ingestion run:

* batches of at most ``embed.batch_size`` texts and ``embed.batch_tokens`` estimated tokens
  (:func:`plan_batches`), so a large document set never exceeds a request limit;
* admission per HTTP attempt (:class:`EmbedAdmission`): RPM/TPM budget and, for document batches,
  a cluster-wide in-flight slot, because the provider's quota is per account, not per process;
* retries of :class:`TransientProviderError` (429, 5xx, timeouts, connection errors) with
  exponential backoff that never comes sooner than the server's ``Retry-After``
  (:func:`call_with_retries`), then a :class:`ProviderError` that fails the documents visibly;
* vectors matched to their texts by each item's ``index`` (:func:`match_by_index`): a provider may
  answer out of order, and a vector stored under the wrong chunk is a silent retrieval bug;
* latency and embedded-text metrics per successful request.

A provider subclass sets :attr:`BatchingEmbedder.provider` and implements
:meth:`BatchingEmbedder._request` (one HTTP call for one batch). The ``Embedder`` protocol itself
stays in ``ragline.shared.worker.providers``: importing the package must not load any provider module,
so a process that never embeds (the control pool) stays free of them.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import ClassVar

from ragline.shared.config.settings import Settings
from ragline.shared.worker.metrics import EMBED_BATCH_LATENCY_MS, EMBED_TEXTS
from ragline.shared.worker.providers import ProviderError
from ragline.shared.worker.providers.batching import plan_batches
from ragline.shared.worker.providers.ratelimit import EmbedAdmission
from ragline.shared.worker.providers.retry import call_with_retries


class BatchingEmbedder(ABC):
    """An embedding API client that only knows how to send one batch (see the module docstring).

    Satisfies the ``Embedder`` protocol: ``model``, ``dim``, :meth:`embed_documents` and
    :meth:`embed_query`.
    """

    #: the provider's name in metrics, admission keys and error messages
    provider: ClassVar[str]
    #: True: a query makes a single attempt within ``deadlines.query_embed_timeout_s``, because the query
    #: path degrades to lexical search instead of waiting out the ingest retry policy.
    #: False: a query goes through the same batching, admission and retries as documents.
    single_attempt_queries: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model = settings.embed.model_name
        self.dim = settings.embed.dim
        self._admission = EmbedAdmission(settings, self.provider)

    # --- what a provider implements ------------------------------------------------------------
    @abstractmethod
    def _request(self, texts: list[str], input_type: str, timeout: float | None = None) -> list:
        """One HTTP call for one batch; ``input_type`` is ``"document"`` or ``"query"``.

        Returns one item per text, each carrying its ``index`` into ``texts`` and its
        ``embedding`` (as attributes or dict keys), in any order. Raises
        :class:`TransientProviderError` for failures worth retrying (with the server's
        ``Retry-After`` when it sent one) and :class:`ProviderError` for the rest. ``timeout``
        overrides the client's request timeout when given.
        """

    def _prepare(self, texts: list[str], input_type: str) -> list[str]:
        """The texts as the model expects them (task prefixes, for instance); unchanged by default."""
        return texts

    # --- the Embedder protocol -----------------------------------------------------------------
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in input order; every batch gets the full retry policy."""
        return self._embed(self._prepare(texts, "document"), "document")

    def embed_query(self, text: str) -> list[float]:
        """The vector of one question (see :attr:`single_attempt_queries`)."""
        texts = self._prepare([text], "query")
        if self.single_attempt_queries:
            return self._attempt(texts, "query", timeout=self.settings.deadlines.query_embed_timeout_s)[0]
        return self._embed(texts, "query")[0]

    # --- batching, retries, admission, matching --------------------------------------------------
    def _embed(self, texts: list[str], input_type: str) -> list[list[float]]:
        s = self.settings
        out: list[list[float]] = []
        for batch in plan_batches(texts, s.embed.batch_size, s.embed.batch_tokens):
            out.extend(
                call_with_retries(
                    lambda b=batch: self._attempt(b, input_type),
                    self.provider,
                    s.embed.max_retries + 1,
                    s.embed.backoff_base_s,
                    s.embed.backoff_max_s,
                )
            )
        return out

    def _attempt(self, texts: list[str], input_type: str, timeout: float | None = None) -> list[list[float]]:
        """One admitted request: only document batches take an in-flight slot, so a question
        never queues behind ingestion for one."""
        t0 = time.perf_counter()
        with self._admission.admit(texts, batch=input_type == "document"):
            items = self._request(texts, input_type, timeout)
        vectors = match_by_index(items, len(texts), self.dim, self.provider)
        EMBED_BATCH_LATENCY_MS.labels(self.provider).observe((time.perf_counter() - t0) * 1000)
        EMBED_TEXTS.labels(self.provider).inc(len(texts))
        return vectors


def match_by_index(data: object, n: int, dim: int, provider: str) -> list[list[float]]:
    """Vectors in input order from items that carry their ``index``; any gap or duplicate fails."""
    if not isinstance(data, list) or len(data) != n:
        raise ProviderError(
            f"{provider}: expected {n} embeddings, got {len(data) if isinstance(data, list) else data!r}"
        )
    out: list[list[float] | None] = [None] * n
    for item in data:
        idx = item.get("index") if isinstance(item, dict) else getattr(item, "index", None)
        vec = item.get("embedding") if isinstance(item, dict) else getattr(item, "embedding", None)
        if not isinstance(idx, int) or not 0 <= idx < n or out[idx] is not None:
            raise ProviderError(f"{provider}: bad or duplicate embedding index {idx!r}")
        if not isinstance(vec, list) or len(vec) != dim:
            raise ProviderError(
                f"{provider}: embedding {idx} has {len(vec) if isinstance(vec, list) else '?'} "
                f"dimensions, expected {dim} (set RAGLINE_EMBED_DIM to the model's size)"
            )
        out[idx] = [float(x) for x in vec]
    return out  # type: ignore[return-value]
