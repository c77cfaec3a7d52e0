"""Provider interfaces (embedder, reranker, contextualizer, generator) chosen by settings; which
provider names exist and where each lives is ``registry.py``.

Instances are created lazily per process and cached; ``reset()`` drops them (after a fork,
or when tests change the settings).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ragline.shared.config.settings import get_settings
from ragline.shared.worker.providers import registry


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


@runtime_checkable
class Contextualizer(Protocol):
    """Situates each chunk in its whole document (``ingest/contextualize.py``)."""

    def system_blocks(self, document: str) -> list[dict]:
        """The system prompt for one document's chunks (sent with each, read from the prompt cache)."""

    def situate(self, system: list[dict], chunk: str) -> str:
        """Context for one chunk; raises :class:`ProviderError` when none can be had."""


@dataclass
class Generation:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0


@runtime_checkable
class Generator(Protocol):
    name: str

    def generate(self, system: str, messages: list[dict], max_tokens: int | None = None) -> Generation:
        """One completion for ``messages`` (``[{"role", "content"}]``) under ``system``."""


@runtime_checkable
class StreamingGenerator(Generator, Protocol):
    def stream(
        self, system: str, messages: list[dict], max_tokens: int | None = None, timeout_s: float | None = None
    ) -> Iterator[str | Generation]:
        """The completion as it is generated: text deltas (``str``), then one :class:`Generation`
        (the whole text and the token counts). A provider error or a cut stream raises
        :class:`ProviderError`; ``timeout_s`` bounds each wait for the next bytes."""


_lock = threading.Lock()
_cache: dict[str, object] = {}


def get_embedder() -> Embedder:
    with _lock:
        if "embedder" not in _cache:
            _cache["embedder"] = registry.EMBEDDER.build(get_settings())
        return _cache["embedder"]  # type: ignore[return-value]


def cached(name: str, build):
    """A per-process object that lives until :func:`reset` (providers, caches tied to settings)."""
    with _lock:
        if name not in _cache:
            _cache[name] = build(get_settings())
        return _cache[name]


def get_reranker():
    """The configured reranker, or None for ``reranker=none`` (see ``shared/worker/providers/rerank.py``)."""
    return cached("reranker", registry.RERANKER.build)


def get_generator():
    """The configured answer generator, or None for the offline ``extractive`` one."""
    return cached("generator", registry.GENERATOR.build)


def reset() -> None:
    with _lock:
        _cache.clear()
