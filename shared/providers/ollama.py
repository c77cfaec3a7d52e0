"""Ollama embeddings (nomic-embed-text by default) over its HTTP API ``POST /api/embed``.

nomic-embed-text expects task prefixes; ``dimensions`` asks for a Matryoshka-truncated vector
of the schema's size. The same cluster-wide admission and retry policy as Voyage applies.
"""

from __future__ import annotations

import time

import httpx

from ragline.shared.metrics import EMBED_BATCH_LATENCY_MS, EMBED_TEXTS
from ragline.shared.providers import ProviderError
from ragline.shared.providers.batching import plan_batches
from ragline.shared.providers.ratelimit import EmbedAdmission
from ragline.shared.providers.retry import TransientProviderError, call_with_retries, parse_retry_after
from ragline.shared.settings import Settings

PREFIX = {"document": "search_document: ", "query": "search_query: "}


class OllamaEmbedder:
    provider = "ollama"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model = settings.embed_model_name
        self.dim = settings.embed_dim
        self._url = settings.ollama_base_url.rstrip("/") + "/api/embed"
        self._client = httpx.Client(timeout=settings.embed_timeout_s)
        self._admission = EmbedAdmission(settings, self.provider)
        self._prefix = "nomic" in self.model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts, "document")

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text], "query")[0]

    def _embed(self, texts: list[str], task: str) -> list[list[float]]:
        s = self.settings
        if self._prefix:
            texts = [PREFIX[task] + t for t in texts]
        out: list[list[float]] = []
        for batch in plan_batches(texts, s.embed_batch_size, s.embed_batch_tokens):
            out.extend(
                call_with_retries(
                    lambda b=batch: self._request(b, task),
                    self.provider,
                    s.embed_max_retries + 1,
                    s.embed_backoff_base_s,
                    s.embed_backoff_max_s,
                )
            )
        return out

    def _request(self, texts: list[str], task: str) -> list[list[float]]:
        t0 = time.perf_counter()
        with self._admission.admit(texts, batch=task == "document"):
            try:
                resp = self._client.post(
                    self._url,
                    json={"model": self.model, "input": texts, "truncate": True, "dimensions": self.dim},
                )
            except httpx.TimeoutException as exc:
                raise TransientProviderError(f"ollama: timeout ({type(exc).__name__})") from None
            except httpx.TransportError as exc:
                raise TransientProviderError(f"ollama: {type(exc).__name__}: {exc}") from None
        if resp.status_code == 429 or resp.status_code >= 500:
            raise TransientProviderError(
                f"ollama: HTTP {resp.status_code}",
                resp.status_code,
                parse_retry_after(resp.headers.get("retry-after")),
            )
        if resp.status_code != 200:
            raise ProviderError(f"ollama: HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            vectors = resp.json()["embeddings"]
        except (ValueError, KeyError, TypeError):
            raise ProviderError("ollama: response without 'embeddings'") from None
        if not isinstance(vectors, list) or len(vectors) != len(texts):
            raise ProviderError(f"ollama: expected {len(texts)} embeddings")
        for v in vectors:
            if not isinstance(v, list) or len(v) != self.dim:
                raise ProviderError(
                    f"ollama: embedding has {len(v) if isinstance(v, list) else '?'} dimensions, "
                    f"expected {self.dim} (set RAGLINE_EMBED_DIM to the model's size)"
                )
        EMBED_BATCH_LATENCY_MS.labels(self.provider).observe((time.perf_counter() - t0) * 1000)
        EMBED_TEXTS.labels(self.provider).inc(len(texts))
        return [[float(x) for x in v] for v in vectors]
