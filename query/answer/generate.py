"""Answer generators behind one interface: ``answer(question, hits, partial, order) -> Generated``.

Two kinds answer a question, and the answer path does not ask which one it has:

* :class:`ExtractiveGenerator` (the offline default ``extractive``) quotes the sentences of the
  passages that best answer the question (:mod:`ragline.query.answer.extractive`); no provider.
* :class:`ChatGenerator` wraps a chat model, a provider of
  :mod:`ragline.shared.worker.providers.generate` (a completion of ``system`` + ``messages``):
  the prompt is built from the passages (:mod:`ragline.query.answer.prompt`), the completion is
  streamed when the question asks for it, and it is bounded by ``answer.timeout_s`` and the
  question's deadline.

Both derive from :class:`AnswerGenerator`. Only the stages that ask a chat model free-form
questions (the squeeze, the groundedness judge, the transforms, the router, the agentic planner)
need more than :meth:`AnswerGenerator.answer`: :attr:`AnswerGenerator.completion` is the provider
they call, None for the extractive generator. The configured one is built once per question by
:func:`resolve`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from ragline.query.answer import extractive, texts
from ragline.query.answer.prompt import build_messages
from ragline.query.answer.stream import current_publisher, stream_generation
from ragline.query.deadline import run_with_deadline
from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.sdk.contracts import Hit
from ragline.shared.worker import providers
from ragline.shared.worker.providers import Generator, StreamingGenerator
from ragline.shared.worker.text import embedding_form

log = logging.getLogger(__name__)

EXTRACTIVE = "extractive"


@dataclass
class Generated:
    """What the generator answered: the text, why it degraded, its usage for the trace and, for
    the extractive generator, what the answer is made of (its framing and quotes)."""

    text: str
    reasons: list[str] = field(default_factory=list)
    info: dict = field(default_factory=lambda: {"generator": EXTRACTIVE})
    extract: extractive.Extract | None = None


class AnswerGenerator(ABC):
    """What answers a question from its passages (``hits[n-1]`` is what ``[n]`` cites)."""

    name: str
    #: the chat model the free-form stages call (``generate(system, messages)``); None: there is none
    completion: Generator | None = None

    @abstractmethod
    def answer(
        self, question: str, hits: list[Hit], partial: bool = False, order: list[int] | None = None
    ) -> Generated:
        """The answer; ``partial``: the evidence may not cover the question (the agentic budget ran
        out); ``order``: the passages' order in the prompt (the context's reordering)."""


class ExtractiveGenerator(AnswerGenerator):
    """Quotes the passages' sentences: the offline answer, and every chat model's fallback."""

    name = EXTRACTIVE

    def answer(
        self, question: str, hits: list[Hit], partial: bool = False, order: list[int] | None = None
    ) -> Generated:
        rank = sentence_ranker()
        tests_layer = get_settings().code.tests_layer
        try:
            ex = extractive.extract(question, hits, rank, tests_layer=tests_layer)
        except Exception as exc:  # the ranker's embedder failed: the answer without it
            log.warning("sentence ranking failed, extractive answer without it: %s", type(exc).__name__)
            ex = extractive.extract(question, hits, tests_layer=tests_layer)
            # said in the response: a question in another language than its passages is then
            # answered with the first passage's opening sentences, not the ones that answer
            return Generated(ex.text, [f"sentence ranker: {type(exc).__name__}"], extract=ex)
        return Generated(ex.text, extract=ex)


class ChatGenerator(AnswerGenerator):
    """A chat model answering from the prompt of the passages. A failure raises: the caller decides
    what replaces the answer (the question's run answers extractively)."""

    def __init__(self, completion: Generator, settings: Settings) -> None:
        self.completion = completion
        self.model: Generator = completion  # the same provider, typed as present
        self.name = completion.name
        self.timeout_s = settings.answer.timeout_s

    def answer(
        self, question: str, hits: list[Hit], partial: bool = False, order: list[int] | None = None
    ) -> Generated:
        system, messages = build_messages(question, hits, partial, order)
        publisher = current_publisher()  # set by the ask task for a request with ``stream``
        if publisher is not None and isinstance(self.model, StreamingGenerator):
            lang = texts.language_of(question)
            g = stream_generation(self.model, system, messages, hits, publisher, self.timeout_s, lang)
        else:
            # bounded by the question's deadline too: past it the caller answers extractively
            g = run_with_deadline(self.model.generate, self.timeout_s, system, messages)
        info = {"generator": self.name, "input_tokens": g.input_tokens, "output_tokens": g.output_tokens}
        return Generated(g.text, [], info)

    def call(self, system: str, messages: list[dict]) -> str:
        """One free-form completion under the question's deadline (the squeeze's, the judge's)."""
        return run_with_deadline(self.model.generate, self.timeout_s, system, messages).text


def resolve(settings: Settings) -> tuple[AnswerGenerator, Exception | None]:
    """The configured generator, built once per question, and the error that kept a configured chat
    model from being built (then the extractive generator answers, and the stages that would have
    asked the chat model say why they did not)."""
    try:
        completion = providers.get_generator()
    except Exception as exc:
        return ExtractiveGenerator(), exc
    if completion is None:
        return ExtractiveGenerator(), None
    return ChatGenerator(completion, settings), None


#: the sentences' vectors, kept across questions of the worker (the same chunks answer many)
SENTENCE_CACHE = 20_000
#: sentence vectors by (embedder, text): a process that builds another embedder (another model, an
#: evaluation, a test) never reads one model's vector as another's
_SENTENCE_VECTORS: dict[tuple[str, str, str], np.ndarray] = {}


def embedder_key(embedder: object) -> tuple[str, str]:
    """Which embedder a cached sentence vector is of: its class and model."""
    return (type(embedder).__qualname__, str(getattr(embedder, "model", "")))


def sentence_ranker() -> extractive.Ranker | None:
    """The embedder's similarity of a question to each candidate sentence of the extractive answer
    (cross-lingual), or None when no embedder can be built. The embedder is the configured one,
    already loaded in the query worker; sentence vectors are cached by text (bounded)."""
    try:
        embedder = providers.get_embedder()
    except Exception:
        return None
    timeout_s = get_settings().deadlines.query_embed_timeout_s

    of = embedder_key(embedder)

    def rank(question: str, sentences: list[str]) -> list[float]:
        q = np.asarray(embedder.embed_query(embedding_form(question)), dtype=np.float32)
        new = [s for s in dict.fromkeys(sentences) if (*of, s) not in _SENTENCE_VECTORS]
        if new:
            docs = run_with_deadline(
                embedder.embed_documents, 4 * timeout_s, [embedding_form(s) for s in new]
            )
            if len(_SENTENCE_VECTORS) + len(new) > SENTENCE_CACHE:
                _SENTENCE_VECTORS.clear()
            vectors = np.asarray(docs, dtype=np.float32)
            _SENTENCE_VECTORS.update(((*of, s), v) for s, v in zip(new, vectors, strict=True))
        return [float(_SENTENCE_VECTORS[(*of, s)] @ q) for s in sentences]

    return rank
