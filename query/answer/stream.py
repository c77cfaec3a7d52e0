"""The publishing side of streamed answers (``AskRequest.stream``; wire format and reader in
:mod:`ragline.shared.sdk.answer_stream`).

* :class:`LinkSafeText` turns the generator's deltas into text that may be shown at once: the
  same link rules as the final answer (:func:`ragline.query.answer.sanitize.sanitize_links`), applied to
  whole prefixes of the answer cut at whitespace outside any markdown link, image, angle-bracket
  tag or reference definition. An incomplete tail (``[text](https://exa`` …) is held back until
  it is complete, because a link split across two deltas would pass a check of either half; at
  most :data:`HOLD_CHARS` of it, so a ``[`` or ``<`` that never closes does not stall the stream.
* :class:`AnswerPublisher` adds the entries to the question's Redis stream, bounded and expiring.
* :func:`stream_generation` runs one streamed completion through both.

The task sets the publisher for the question (:func:`publishing`); the answer stage asks for it
(:func:`current_publisher`), so the service's signatures stay as they are and a question without
``stream`` runs exactly as before.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis
from redis.typing import EncodableT, FieldT

from ragline.query import deadline
from ragline.query.answer import texts
from ragline.query.answer.citations import cited_numbers
from ragline.query.answer.sanitize import sanitize_links
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.answer_stream import delta_fields, terminal_fields
from ragline.shared.sdk.contracts import Hit
from ragline.shared.sdk.names import answer_stream_key
from ragline.shared.worker.providers import ProviderError
from ragline.shared.worker.text import split_sentences

if TYPE_CHECKING:  # every pool imports the query tasks; provider modules load only where used
    from ragline.shared.worker.providers import Generation, StreamingGenerator

log = logging.getLogger(__name__)

#: the most text held back behind the last cut (a link, image, tag, citation marker or code span
#: that has not closed yet: a lone "[" in prose, "a[b[c]]" in code, "n <limit"): past it, text is
#: released up to the last whitespace at least this far back, whatever its markup. Room for a
#: link's text and title; the prefix rule of LinkSafeText keeps a longer one safe (a link the final
#: answer removes then stops the deltas until the terminal answer, which replaces them)
HOLD_CHARS = 200


class StreamInterrupted(Exception):
    """The generator failed after part of the answer was published: the question ends with
    ``no_answer`` (the reason says why) rather than an answer the reader did not see grow."""


# ------------------------------------------------------------------------------------ link-safe
def safe_cut(raw: str, start: int) -> int:
    """The last position after ``start`` where ``raw`` may be cut: just before a whitespace run,
    outside ``[...]`` (nested brackets counted), ``](...)``, ``<tag ...>`` and an open code span on
    its line (whether its ``<`` is escaped depends on the closing backticks), and on a line that
    could still be a reference definition (``[label]:`` at its start) only at its end; when that
    leaves more than :data:`HOLD_CHARS` behind the cut, the last whitespace at least that far back.
    ``start`` when there is none. Linear in the text after ``start``."""
    scan = _Markup(raw)
    cut = start
    line_start = start == 0 or raw[start - 1] == "\n"
    prev = raw[start - 1] if start else ""
    bound = len(raw) - HOLD_CHARS
    fallback = start  # the last whitespace at or before ``bound``, whatever the markup around it
    for i in range(start, len(raw)):
        ch = raw[i]
        if i <= bound and _ends_word(ch, prev):
            fallback = i
        if line_start:
            scan.ref_line = raw[i : i + 4].lstrip(" ").startswith("[")
        line_start = ch == "\n"
        if scan.read(i, ch, prev):
            cut = i
        prev = ch
    return max(cut, fallback)


def _ends_word(ch: str, prev: str) -> bool:
    """Whether ``ch`` is the whitespace right after a word (``prev`` the character before, if any)."""
    return ch.isspace() and bool(prev) and not prev.isspace()


#: how a character changes the depth of a link destination's parentheses, of a link text's brackets
_PAREN = {"(": 1, ")": -1}
_SQUARE = {"[": 1, "]": -1}


@dataclass
class _Markup:
    """What is open at a character of the text :func:`safe_cut` reads, left to right."""

    raw: str
    #: depth of the "[" brackets open: a link's text may hold balanced ones
    square: int = 0
    #: a "<tag" not closed by ">" yet
    angle: bool = False
    #: depth of a link destination's "(" after "]"
    paren: int = 0
    #: the length of the backtick run that opened a code span on this line, or 0
    tick: int = 0
    #: the line may still be a reference definition ("[label]:" at its start)
    ref_line: bool = False

    def read(self, i: int, ch: str, prev: str) -> bool:
        """Read ``raw[i]`` (``prev`` the character before); whether the text may be cut before it."""
        if ch == "\n":
            self.paren = 0  # a link destination never spans lines
            self.tick = 0  # nor, for the sanitizer, a code span
            return not (self.square or self.angle) and bool(prev) and not prev.isspace()
        if self.angle:
            self.angle = ch != ">"
        elif self.paren:
            self.paren += _PAREN.get(ch, 0)
        elif self.square:
            self._in_brackets(i, ch)
        else:
            return self._outside(i, ch, prev)
        return False

    def _in_brackets(self, i: int, ch: str) -> None:
        self.square += _SQUARE.get(ch, 0)
        if not self.square and self.ref_line and self.raw[i + 1 : i + 2] not in ("", ":"):
            self.ref_line = False  # "[1] text": the label is not followed by ":", no definition

    def _outside(self, i: int, ch: str, prev: str) -> bool:
        """Outside any link, image or tag: what ``ch`` opens, or whether the text may be cut before it."""
        if ch == "`":
            if prev != "`":  # the first of a run: its length decides what it opens or closes
                self._backticks(i)
        elif ch == "[":
            self.square = 1
        elif ch == "(" and prev == "]":
            self.paren = 1
        elif ch == "<" and _opens_tag(self.raw, i):
            self.angle = True
        else:
            return _ends_word(ch, prev) and not self.ref_line and not self.tick
        return False

    def _backticks(self, i: int) -> None:
        end = i
        while end < len(self.raw) and self.raw[end] == "`":
            end += 1
        run = end - i
        self.tick = run if not self.tick else (0 if run == self.tick else self.tick)


def _opens_tag(raw: str, i: int) -> bool:
    """Whether the ``<`` at ``i`` may open a tag (the text ends there, or a letter, ``/``, ``!`` or
    ``?`` follows)."""
    return i + 1 == len(raw) or raw[i + 1].isalpha() or raw[i + 1] in "/!?"


class LinkSafeText:
    """Deltas in, text that may be shown out (:meth:`feed`, then :meth:`close` once at the end).

    What is released is always the continuation of ``sanitize_links(prefix)`` for a prefix of
    the answer cut by :func:`safe_cut`, checked against the documents cited so far (anywhere in
    the text received, held tail included). A document cited later can only allow more, so the
    stream never shows a link the final answer removes; a link allowed only by a later citation
    is shown as removed, and the final answer, which replaces the streamed text, keeps it. When a
    longer prefix does not continue the shorter one (markup the cut rule misjudged), nothing is
    released until it does.
    """

    def __init__(self, hits: list[Hit], lang: str = texts.FALLBACK) -> None:
        self.hits = hits
        self.lang = lang  # the question's: what a removed link is marked with
        self.raw = ""
        self.pos = 0  # raw[:pos] is released (as its sanitised text)
        self.shown = ""  # everything released

    def _sources(self) -> list[str]:
        return [self.hits[n - 1].content for n in cited_numbers(self.raw) if 1 <= n <= len(self.hits)]

    def _release(self, end: int) -> str:
        sources = self._sources()
        before = sanitize_links(self.raw[: self.pos].lstrip(), sources, self.lang)[0]
        after = sanitize_links(self.raw[:end].lstrip(), sources, self.lang)[0]
        if not after.startswith(before):
            return ""
        self.pos = end
        piece = after[len(before) :]
        self.shown += piece
        return piece

    def feed(self, delta: str) -> str:
        self.raw += delta
        cut = safe_cut(self.raw, self.pos)
        return self._release(cut) if cut > self.pos else ""

    def close(self) -> str:
        end = len(self.raw.rstrip())
        return self._release(end) if end > self.pos else ""


# ------------------------------------------------------------------------------------ publisher
class AnswerPublisher:
    """Adds one question's entries to its Redis stream: ``XADD`` with ``MAXLEN`` and ``EXPIRE``.

    At most ``maxlen`` entries: past ``maxlen - 2`` deltas the rest are merged into one entry
    added before the terminal one, so Redis never trims an entry a late reader still needs. A
    Redis error is logged once and ends the publishing (the task's result still carries the
    answer); it never fails the question.
    """

    def __init__(self, client: redis.Redis, task_id: str, maxlen: int, ttl_s: int) -> None:
        self.client = client
        self.key = answer_stream_key(task_id)
        self.maxlen = maxlen
        self.ttl_s = ttl_s
        self.entries = 0
        self.published_text = False
        self._held: list[str] = []
        self._broken = False

    def delta(self, text: str) -> None:
        if not text:
            return
        self.published_text = True
        if self.entries >= self.maxlen - 2:
            self._held.append(text)
            return
        self._add(delta_fields(text))

    def end(self, result: dict) -> None:
        """The terminal entry for the task's result (after any merged deltas). An answer no
        generator streamed (the extractive one, or the fallback after a chat model failed before
        its first delta) goes out first as deltas, one per sentence (:func:`sentence_deltas`): a
        reader sees the same shape of stream whatever the generator."""
        if not self.published_text and result.get("ok") is not False and not result.get("no_answer"):
            for piece in sentence_deltas(str(result.get("answer") or "")):
                self.delta(piece)
        if self._held:
            self._add(delta_fields("".join(self._held)))
            self._held = []
        self._add(terminal_fields(result))

    def _add(self, fields: dict[str, str]) -> None:
        if self._broken:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            # redis' stub takes a dict of its own key and value types (a dict[str, str] is not one)
            entry: dict[FieldT, EncodableT] = {k: v for k, v in fields.items()}
            pipe.xadd(self.key, entry, maxlen=self.maxlen, approximate=False)
            pipe.expire(self.key, self.ttl_s)
            pipe.execute()
            self.entries += 1
        except redis.RedisError as exc:
            self._broken = True
            log.warning("answer stream: Redis refused an entry, not publishing more: %s", type(exc).__name__)


def sentence_deltas(text: str) -> list[str]:
    """``text`` cut after each of its sentences (:func:`ragline.shared.worker.text.split_sentences`):
    the pieces, whitespace and line breaks included, join back into ``text`` exactly (pure)."""
    pieces: list[str] = []
    pos = 0
    for sentence in split_sentences(text):
        at = text.find(sentence, pos)
        if at < 0:  # the splitter normalised something: the rest goes out as one piece
            break
        pieces.append(text[pos : at + len(sentence)])
        pos = at + len(sentence)
    if pos < len(text):
        if pieces and not text[pos:].strip():
            pieces[-1] += text[pos:]
        else:
            pieces.append(text[pos:])
    return pieces


_clients: dict[tuple[int, str], redis.Redis] = {}


def answer_publisher(task_id: str) -> AnswerPublisher:
    """The publisher of ask task ``task_id``, on this process's client of the broker's Redis."""
    settings = get_settings()
    url = settings.effective_redis_url()
    key = (os.getpid(), url)  # never a connection inherited across a fork
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return AnswerPublisher(client, task_id, settings.answer.stream_maxlen, settings.answer.stream_ttl_s)


_publisher: ContextVar[AnswerPublisher | None] = ContextVar("ragline_answer_publisher", default=None)


@contextmanager
def publishing(publisher: AnswerPublisher) -> Iterator[AnswerPublisher]:
    """The current question publishes its answer through ``publisher``."""
    token = _publisher.set(publisher)
    try:
        yield publisher
    finally:
        _publisher.reset(token)


def current_publisher() -> AnswerPublisher | None:
    return _publisher.get()


# ------------------------------------------------------------------------------------ generation
def stream_generation(
    generator: StreamingGenerator,
    system: str,
    messages: list[dict],
    hits: list[Hit],
    publisher: AnswerPublisher,
    timeout_s: float,
    lang: str = texts.FALLBACK,
) -> Generation:
    """One streamed completion, its link-safe deltas published as they arrive.

    Bounded like the completion it replaces: ``timeout_s`` overall (checked at every delta; each
    wait for bytes is bounded by the provider client's timeout) and the question's deadline. A
    failure before anything was published propagates (the caller falls back to the extractive
    answer, as without streaming); after, it is :class:`StreamInterrupted`.
    """
    deadline.check("streaming the answer")  # past the deadline nothing is published, not even a delta
    text = LinkSafeText(hits, lang)
    started = time.monotonic()
    left = deadline.remaining_s()
    read_timeout = max(0.1, min(timeout_s, left)) if left is not None else timeout_s
    result: Generation | None = None
    try:
        for part in generator.stream(system, messages, timeout_s=read_timeout):
            if not isinstance(part, str):  # the Generation, after the last delta
                result = part
                continue
            publisher.delta(text.feed(part))
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"the answer took longer than {timeout_s:g}s")
            deadline.check("streaming the answer")
        if result is None:
            raise RuntimeError("the stream ended without its result")
    except Exception as exc:
        if not publisher.published_text:
            raise
        raise StreamInterrupted(
            f"{generator.name} stopped after {len(text.raw)} characters ({_why(exc)})"
        ) from exc
    publisher.delta(text.close())
    return result


def _why(exc: BaseException) -> str:
    """The exception's kind without its message (which may quote the provider's body)."""
    return str(exc) if isinstance(exc, ProviderError | deadline.QueryLimitError) else type(exc).__name__
