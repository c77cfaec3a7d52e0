"""Symbol records: one short record per definition of a parsed source file, the symbol layer.

A record holds what a reader of a repository map needs: the comments and decorators above the
definition, its signature and the first paragraph of its docstring. :func:`symbol_chunks` makes
them chunks of the same document (rows that live and die with it), numbered after its code chunks.
Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragline.ingest.chunk.base import Chunk
from ragline.ingest.parse.code import CodeDocument

#: a symbol record's leading comment and docstring, characters each (their first paragraph): short on
#: purpose, like the record. Part of how a source file is prepared (``ingest/pipeline.py``'s
#: ``CODE_VERSION``)
DOC_CHARS = 300

_DOCSTRING_OPEN = ("'''", '"""')


@dataclass(frozen=True)
class SymbolRecord:
    """One definition as the symbol layer holds it: what a reader of a repository map needs."""

    path: tuple[str, ...]  # symbol path
    kind: str  # class | function | method
    start: int  # the definition's lines, 1-based, inclusive
    end: int
    content: str  # the comments and decorators above it, its signature, its docstring's first paragraph


def _dedent(lines: list[str]) -> list[str]:
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return [x[indent:] if x[:indent].isspace() or not x[:indent] else x.lstrip() for x in lines]


def _docstring(lines: list[str], after: int, doc_chars: int) -> list[str]:
    """The first paragraph of the Python docstring on the lines after line ``after`` (1-based), or []."""
    i = after
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines):
        return []
    first = lines[i].strip().lstrip("rRuUbB")
    quote = next((q for q in _DOCSTRING_OPEN if first.startswith(q)), None)
    if quote is None:
        return []
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    out: list[str] = []
    size = 0
    for j in range(i, min(len(lines), i + 40)):
        line = lines[j]
        body = line.strip()
        closes = body.endswith(quote) and (j > i or len(body.lstrip("rRuUbB")) >= 2 * len(quote))
        if j > i and not body:
            out.append(indent + quote)  # the first paragraph is enough
            break
        if size + len(line) > doc_chars and out:
            out.append(indent + "..." + quote)
            break
        out.append(line)
        size += len(line) + 1
        if closes:
            break
    return out


def symbol_records(doc: CodeDocument, doc_chars: int = DOC_CHARS) -> list[SymbolRecord]:
    """One record per definition found by tree-sitter (none for files read by lines): the lines above
    the definition that belong to it (comments, decorators), its signature and the first paragraph
    of its docstring, at most ``doc_chars`` of comment and docstring each. Short on purpose: cheap to
    embed, and a question naming what a function does finds the function, not a caller."""
    lines = doc.lines
    out: list[SymbolRecord] = []
    seen: set[tuple[tuple[str, ...], int]] = set()
    for d in doc.definitions:
        if (d.path, d.start) in seen:
            continue
        seen.add((d.path, d.start))
        above = [x for x in lines[d.start - 1 : d.signature[0] - 1] if x.strip()]
        while above and sum(len(x) + 1 for x in above) > doc_chars:
            above.pop(0)  # a long comment block: keep the lines nearest the definition
        signature = lines[d.signature[0] - 1 : d.signature[1]]
        docstring = _docstring(lines, d.signature[1], doc_chars) if doc.language == "python" else []
        content = "\n".join(_dedent([*above, *signature, *docstring])).strip("\n")
        if content.strip():
            out.append(SymbolRecord(d.path, d.kind, d.start, d.end, content))
    return out


def symbol_chunks(doc: CodeDocument, first_no: int, doc_chars: int = DOC_CHARS) -> list[Chunk]:
    """The symbol records of a parsed source file as chunks numbered from ``first_no``, with the
    same heading, span and symbol metadata as code chunks (``kind`` ``symbol``)."""
    module = (doc.title,) if doc.title else ()
    out = []
    for i, r in enumerate(symbol_records(doc, doc_chars)):
        symbol = ".".join(r.path)
        meta = {
            "span_start": r.start,
            "span_end": r.end,
            "start_line": r.start,
            "end_line": r.end,
            "language": doc.language,
            "symbol": symbol,
            "symbols": [symbol],
            "symbol_kind": r.kind,
        }
        out.append(Chunk(first_no + i, r.content, module + r.path, "symbol", None, meta))
    return out
