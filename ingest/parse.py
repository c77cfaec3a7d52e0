"""Parse a source file into ordered blocks that carry their heading path and page.

``unstructured`` does the format work; this module only turns its elements into
:class:`Block` values with a heading path ("A › B › C"), keeps tables and code as whole
blocks, and records the page number when the format has pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from shared.offline_nlp import install_blank_spacy

HEADING_SEP = " › "

SUPPORTED = {".md": "md", ".markdown": "md", ".txt": "text", ".text": "text", ".html": "html", ".htm": "html"}


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


_KIND = {"Table": "table", "CodeSnippet": "code", "ListItem": "list"}


def blocks_from_elements(elements: list, default_title: str) -> ParsedDocument:
    """Pure: walk unstructured elements keeping a heading stack by ``category_depth``."""
    stack: list[tuple[int, str]] = []
    blocks: list[Block] = []
    title = ""
    for el in elements:
        name = type(el).__name__
        text = (el.text or "").strip()
        if not text:
            continue
        meta = el.metadata
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
    """Drop VitePress-style ``{#anchor}`` ids from headings."""
    text = text.strip()
    if text.endswith("}") and "{#" in text:
        text = text[: text.rindex("{#")].rstrip()
    return text


def parse_file(path: Path) -> ParsedDocument:
    fmt = SUPPORTED.get(path.suffix.lower())
    if fmt is None:
        raise ParseError(f"unsupported file type {path.suffix or '(none)'!r}")
    data = path.read_bytes()
    return parse_bytes(data, fmt, default_title=path.stem)


def decode_text(data: bytes) -> str:
    if not data.strip():
        raise ParseError("empty document")
    if b"\x00" in data[:8192]:
        raise ParseError("binary content (NUL bytes) in a text document")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParseError(f"not valid UTF-8 at byte {exc.start}") from None


def parse_bytes(data: bytes, fmt: str, default_title: str = "") -> ParsedDocument:
    install_blank_spacy()
    text = decode_text(data)
    if fmt == "md":
        from unstructured.partition.md import partition_md

        elements = partition_md(text=text)
    elif fmt == "html":
        from unstructured.partition.html import partition_html

        elements = partition_html(text=text)
    elif fmt == "text":
        from unstructured.partition.text import partition_text

        elements = partition_text(text=text)
    else:
        raise ParseError(f"unsupported format {fmt!r}")
    doc = blocks_from_elements(elements, default_title)
    doc.fmt = fmt
    if not doc.blocks:
        raise ParseError("no text found in document")
    return doc
