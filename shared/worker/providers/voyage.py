"""Voyage embeddings (voyage-4 by default) through the voyageai SDK's resource API.

``voyageai.Client.embed`` returns vectors in response order and drops each item's ``index``;
the resource API keeps it, so the base class can match vectors to texts by ``index``, never by
position. Batching, the cluster-wide admission and retries are :class:`BatchingEmbedder`'s.
"""

from __future__ import annotations

import voyageai

from ragline.shared.config.settings import Settings
from ragline.shared.worker.providers import ProviderError
from ragline.shared.worker.providers.embedder import BatchingEmbedder
from ragline.shared.worker.providers.retry import TransientProviderError, parse_retry_after


class VoyageEmbedder(BatchingEmbedder):
    provider = "voyage"

    def __init__(self, settings: Settings) -> None:
        if settings.providers.voyage_api_key is None:
            raise ProviderError("embedder 'voyage' needs RAGLINE_PROVIDERS_VOYAGE_API_KEY")
        self._voyageai = voyageai
        base_url = settings.providers.voyage_base_url
        if base_url and not base_url.rstrip("/").endswith("/v1"):
            base_url = base_url.rstrip("/") + "/v1"  # accept the server root or the API root
        self._params: dict = {
            "api_key": settings.providers.voyage_api_key.get_secret_value(),
            "request_timeout": settings.embed.timeout_s,
        }
        if base_url:
            self._params["base_url"] = base_url
        super().__init__(settings)

    def __repr__(self) -> str:  # never the key
        return f"VoyageEmbedder(model={self.model!r}, dim={self.dim})"

    def _request(self, texts: list[str], input_type: str, timeout: float | None = None) -> list:
        err = self._voyageai.error
        try:
            resp = self._voyageai.Embedding.create(
                input=texts,
                model=self.model,
                input_type=input_type,
                truncation=True,
                output_dimension=self.dim,
                **{**self._params, **({"request_timeout": timeout} if timeout else {})},
            )
        except (
            err.RateLimitError,
            err.ServiceUnavailableError,
            err.ServerError,
            err.TryAgain,
            err.Timeout,
            err.APIConnectionError,
        ) as exc:
            headers = getattr(exc, "headers", None) or {}
            hint = parse_retry_after(headers.get("retry-after") or headers.get("Retry-After"))
            raise TransientProviderError(
                f"voyage: {type(exc).__name__}: {exc}", getattr(exc, "http_status", None), hint
            ) from None
        except err.APIError as exc:
            status = getattr(exc, "http_status", None) or 0
            if status >= 500:
                raise TransientProviderError(f"voyage: HTTP {status}", status) from None
            raise ProviderError(f"voyage: HTTP {status}: {exc}") from None
        except err.VoyageError as exc:  # invalid request, authentication: retrying cannot help
            raise ProviderError(f"voyage: {type(exc).__name__}: {exc}") from None
        data = getattr(resp, "data", None)
        if data is None:
            raise ProviderError("voyage: a response without data")
        return data
