"""Ollama embeddings (nomic-embed-text by default) over its HTTP API ``POST /api/embed``.

nomic-embed-text expects task prefixes; ``dimensions`` asks for a Matryoshka-truncated vector
of the schema's size. Batching, the cluster-wide admission and retries are
:class:`BatchingEmbedder`'s, as for Voyage.
"""

from __future__ import annotations

import httpx

from ragline.shared.config.settings import Settings
from ragline.shared.worker.providers import ProviderError
from ragline.shared.worker.providers.embedder import BatchingEmbedder
from ragline.shared.worker.providers.retry import TransientProviderError, parse_retry_after

PREFIX = {"document": "search_document: ", "query": "search_query: "}


class OllamaEmbedder(BatchingEmbedder):
    provider = "ollama"
    single_attempt_queries = False

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._url = settings.providers.ollama_base_url.rstrip("/") + "/api/embed"
        self._client = httpx.Client(timeout=settings.embed.timeout_s)
        self._prefix = "nomic" in self.model

    def _prepare(self, texts: list[str], input_type: str) -> list[str]:
        """Task prefixes before batching, so the token budget counts them too."""
        return [PREFIX[input_type] + t for t in texts] if self._prefix else texts

    def _request(self, texts: list[str], input_type: str, timeout: float | None = None) -> list:
        try:
            resp = self._client.post(
                self._url,
                json={"model": self.model, "input": texts, "truncate": True, "dimensions": self.dim},
                **({"timeout": timeout} if timeout else {}),
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
        if not isinstance(vectors, list):
            raise ProviderError(f"ollama: expected {len(texts)} embeddings")
        # /api/embed answers in input order and without indexes: the position is the index
        return [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
