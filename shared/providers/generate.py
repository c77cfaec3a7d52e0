"""Answer generators behind one small interface: ``anthropic`` (the SDK, configurable base_url) and
``openai`` / ``ollama`` (any OpenAI-compatible ``/v1/chat/completions`` endpoint, over httpx, at the
configured low temperature).

The offline default ``extractive`` lives in ``query/generate.py`` and needs no provider.
Neither retries past its timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import httpx

from ragline.shared import metrics as m
from ragline.shared.providers import ProviderError
from ragline.shared.settings import Settings


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


class AnthropicGenerator:
    name = "anthropic"

    def __init__(self, settings: Settings) -> None:
        import anthropic  # provider chosen by settings: the other generators never load this SDK

        if settings.providers.anthropic_api_key is None:
            raise ProviderError("generator 'anthropic' needs RAGLINE_ANTHROPIC_API_KEY")
        self._client = anthropic.Anthropic(
            api_key=settings.providers.anthropic_api_key.get_secret_value(),
            base_url=settings.providers.anthropic_base_url,
            timeout=settings.answer.timeout_s,
            max_retries=1,
        )
        self.model = settings.answer.model
        self.max_tokens = settings.answer.max_tokens

    def generate(self, system: str, messages: list[dict], max_tokens: int | None = None) -> Generation:
        # the system text is the same for every question: mark it cacheable
        # no temperature: API version 2026-10-21 (the SDK 2.x default) rejects sampling parameters
        # with a 400, and the SDK no longer has them; answers stay grounded by the prompt instead
        resp = self._client.messages.create(
            model=self.model,
            max_tokens=max_tokens or self.max_tokens,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=messages,
        )
        text = "".join(getattr(b, "text", "") for b in resp.content if getattr(b, "type", "") == "text")
        usage = resp.usage
        g = Generation(text.strip(), int(usage.input_tokens or 0), int(usage.output_tokens or 0))
        _count(self.name, g)
        return g


class OpenAIChatGenerator:
    """OpenAI-compatible chat completions: OpenAI itself, vLLM, or Ollama's ``/v1`` endpoint."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.name = name
        base = settings.providers.openai_base_url if name == "openai" else None
        base = (base or settings.providers.ollama_base_url).rstrip("/")
        self.url = (base if base.endswith("/v1") else base + "/v1") + "/chat/completions"
        key = (
            settings.providers.openai_api_key.get_secret_value()
            if settings.providers.openai_api_key
            else None
        )
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.model = settings.answer.openai_model
        self.temperature = settings.answer.temperature
        self.max_tokens = settings.answer.max_tokens
        self.timeout = settings.answer.timeout_s

    def generate(self, system: str, messages: list[dict], max_tokens: int | None = None) -> Generation:
        body = {
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": max_tokens or self.max_tokens,
            "messages": [{"role": "system", "content": system}, *messages],
        }
        try:
            r = httpx.post(self.url, json=body, headers=self._headers, timeout=self.timeout)
            r.raise_for_status()
            data = r.json()
            text = data["choices"][0]["message"]["content"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise ProviderError(f"{self.name} chat: {type(exc).__name__}") from exc
        if not isinstance(text, str):
            raise ProviderError(f"{self.name} chat: no text in the answer")
        usage = data.get("usage") or {}
        g = Generation(
            text.strip(), int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        )
        _count(self.name, g)
        return g


def _count(name: str, g: Generation) -> None:
    m.TOKENS_INPUT.labels(generator=name).inc(g.input_tokens)
    m.TOKENS_OUTPUT.labels(generator=name).inc(g.output_tokens)


def build_generator(settings: Settings) -> Generator | None:
    if settings.answer.provider == "extractive":
        return None
    if settings.answer.provider == "anthropic":
        return AnthropicGenerator(settings)
    if settings.answer.provider in ("openai", "ollama"):
        return OpenAIChatGenerator(settings, settings.answer.provider)
    raise ValueError(f"unknown generator {settings.answer.provider!r}")
