"""Answer generators behind one small interface: ``anthropic`` (the SDK, configurable base_url) and
``openai`` / ``ollama`` (any OpenAI-compatible ``/v1/chat/completions`` endpoint, over httpx, at the
configured low temperature).

The offline default ``extractive`` lives in ``query/answer/generate.py`` and needs no provider.
Neither retries past its timeout.

Both chat generators also stream (:meth:`~Generator.stream`): Anthropic's Messages server-sent
events (``message_start``, ``content_block_delta`` with ``text_delta``, ``message_delta``,
``message_stop``, and ``error``), and the OpenAI-compatible chat completion chunks
(``data: {"choices": [{"delta": {"content": ...}}]}`` up to ``data: [DONE]``). A stream that ends
without its end marker was cut (a proxy or the server dropped it) and raises, like an ``error``
event: a truncated text must never pass for a whole answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx

from ragline.shared.config.settings import Settings
from ragline.shared.worker import metrics as m
from ragline.shared.worker.providers import Generation, ProviderError


class AnthropicGenerator:
    name = "anthropic"

    def __init__(self, settings: Settings) -> None:
        import anthropic  # provider chosen by settings: the other generators never load this SDK

        if settings.providers.anthropic_api_key is None:
            raise ProviderError("generator 'anthropic' needs RAGLINE_PROVIDERS_ANTHROPIC_API_KEY")
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

    def stream(
        self, system: str, messages: list[dict], max_tokens: int | None = None, timeout_s: float | None = None
    ) -> Iterator[str | Generation]:
        import anthropic  # loaded already by __init__

        parts: list[str] = []
        input_tokens = output_tokens = 0
        stopped = False
        try:
            events = self._client.messages.create(
                model=self.model,
                max_tokens=max_tokens or self.max_tokens,
                system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                messages=messages,
                stream=True,
                **({"timeout": timeout_s} if timeout_s else {}),
            )
            with events:
                for ev in events:
                    if ev.type == "message_start":
                        input_tokens = int(ev.message.usage.input_tokens or 0)
                    elif ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                        if ev.delta.text:
                            parts.append(ev.delta.text)
                            yield ev.delta.text
                    elif ev.type == "message_delta":
                        output_tokens = int(ev.usage.output_tokens or 0)
                    elif ev.type == "message_stop":
                        stopped = True
        except anthropic.APIStatusError as exc:  # an HTTP error, or an ``error`` event in the stream
            body = exc.body if isinstance(exc.body, dict) else {}
            kind = (body.get("error") or {}).get("type") if isinstance(body.get("error"), dict) else None
            raise ProviderError(f"anthropic stream: {kind or type(exc).__name__}") from exc
        except Exception as exc:  # connection errors of the SDK's own HTTP client, a malformed event
            raise ProviderError(
                f"anthropic stream: {_failure_kind(exc, anthropic.APIConnectionError)}"
            ) from exc
        if not stopped:
            raise ProviderError("anthropic stream: cut before message_stop")
        g = Generation("".join(parts).strip(), input_tokens, output_tokens)
        _count(self.name, g)
        yield g


class OpenAIChatGenerator:
    """OpenAI-compatible chat completions: OpenAI itself, vLLM, or Ollama's ``/v1`` endpoint."""

    name = "openai"

    def __init__(self, settings: Settings) -> None:
        base = settings.providers.openai_base_url if self.name == "openai" else None
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

    def stream(
        self, system: str, messages: list[dict], max_tokens: int | None = None, timeout_s: float | None = None
    ) -> Iterator[str | Generation]:
        body = {
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": max_tokens or self.max_tokens,
            "messages": [{"role": "system", "content": system}, *messages],
            "stream": True,
            # the token counts come in one last chunk (empty ``choices``) before [DONE]
            "stream_options": {"include_usage": True},
        }
        parts: list[str] = []
        usage: dict = {}
        done = False
        try:
            with httpx.stream(
                "POST", self.url, json=body, headers=self._headers, timeout=timeout_s or self.timeout
            ) as r:
                if r.status_code >= 400:
                    raise ProviderError(f"{self.name} chat stream: HTTP {r.status_code}")
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue  # blank separators, ": keep-alive" comments, "event:" names
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    chunk = json.loads(data)
                    if not isinstance(chunk, dict):
                        raise ValueError("chunk is not an object")
                    if chunk.get("error"):  # vLLM, Ollama and proxies report a failure mid-stream like this
                        err = chunk["error"]
                        kind = err.get("type") or err.get("code") if isinstance(err, dict) else None
                        raise ProviderError(f"{self.name} chat stream: error {kind or 'event'}")
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or []:
                        text = (choice.get("delta") or {}).get("content")
                        if isinstance(text, str) and text:
                            parts.append(text)
                            yield text
        except (httpx.HTTPError, ValueError, AttributeError, TypeError) as exc:
            raise ProviderError(f"{self.name} chat stream: {type(exc).__name__}") from exc
        if not done:
            raise ProviderError(f"{self.name} chat stream: cut before [DONE]")
        g = Generation(
            "".join(parts).strip(),
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
        )
        _count(self.name, g)
        yield g


def _failure_kind(exc: BaseException, wrapper: type[BaseException]) -> str:
    """The kind of a stream's failure, without its message (which may quote the provider's body):
    the SDK's connection error names the transport error it wraps (``RemoteProtocolError`` for a body
    cut short, ``ReadTimeout``), which some SDK versions raise bare and others inside ``wrapper``."""
    cause = exc.__cause__
    if isinstance(exc, wrapper) and cause is not None:
        return type(cause).__name__
    return type(exc).__name__


def _count(name: str, g: Generation) -> None:
    m.TOKENS_INPUT.labels(generator=name).inc(g.input_tokens)
    m.TOKENS_OUTPUT.labels(generator=name).inc(g.output_tokens)


class OllamaChatGenerator(OpenAIChatGenerator):
    """Ollama's OpenAI-compatible ``/v1`` endpoint at ``providers.ollama_base_url``."""

    name = "ollama"
