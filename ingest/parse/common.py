"""What every format parser shares: the block model, the error, and the walk from unstructured
elements to blocks.

Each format module produces ``unstructured`` elements; :func:`blocks_from_elements` turns them into
:class:`Block` values with a heading path ("A › B › C") so that every format reaches the chunker in
the same shape. Tables are rendered one row per line, header first (:func:`table_text`), so the
chunker can split them by rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """Drop VitePress-style ``{#anchor}`` ids and collapse whitespace in headings."""
    text = " ".join(text.split())
    if text.endswith("}") and "{#" in text:
        text = text[: text.rindex("{#")].rstrip()
    return text


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
