"""The document formats ragline ingests, each declared once: its suffixes, the content types a URL
source may serve it as, whether it is binary, and the parser module that reads it.

Everything that needs to know the formats reads them here: the contracts validate ``fmt`` against
:data:`FormatName`, the ingest side maps suffixes and content types through :func:`by_suffix` and
:func:`by_content_type` and finds each parser by its module name. Adding a format is one entry
below and its parser module in ``ingest/parse/`` (an ``elements`` function: decoded text ->
``(elements, title)`` for a text format, raw bytes -> elements for a binary one). Source code is not
a document format: its languages are declared by ``ingest/parse/code.py``.

The producer side imports this module (the contracts do), so it names parsers by module instead of
importing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal


@dataclass(frozen=True)
class DocumentFormat:
    name: str
    #: lower-case file suffixes, dot included
    suffixes: tuple[str, ...]
    #: MIME types (without parameters) a URL source may serve the format as
    content_types: tuple[str, ...]
    #: bytes go to the parser as they are; a text format is decoded (UTF-8, NUL bytes refused) first
    binary: bool
    #: the module of ``ragline.ingest.parse`` whose ``elements`` function reads the format
    parser: str
    #: how people call it, in help texts ("reStructuredText")
    label: str
    #: raised when what a document of the format becomes (elements, chunks) changes for the same
    #: bytes: stored documents of the format are prepared again on their next ingest
    version: int = 1


FORMATS: tuple[DocumentFormat, ...] = (
    DocumentFormat(
        "md",
        (".md", ".markdown"),
        ("text/markdown",),
        binary=False,
        parser="markdown",
        label="Markdown",
        version=2,  # 2: chunks carry their source lines; attribute lists leave the headings
    ),
    DocumentFormat("html", (".html", ".htm"), ("text/html",), binary=False, parser="html", label="HTML"),
    DocumentFormat("text", (".txt", ".text"), ("text/plain",), binary=False, parser="text", label="text"),
    # the docs of most Python projects (Sphinx); parsed by docutils, not as plain text
    DocumentFormat(
        "rst",
        (".rst", ".rest"),
        ("text/x-rst", "text/prs.fallenstein.rst"),
        binary=False,
        parser="rst",
        label="reStructuredText",
        version=2,  # 2: chunks carry their source lines
    ),
    DocumentFormat("pdf", (".pdf",), ("application/pdf",), binary=True, parser="pdf", label="PDF"),
    DocumentFormat(
        "docx",
        (".docx",),
        ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",),
        binary=True,
        parser="docx",
        label="DOCX",
    ),
)

NAMES: tuple[str, ...] = tuple(f.name for f in FORMATS)

if TYPE_CHECKING:
    FormatName = str
else:
    #: the ``fmt`` of the contracts: one of the declared names (a JSON Schema enum)
    FormatName = Literal[NAMES]

_BY_NAME = {f.name: f for f in FORMATS}
_BY_SUFFIX = {suffix: f.name for f in FORMATS for suffix in f.suffixes}
_BY_CONTENT_TYPE = {ctype: f.name for f in FORMATS for ctype in f.content_types}


def get(name: str) -> DocumentFormat | None:
    return _BY_NAME.get(name)


def by_suffix() -> dict[str, str]:
    """Suffix -> format name, for every declared suffix (a new dict each call: callers extend it)."""
    return dict(_BY_SUFFIX)


def by_content_type(content_type: str) -> str | None:
    """The format a URL source serves as ``content_type`` (parameters stripped, any case)."""
    return _BY_CONTENT_TYPE.get(content_type.split(";")[0].strip().lower())


def binary_names() -> frozenset[str]:
    return frozenset(f.name for f in FORMATS if f.binary)
