"""Rerankers: ``voyage`` (rerank-2.5 / rerank-3 through the voyageai SDK) and ``cross-encoder``
(sentence-transformers from a local model directory). ``none`` means no reranker.

A reranker returns the provider's raw ``(index, score)`` pairs: they are untrusted input and are
validated by :func:`ragline.query.retrieval.rerank.validate_ranked`, never used to index directly.
"""

from __future__ import annotations

from typing import Any

from ragline.shared.config.settings import Settings
from ragline.shared.worker.providers import ProviderError


def _field(item: Any, name: str) -> Any:
    if isinstance(item, dict):
        return item.get(name)
    return getattr(item, name, None)


class VoyageReranker:
    """Calls the SDK's resource API: ``voyageai.Client.rerank`` would index the documents with the
    provider's indexes before we could validate them (an index of -1 silently picks the last one)."""

    name = "voyage"

    def __init__(self, settings: Settings) -> None:
        import voyageai  # provider chosen by settings: a cross-encoder setup never loads this SDK

        self._create = voyageai.Reranking.create
        self._timeout_error = voyageai.error.Timeout
        if settings.providers.voyage_api_key is None:
            raise ProviderError("reranker 'voyage' needs RAGLINE_PROVIDERS_VOYAGE_API_KEY")
        self.model = settings.rerank.model
        base_url = settings.providers.voyage_base_url
        if base_url and not base_url.rstrip("/").endswith("/v1"):
            base_url = base_url.rstrip("/") + "/v1"  # accept the server root or the API root
        self._params = {
            "api_key": settings.providers.voyage_api_key.get_secret_value(),
            "request_timeout": settings.rerank.timeout_s,
            "base_url": base_url,
        }

    def rerank(self, query: str, documents: list[str], top_k: int) -> list[tuple[Any, Any]]:
        """Raises the built-in ``TimeoutError`` when the SDK's own request timeout fires: it is set
        to the same budget as the caller's deadline, so either may fire first, and both are a timeout."""
        try:
            resp = self._create(
                query=query,
                documents=documents,
                model=self.model,
                top_k=top_k,
                truncation=True,
                **self._params,
            )
        except self._timeout_error as exc:
            raise TimeoutError(f"voyage rerank: {exc}") from None
        data = _field(resp, "data")
        if not isinstance(data, list):
            raise ProviderError("voyage rerank: response without a data list")
        return [(_field(d, "index"), _field(d, "relevance_score")) for d in data]


class CrossEncoderReranker:
    """A local cross-encoder (e.g. bge-reranker) loaded from ``rerank.model_dir``; never downloads."""

    name = "cross-encoder"

    def __init__(self, settings: Settings) -> None:
        if settings.rerank.model_dir is None:
            raise ProviderError(
                "reranker 'cross-encoder' needs RAGLINE_RERANK_MODEL_DIR (a local model directory)"
            )
        if not settings.rerank.model_dir.is_dir():
            raise ProviderError(f"RAGLINE_RERANK_MODEL_DIR {settings.rerank.model_dir} is not a directory")
        try:
            from sentence_transformers import CrossEncoder  # optional heavy dependency: torch
        except ImportError as exc:
            raise ProviderError(
                "reranker 'cross-encoder' needs the optional packages sentence-transformers and torch "
                "(pip install 'ragline[cross-encoder]'); they are not installed"
            ) from exc
        self._model = CrossEncoder(str(settings.rerank.model_dir), local_files_only=True)

    def rerank(self, query: str, documents: list[str], top_k: int) -> list[tuple[Any, Any]]:
        scores = self._model.predict([(query, d) for d in documents])
        ranked = sorted(enumerate(float(s) for s in scores), key=lambda t: -t[1])
        return ranked[:top_k]
