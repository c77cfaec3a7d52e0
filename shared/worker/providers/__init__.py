"""Provider interfaces (embedder, reranker, contextualizer, generator) chosen by settings.

Instances are created lazily per process and cached; ``reset()`` drops them (after a fork,
or when tests change the settings).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol, runtime_checkable

from ragline.shared.config.settings import Settings, get_settings


class ProviderError(RuntimeError):
    """A provider call failed after its retries; callers degrade or record the error."""


@runtime_checkable
class Embedder(Protocol):
    """What the pipeline and the query path use. HTTP providers subclass ``BatchingEmbedder``
    (``shared/worker/providers/embedder.py``), which owns batching, admission and retries; the protocol
    stays here so that importing this package loads no provider module."""

    model: str
    dim: int

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in input order."""

    def embed_query(self, text: str) -> list[float]: ...


@runtime_checkable
class Reranker(Protocol):
    name: str

    def rerank(self, query: str, documents: list[str], top_k: int) -> list[tuple[Any, Any]]:
        """Raw ``(index, score)`` pairs as the provider returned them: untrusted, validated by the
        caller (:func:`ragline.query.retrieval.rerank.validate_ranked`)."""


_lock = threading.Lock()
_cache: dict[str, object] = {}


def _build_embedder(settings: Settings) -> Embedder:
    if settings.embed.provider == "local-e5":
        from ragline.shared.worker.providers.local_e5 import LocalE5Embedder  # provider chosen by settings

        return LocalE5Embedder(settings)
    if settings.embed.provider == "voyage":
        from ragline.shared.worker.providers.voyage import VoyageEmbedder  # provider chosen by settings

        return VoyageEmbedder(settings)
    if settings.embed.provider == "ollama":
        from ragline.shared.worker.providers.ollama import OllamaEmbedder  # provider chosen by settings

        return OllamaEmbedder(settings)
    raise ValueError(f"unknown embedder {settings.embed.provider!r}")


def get_embedder() -> Embedder:
    with _lock:
        if "embedder" not in _cache:
            _cache["embedder"] = _build_embedder(get_settings())
        return _cache["embedder"]  # type: ignore[return-value]


def cached(name: str, build):
    """A per-process object that lives until :func:`reset` (providers, caches tied to settings)."""
    with _lock:
        if name not in _cache:
            _cache[name] = build(get_settings())
        return _cache[name]


def get_reranker():
    """The configured reranker, or None for ``reranker=none`` (see ``shared/worker/providers/rerank.py``)."""
    from ragline.shared.worker.providers.rerank import build_reranker  # the control pool must not load this

    return cached("reranker", build_reranker)


def get_generator():
    """The configured answer generator, or None for the offline ``extractive`` one."""
    from ragline.shared.worker.providers.generate import (
        build_generator,  # the control pool must not load this
    )

    return cached("generator", build_generator)


def reset() -> None:
    with _lock:
        _cache.clear()
