"""Parse a source file into ordered blocks that carry their heading path and page.

Source code (the languages of :mod:`.code`, by extension) is parsed by tree-sitter into a
:class:`~.code.CodeDocument` of definitions with line spans instead; the chunker packs it along them.

``unstructured`` does the format work (md, html, text, docx; PDF text goes through its text
partitioner page by page). Each format has its own module producing unstructured elements:
:mod:`.markdown`, :mod:`.html`, :mod:`.text`, :mod:`.pdf`, :mod:`.docx`. :func:`parse_bytes`
dispatches to them and turns their elements into :class:`Block` values with a heading path
("A › B › C") through :mod:`.common`, so every format reaches the chunker in the same shape.

The heavy libraries (unstructured, pdfminer, lxml, spaCy) are imported inside the functions that
use them: importing this package stays cheap for processes that only need its types.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded

from ragline.ingest.parse import code
from ragline.ingest.parse.code import CodeDocument
from ragline.ingest.parse.common import (
    BINARY_FORMATS,
    DOCUMENT_SUFFIXES,
    HEADING_SEP,
    Block,
    ParsedDocument,
    ParseError,
    blocks_from_elements,
    decode_text,
    install_fast_classifier,
    locate_lines,
    table_text,
)
from ragline.ingest.parse.docx import DOCX_MAX_RATIO, DOCX_MAX_UNCOMPRESSED
from ragline.ingest.parse.html import clean_html
from ragline.ingest.parse.markdown import clean_markdown
from ragline.ingest.parse.offline_nlp import install_blank_spacy
from ragline.shared.sdk import formats

__all__ = [
    "BINARY_FORMATS",
    "DOCX_MAX_RATIO",
    "DOCX_MAX_UNCOMPRESSED",
    "HEADING_SEP",
    "SUPPORTED",
    "Block",
    "CodeDocument",
    "ParseError",
    "ParsedDocument",
    "blocks_from_elements",
    "clean_html",
    "clean_markdown",
    "decode_text",
    "front_matter",
    "parse_bytes",
    "parse_file",
    "table_text",
]

#: every suffix ragline ingests -> its format: the document formats of ragline.shared.sdk.formats, and
#: source files, whose format is their language (``.py`` -> "python", parsed by :mod:`.code`)
SUPPORTED: dict[str, str] = {**DOCUMENT_SUFFIXES, **code.EXTENSIONS}
#: the text formats whose blocks carry the source lines they came from (:func:`locate_lines`)
LINE_FORMATS = frozenset({"md", "rst"})
#: each document format's parser module, as the format declares it
_PARSERS = {f.name: importlib.import_module(f"{__name__}.{f.parser}").elements for f in formats.FORMATS}

_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)


def parse_file(path: Path) -> ParsedDocument:
    fmt = SUPPORTED.get(path.suffix.lower())
    if fmt is None:
        raise ParseError(f"unsupported file type {path.suffix or '(none)'!r}")
    return parse_bytes(path.read_bytes(), fmt, default_title=path.stem)


def parse_bytes(data: bytes, fmt: str, default_title: str = "") -> ParsedDocument:
    if fmt in code.FORMATS:
        return code.parse_code(decode_text(data), fmt, default_title)
    install_blank_spacy()
    install_fast_classifier()
    elements, title = _elements(data, fmt)
    doc = blocks_from_elements(elements, default_title)
    if title and doc.title == default_title:
        doc.title = title
    if doc.title and doc.title != default_title:  # text before the first heading sits under the title
        doc.blocks = [
            b if b.heading_path else Block(b.text, b.kind, (doc.title,), b.page) for b in doc.blocks
        ]
    doc.fmt = fmt
    if not doc.blocks:
        # a document of headings only (often one short line that unstructured calls a Title):
        # its text is still the content, not nothing
        doc.blocks = [
            Block(text=(el.text or "").strip(), page=getattr(el.metadata, "page_number", None))
            for el in elements
            if (el.text or "").strip()
        ]
    if not doc.blocks:
        raise ParseError("no text found in document")
    if fmt in LINE_FORMATS:  # cited as path:start-end, like code
        doc.blocks = locate_lines(decode_text(data), doc.blocks)
    return doc


def _elements(data: bytes, fmt: str) -> tuple[list, str]:
    """The format module's elements and the title it found ("" when headings decide)."""
    if fmt in BINARY_FORMATS:
        if not data.strip():
            raise ParseError("empty document")
        return _guarded(fmt, _PARSERS[fmt], data), ""
    decoded = decode_text(data)
    parser = _PARSERS.get(fmt)
    if parser is None:
        raise ParseError(f"unsupported format {fmt!r}")
    return _guarded(fmt, parser, decoded)


def _guarded(fmt: str, parser, data):
    """Run a third-party parser; whatever it raises on one input is that document's error.

    unstructured, pdfminer and python-docx fail on odd inputs with their own bugs (an
    ``AttributeError`` from unstructured's HTML partitioner on a Markdown file holding only front
    matter and an HTML comment): left to propagate, such an error is not a document error, and the
    task would fail every document it carries. A time limit is not the parser's failure: re-raised."""
    try:
        return parser(data)
    except (ParseError, SoftTimeLimitExceeded, MemoryError, RecursionError):
        raise
    except Exception as exc:
        raise ParseError(
            f"the {fmt} parser failed on this document ({type(exc).__name__}: {str(exc)[:200]})"
        ) from exc


def front_matter(data: bytes) -> dict:
    """The YAML front matter of a Markdown document (``id``, ``related_code``, ``tags``, ...) as a
    dict; {} when there is none or it is not a YAML mapping (the document is still ingested)."""
    m = _FRONT_MATTER.match(data[:65536].decode("utf-8", "replace"))
    if not m:
        return {}
    import yaml  # parse package stays light: ~30 ms, only for documents with front matter

    try:
        value = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return {}
    if not isinstance(value, dict):
        return {}
    # dates and other YAML types become text, so the metadata stays JSON
    return {str(k): _plain(v) for k, v in value.items()}


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
