"""What every format parser shares: the block model, the error, and the walk from unstructured
elements to blocks.

Each format module produces ``unstructured`` elements; :func:`blocks_from_elements` turns them into
:class:`Block` values with a heading path ("A › B › C") so that every format reaches the chunker in
the same shape. Tables are rendered one row per line, header first (:func:`table_text`), so the
chunker can split them by rows.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field, replace

from ragline.shared.sdk import formats

HEADING_SEP = " › "

#: the document formats' suffixes and which of them are binary: declared in ragline.shared.sdk.formats
DOCUMENT_SUFFIXES = formats.by_suffix()
BINARY_FORMATS = formats.binary_names()


class ParseError(ValueError):
    """The document cannot be parsed; the message is shown to the operator."""


@dataclass(frozen=True)
class Block:
    text: str
    kind: str = "text"  # text | table | code | list
    heading_path: tuple[str, ...] = ()
    page: int | None = None
    #: the 1-based first and last line of the source file the block came from (text formats whose
    #: parser loses them: :func:`locate_lines`); None when it could not be placed
    lines: tuple[int, int] | None = None

    @property
    def heading(self) -> str:
        return HEADING_SEP.join(self.heading_path)


@dataclass
class ParsedDocument:
    title: str
    blocks: list[Block] = field(default_factory=list)
    fmt: str = "text"

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)


_KIND = {"Table": "table", "CodeSnippet": "code", "ListItem": "list"}


def fast_element_type(text: str):
    """unstructured's HTML text classifier (``derive_element_type_from_text``) without the tests
    whose answers ragline never reads.

    Its narrative-text test runs a spaCy tokenizer and sentence splitter on every paragraph of a
    Markdown or HTML document, and was the largest cost of the ingest pipeline (most of parsing).
    What it decides (NarrativeText, Text, Address or EmailAddress) all becomes a ``text`` block
    (``_KIND``); only a list item and a one-character fragment (dropped) are told apart, as before.
    """
    from unstructured.documents.elements import ListItem, Text  # parse package stays light
    from unstructured.partition.text_type import is_bulleted_text

    if is_bulleted_text(text):
        return ListItem
    if len(text) < 2:
        return None
    return Text


_fast_classifier = False


def install_fast_classifier() -> None:
    """Put :func:`fast_element_type` in unstructured's HTML parser (Markdown is parsed through it);
    the parser looks the function up at call time."""
    global _fast_classifier
    if not _fast_classifier:
        from unstructured.partition.html import parser

        parser.derive_element_type_from_text = fast_element_type
        _fast_classifier = True


_SKIP = {"Image", "PageBreak", "Header", "Footer", "PageNumber"}


def blocks_from_elements(elements: list, default_title: str) -> ParsedDocument:
    """Pure: walk unstructured elements keeping a heading stack by ``category_depth``."""
    stack: list[tuple[int, str]] = []
    blocks: list[Block] = []
    title = ""
    for el in elements:
        name = type(el).__name__
        if name in _SKIP:
            continue
        meta = el.metadata
        if name == "Table":
            text = table_text(meta.text_as_html) if getattr(meta, "text_as_html", None) else ""
            text = text or (el.text or "").strip()
        else:
            text = (el.text or "").strip() if name != "CodeSnippet" else (el.text or "").strip("\n")
        text = text.replace("\x00", "")  # Postgres text cannot hold NUL
        if not text.strip():
            continue
        if name == "Title":
            depth = meta.category_depth if meta.category_depth is not None else 0
            while stack and stack[-1][0] >= depth:
                stack.pop()
            stack.append((depth, _clean_heading(text)))
            if not title:
                title = _clean_heading(text)
            continue
        kind = _KIND.get(name, "text")
        page = getattr(meta, "page_number", None)
        blocks.append(Block(text=text, kind=kind, heading_path=tuple(h for _, h in stack), page=page))
    return ParsedDocument(title=title or default_title, blocks=blocks)


def _clean_heading(text: str) -> str:
    """A heading without its attribute list and with its whitespace collapsed: VitePress'
    ``{#anchor}``, MkDocs' (attr_list) ``{ #handling-errors }``, ``{: #id .class key=value }``,
    Pandoc's ``{#id .class}`` are the page's markup, never its title."""
    text = " ".join(text.split())
    if text.endswith("}") and "{" in text:
        at = text.rindex("{")
        if is_attribute_list(text[at + 1 : -1]):
            text = text[:at].rstrip()
    return text


def is_attribute_list(inner: str) -> bool:
    """Whether the text between ``{`` and ``}`` is an attribute list: an optional ``:``, then only
    ``#id``, ``.class`` or ``key=value`` items (pure, no regular expression)."""
    items = inner.strip().removeprefix(":").split()
    return bool(items) and all(
        (i[0] in "#." and len(i) > 1) or ("=" in i and not i.startswith("=")) for i in items
    )


#: a block is placed by its first words, found in this order within this many words of the
#: source (markup the parser dropped, a link's address, sits between them there)
_LEAD_WORDS = 3
_LEAD_SPAN = 12
#: at most this many places of a block's first word are tried (a common word in a long file)
_MAX_CANDIDATES = 64


def locate_lines(source: str, blocks: list[Block]) -> list[Block]:
    """The blocks with the source lines they came from (:attr:`Block.lines`), found in order:
    a parser that renders the markup (Markdown, reStructuredText) keeps the words, not the line
    numbers, so each block is placed where its first words occur after the previous block, and
    ends on the line of its last word. A block that cannot be placed keeps ``lines=None`` (its
    chunk is cited by its heading, as before). Linear in the source's words."""
    from ragline.shared.worker.text import words

    positions: list[tuple[str, int]] = []  # every word of the source, lower-cased, with its line
    for no, line in enumerate(source.splitlines(), start=1):
        positions.extend((w.lower(), no) for w in words(line))
    index: dict[str, list[int]] = {}
    for i, (w, _) in enumerate(positions):
        index.setdefault(w, []).append(i)
    cursor = 0
    out = []
    for b in blocks:
        ws = [w.lower() for w in words(b.text)]
        at = _place(ws, index, cursor) if ws else None
        if at is None:
            out.append(b)
            continue
        end = at
        for w in ws[1:]:  # the block's words in order, each within the span after the last one
            nxt = _next(index.get(w, []), end + 1, end + _LEAD_SPAN)
            if nxt is not None:
                end = nxt
        out.append(replace(b, lines=(positions[at][1], positions[end][1])))
        cursor = end + 1
    return out


def _place(ws: list[str], index: dict[str, list[int]], cursor: int) -> int | None:
    """The position of the first word of ``ws`` at or after ``cursor`` followed by its next
    words in order within :data:`_LEAD_SPAN` words; of the candidates, the one whose lead words lie
    closest together (a word of front matter or a heading that happens to start the block's text a
    few words earlier is not where the block is), the earliest on a tie."""
    places = index.get(ws[0], [])
    start = bisect_left(places, cursor)
    lead = ws[1:_LEAD_WORDS]
    best: tuple[int, int] | None = None  # (spread, position)
    for at in places[start : start + _MAX_CANDIDATES]:
        pos, ok = at, True
        for w in lead:
            nxt = _next(index.get(w, []), pos + 1, at + _LEAD_SPAN)
            if nxt is None:
                ok = False
                break
            pos = nxt
        if ok and (best is None or pos - at < best[0]):
            best = (pos - at, at)
            if best[0] == len(lead):  # the lead words side by side: nothing can be closer
                break
    return None if best is None else best[1]


def _next(places: list[int], low: int, high: int) -> int | None:
    i = bisect_left(places, low)
    return places[i] if i < len(places) and places[i] <= high else None


def table_text(html: str) -> str:
    """A table as one line per row (``cell | cell``), the header row first."""
    import lxml.html  # parse package stays light: loads on first use

    try:
        root = lxml.html.fragment_fromstring(html, create_parent="div")
    except Exception:  # noqa: BLE001 - malformed table markup: caller falls back to plain text
        return ""
    lines = []
    for tr in root.iter("tr"):
        cells = [" ".join(td.text_content().split()) for td in tr if td.tag in ("td", "th")]
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)


def decode_text(data: bytes) -> str:
    """UTF-8 text of a text-format document; binary or mis-encoded input is a :class:`ParseError`
    here, before a partitioner turns it into pages of garbage."""
    if not data.strip():
        raise ParseError("empty document")
    if b"\x00" in data[:8192]:
        raise ParseError("binary content (NUL bytes) in a text document")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParseError(f"not valid UTF-8 at byte {exc.start}") from None
    controls = sum(1 for ch in text[:8192] if ord(ch) < 32 and ch not in "\t\n\r\f")
    if controls > 0.05 * min(len(text), 8192):
        raise ParseError("binary content (control characters) in a text document")
    return text
