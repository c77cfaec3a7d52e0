"""Parse and validate [N] citations in an answer, and describe each cited source for a chat UI:
page, heading path, line span, a ready-to-show locator and the snippet the answer used."""

from __future__ import annotations

import re

from ragline.query.answer import texts
from ragline.query.answer.extractive import clean_sentence, prose_sentences, stems
from ragline.query.answer.sanitize import code_regions
from ragline.shared.sdk.contracts import Citation, Hit

_CITE = re.compile(r"\[(\d{1,3})\]")
_SPACE = re.compile(r"\s+")
#: a fenced code block of an answer: what looks like ``[2]`` inside it is code (``codes[200]``), not a citation
FENCED = re.compile(r"^```[^\n]*\n(.*?)\n?```[ \t]*$", re.S | re.M)


def outside_code(answer: str) -> str:
    """The answer with its code (fenced blocks, code spans: query/answer/sanitize.py ``code_regions``)
    blanked out, same length, so offsets still hold."""
    out = answer
    for start, end in code_regions(answer):
        out = out[:start] + re.sub(r"[^\n]", " ", out[start:end]) + out[end:]
    return out


#: longest snippet, in characters (a few sentences beside a citation, not the chunk)
SNIPPET_MAX = 400


def cited_numbers(answer: str) -> list[int]:
    seen: list[int] = []
    for m in _CITE.finditer(outside_code(answer)):
        n = int(m.group(1))
        if n not in seen:
            seen.append(n)
    return seen


def renumber(answer: str) -> tuple[str, list[int]]:
    """The answer with its citations numbered 1, 2, … in the order they first appear (an answer
    quoting passages 1 and 3 cites [1] and [2]: no gaps), and the old number of each new one.
    Brackets inside code are code and stay as written."""
    order = cited_numbers(answer)
    new = {old: i for i, old in enumerate(order, start=1)}
    out, pos = [], 0
    for m in _CITE.finditer(outside_code(answer)):
        out += [answer[pos : m.start()], f"[{new[int(m.group(1))]}]"]
        pos = m.end()
    return "".join(out) + answer[pos:], order


def invalid_citations(answer: str, n_documents: int) -> list[int]:
    """Numbers cited that do not name a document in the prompt (1..n_documents)."""
    return [n for n in cited_numbers(answer) if not 1 <= n <= n_documents]


def claims(answer: str) -> dict[int, list[str]]:
    """The answer text each [N] stands behind: the text since the previous citation (for
    "… [1][2]" both numbers stand behind the same text)."""
    out: dict[int, list[str]] = {}
    prev_end, text = 0, ""
    for m in _CITE.finditer(outside_code(answer)):
        segment = answer[prev_end : m.start()]
        if segment.strip(" ,;"):
            text = segment.strip()
        out.setdefault(int(m.group(1)), []).append(text)
        prev_end = m.end()
    return out


def _bounded(text: str, limit: int = SNIPPET_MAX) -> str:
    text = _SPACE.sub(" ", text).strip()
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 1)
    return text[: cut if cut > limit // 2 else limit - 1].rstrip(" ,;:") + "…"


def snippet(content: str, said: list[str]) -> str:
    """The sentences of ``content`` behind what the answer ``said`` citing it: the sentences it
    quotes (the extractive answer quotes whole ones), else for each of its sentences the chunk
    sentence sharing most words with it; the chunk's opening when nothing matches."""
    sentences = prose_sentences(content)
    picked: set[int] = set()
    for claim in said:
        quoted = {i for i, s in enumerate(sentences) if clean_sentence(s) in claim or s in claim}
        if quoted:
            picked |= quoted
            continue
        for part in re.split(r"(?<=[.!?…])\s+", claim):
            words = stems(part)
            if not words or not sentences:
                continue
            best = max(range(len(sentences)), key=lambda i: len(words & stems(sentences[i])))
            if len(words & stems(sentences[best])) >= min(2, len(words)):
                picked.add(best)
    if picked:
        return _bounded(" ".join(sentences[i] for i in sorted(picked)))
    return _bounded(" ".join(sentences) if sentences else content)


def _line(value: object) -> int | None:
    """A line number from chunk metadata (JSON): a positive int, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def locator(
    path: str,
    page: int | None,
    heading_path: str,
    start_line: int | None,
    end_line: int | None,
    lang: str = texts.FALLBACK,
) -> str:
    """Where to look, as a chat UI shows it: ``path:12-40`` for code, ``p. 11`` for a paged
    document, ``§ Heading › Sub`` for a section, else the path."""
    if start_line is not None:
        end = end_line if end_line is not None and end_line > start_line else None
        return f"{path}:{start_line}-{end}" if end else f"{path}:{start_line}"
    if page is not None:
        return texts.say("page", lang, page=str(page))
    if heading_path:
        return f"§ {heading_path}"
    return path


def build_citations(answer: str, hits: list[Hit], lang: str = texts.FALLBACK) -> list[Citation]:
    """One citation per number the answer cites (first appearance order); every number must
    name a hit (see :func:`invalid_citations`). Locators are written in ``lang``, the answer's."""
    said = claims(answer)
    out = []
    for n in cited_numbers(answer):
        h = hits[n - 1]
        start, end = _line(h.metadata.get("start_line")), _line(h.metadata.get("end_line"))
        out.append(
            Citation(
                n=n,
                doc_id=h.doc_id,
                chunk_no=h.chunk_no,
                heading=h.heading,
                path=h.path,
                page=h.page,
                heading_path=h.heading,
                snippet=snippet(h.content, said.get(n, [])),
                start_line=start,
                end_line=end if start is not None else None,
                locator=locator(h.path or h.doc_id, h.page, h.heading, start, end, lang),
            )
        )
    return out
