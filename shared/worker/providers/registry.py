"""Every provider, declared once: per kind, the setting that chooses it, the names that need no
provider (the offline defaults, for which a builder returns None) and, per provider name, the
``"module:attribute"`` of its class, called with the settings.

The modules are imported only when a process first builds the provider chosen by its settings:
importing this registry loads no provider module, so the control pool (which never asks for one)
loads no embedder, reranker or generator. The settings keep their ``Literal`` of names (the
configuration layer imports nothing of the worker runtime); a unit test holds each ``Literal``
equal to its kind's :attr:`Kind.names`.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from operator import attrgetter
from typing import Any

from ragline.shared.config.settings import Settings

_P = "ragline.shared.worker.providers"


@dataclass(frozen=True, eq=False)
class Kind:
    """One kind of provider (embedder, reranker, generator, contextualizer)."""

    name: str
    setting: str  # the dotted settings field that names the provider, e.g. ``embed.provider``
    providers: dict[str, str]  # provider name -> "module:attribute"
    builtin: frozenset[str] = frozenset()  # names answered without a provider

    @property
    def names(self) -> frozenset[str]:
        """Every name the setting accepts."""
        return frozenset(self.providers) | self.builtin

    def chosen(self, settings: Settings) -> str:
        return str(attrgetter(self.setting)(settings))

    def offline(self, settings: Settings) -> bool:
        """Whether the settings choose a name that needs no provider."""
        return self.chosen(settings) in self.builtin

    def load(self, provider: str) -> Any:
        """The class (or factory) of ``provider``, importing its module now."""
        try:
            target = self.providers[provider]
        except KeyError:
            raise ValueError(f"unknown {self.name} {provider!r}") from None
        module, _, attribute = target.partition(":")
        return getattr(import_module(module), attribute)

    def build(self, settings: Settings) -> Any:
        """The provider the settings choose, or None for a name that needs none."""
        if self.offline(settings):
            return None
        return self.load(self.chosen(settings))(settings)


EMBEDDER = Kind(
    "embedder",
    "embed.provider",
    {
        "local-e5": f"{_P}.local_e5:LocalE5Embedder",
        "voyage": f"{_P}.voyage:VoyageEmbedder",
        "ollama": f"{_P}.ollama:OllamaEmbedder",
    },
)
RERANKER = Kind(
    "reranker",
    "rerank.provider",
    {
        "voyage": f"{_P}.rerank:VoyageReranker",
        "cross-encoder": f"{_P}.rerank:CrossEncoderReranker",
    },
    builtin=frozenset({"none"}),
)
GENERATOR = Kind(
    "generator",
    "answer.provider",
    {
        "anthropic": f"{_P}.generate:AnthropicGenerator",
        "openai": f"{_P}.generate:OpenAIChatGenerator",
        "ollama": f"{_P}.generate:OllamaChatGenerator",
    },
    # the offline extractive answer (``query/answer/generate.py``) is no provider
    builtin=frozenset({"extractive"}),
)
CONTEXTUALIZER = Kind(
    "contextualizer",
    "context.provider",
    {"anthropic": f"{_P}.anthropic_context:AnthropicContextualizer"},
    # the document's headings (``ingest/contextualize.py``)
    builtin=frozenset({"heading"}),
)
KINDS = (EMBEDDER, RERANKER, GENERATOR, CONTEXTUALIZER)
