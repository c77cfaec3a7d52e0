"""Voyage embeddings (voyage-4 by default) through the voyageai SDK's resource API.

``voyageai.Client.embed`` returns vectors in response order and drops each item's ``index``;
the resource API keeps it, so vectors are matched to texts by ``index``, never by position.
Every HTTP attempt takes a cluster-wide in-flight slot and RPM/TPM budget from Redis.
"""

from __future__ import annotations

import time

from ragline.shared.metrics import EMBED_BATCH_LATENCY_MS, EMBED_TEXTS
from ragline.shared.providers import ProviderError
from ragline.shared.providers.batching import plan_batches
from ragline.shared.providers.ratelimit import EmbedAdmission
from ragline.shared.providers.retry import TransientProviderError, call_with_retries, parse_retry_after
from ragline.shared.settings import Settings


class VoyageEmbedder:
    provider = "voyage"

    def __init__(self, settings: Settings) -> None:
        import voyageai  # heavy: imported in the worker that uses it

        if settings.voyage_api_key is None:
            raise ProviderError("embedder 'voyage' needs RAGLINE_VOYAGE_API_KEY")
        self._voyageai = voyageai
        self.settings = settings
        self.model = settings.embed_model_name
        self.dim = settings.embed_dim
        base_url = settings.voyage_base_url
        if base_url and not base_url.rstrip("/").endswith("/v1"):
            base_url = base_url.rstrip("/") + "/v1"  # accept the server root or the API root
        self._params: dict = {
            "api_key": settings.voyage_api_key.get_secret_value(),
            "request_timeout": settings.embed_timeout_s,
        }
        if base_url:
            self._params["base_url"] = base_url
        self._admission = EmbedAdmission(settings, self.provider)

    def __repr__(self) -> str:  # never the key
        return f"VoyageEmbedder(model={self.model!r}, dim={self.dim})"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts, "document")

    def embed_query(self, text: str) -> list[float]:
        """One attempt within the query deadline: a question must not wait out the ingest retry
        policy (the query path degrades to lexical search instead)."""
        return self._request([text], "query", timeout=self.settings.query_embed_timeout_s)[0]

    def _embed(self, texts: list[str], input_type: str) -> list[list[float]]:
        out: list[list[float]] = []
        s = self.settings
        for batch in plan_batches(texts, s.embed_batch_size, s.embed_batch_tokens):
            out.extend(
                call_with_retries(
                    lambda b=batch: self._request(b, input_type),
                    self.provider,
                    s.embed_max_retries + 1,
                    s.embed_backoff_base_s,
                    s.embed_backoff_max_s,
                )
            )
        return out

    def _request(self, texts: list[str], input_type: str, timeout: float | None = None) -> list[list[float]]:
        err = self._voyageai.error
        t0 = time.perf_counter()
        with self._admission.admit(texts, batch=input_type == "document"):
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
        EMBED_BATCH_LATENCY_MS.labels(self.provider).observe((time.perf_counter() - t0) * 1000)
        EMBED_TEXTS.labels(self.provider).inc(len(texts))
        return match_by_index(getattr(resp, "data", None), len(texts), self.dim, self.provider)


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
                f"dimensions, expected {dim}"
            )
        out[idx] = [float(x) for x in vec]
    return out  # type: ignore[return-value]
