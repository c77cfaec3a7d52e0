"""Code chunking: a parsed source file's segments packed into chunks along its definitions.

:func:`chunk_code` packs the segments of a :class:`~ragline.ingest.parse.code.CodeDocument`
(``ingest/parse/code.py`` finds them) into chunks (pure, line based):

* a definition longer than ``max_chars`` is split at statement starts, preferring the shallowest
  statement in the second half of the window, and every part after the first repeats the
  signature, so a piece of a long method still says which method it is;
* tiny neighbours (one of them under ``min_chars``) are merged while the merged span fits, within
  the scope of the first one (module code with what follows it at the top level or inside a class
  it reaches, a class's header with its members), so a class of getters is one chunk, not ten;
* every chunk is a contiguous run of lines and carries its 1-based ``span_start``/``span_end``.

:func:`code_chunks` turns them into the stage's :class:`~.base.Chunk` values: the heading is the
module (the file's path) followed by the symbol path the chunk's definitions share. A chunk is
embedded with the symbol path only (:func:`code_context`), so a renamed file's unchanged
definitions keep their cached vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragline.ingest.chunk.base import Chunk
from ragline.ingest.parse.code import CodeDocument, Segment
from ragline.ingest.parse.common import HEADING_SEP

#: the sizes of a code chunk, in characters: a definition longer than MAX_CHARS is split at its
#: statements, and neighbours under MIN_CHARS are merged. Measured with the code ranking, whose
#: structure and file weights were fitted on chunks of these sizes (docs/evaluation.md), not a
#: deployment's choice; ingestion reads them here at each document, a test or an evaluation passes
#: other sizes as arguments or sets them for its run.
MAX_CHARS = 1500
MIN_CHARS = 300


@dataclass(frozen=True)
class CodeChunk:
    content: str
    start: int
    end: int
    heading: tuple[str, ...]  # the symbol path shared by the chunk's definitions
    symbols: tuple[str, ...]  # dotted symbol paths of every definition in the chunk
    continued: bool = False  # a later part of a split definition (its signature repeated on top)


def _blank(line: str) -> bool:
    return not line.strip()


@dataclass
class _Piece:
    start: int
    end: int
    segments: list[Segment]
    continued: bool = False
    split: bool = False  # part of a split definition: never merged
    prefix: str = ""  # the repeated signature
    text: str | None = None  # a slice of one line longer than a chunk


def _span_size(lines: list[str], start: int, end: int) -> int:
    return sum(len(line) + 1 for line in lines[start - 1 : end]) - 1


def chunk_code(doc: CodeDocument, max_chars: int = MAX_CHARS, min_chars: int = MIN_CHARS) -> list[CodeChunk]:
    """Chunks of a parsed source file (see the module docstring); empty for a file of blank lines."""
    lines = doc.lines
    pieces: list[_Piece] = []
    for seg in doc.segments:
        if _span_size(lines, seg.start, seg.end) <= max_chars:
            pieces.append(_Piece(seg.start, seg.end, [seg]))
        else:
            pieces.extend(_split(seg, lines, max_chars))
    merged: list[_Piece] = []
    for p in pieces:
        last = merged[-1] if merged else None
        if (
            last is not None
            and not last.split
            and not p.split
            and _within(p.segments[0].scope, last.segments[0].scope)
            and (
                _span_size(lines, last.start, last.end) < min_chars
                or _span_size(lines, p.start, p.end) < min_chars
            )
            and _span_size(lines, last.start, p.end) <= max_chars
        ):
            last.end = p.end
            last.segments.extend(p.segments)
            continue
        merged.append(p)
    chunks = []
    for p in merged:
        body = p.text if p.text is not None else "\n".join(lines[p.start - 1 : p.end])
        content = f"{p.prefix}\n{body}" if p.prefix else body
        if not content.strip():
            continue
        chunks.append(
            CodeChunk(content, p.start, p.end, _heading(p.segments), _symbols(p.segments), p.continued)
        )
    return chunks


def _within(scope: tuple[str, ...], outer: tuple[str, ...]) -> bool:
    """``scope`` is ``outer`` or lies inside it (a class's header merges with its first members)."""
    return scope[: len(outer)] == outer


def _heading(segments: list[Segment]) -> tuple[str, ...]:
    paths = [s.path for s in segments if s.is_def] or [segments[0].scope]
    common = paths[0]
    for path in paths[1:]:
        n = 0
        while n < min(len(common), len(path)) and common[n] == path[n]:
            n += 1
        common = common[:n]
    return common


def _symbols(segments: list[Segment]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(".".join(s.path) for s in segments if s.is_def and s.path))


def _split(seg: Segment, lines: list[str], max_chars: int) -> list[_Piece]:
    """A long segment in parts at statement starts; later parts repeat the signature."""
    prefix = ""
    if seg.signature is not None:
        prefix = "\n".join(lines[seg.signature[0] - 1 : seg.signature[1]])
        if len(prefix) > max_chars // 3:
            prefix = prefix[: max_chars // 3]
    bounds = dict(seg.boundaries)
    out: list[_Piece] = []
    start = seg.start
    while start <= seg.end:
        first = not out
        if not first:
            while start <= seg.end and _blank(lines[start - 1]):
                start += 1
            if start > seg.end:
                break
        budget = max_chars if first or not prefix else max(max_chars - len(prefix) - 1, max_chars // 2)
        if len(lines[start - 1]) > budget:  # one line longer than a chunk: cut it by characters
            line = lines[start - 1]
            out.extend(
                _Piece(start, start, [seg], bool(out) or i > 0, True, text=line[i : i + max_chars])
                for i in range(0, len(line), max_chars)
            )
            start += 1
            continue
        end, size = start, len(lines[start - 1])
        while end < seg.end and size + 1 + len(lines[end]) <= budget:
            size += 1 + len(lines[end])
            end += 1
        if end < seg.end:
            end = _cut_before(start, end, bounds)
        out.append(_Piece(start, end, [seg], not first, True, "" if first else prefix))
        start = end + 1
    return out


def _cut_before(start: int, end: int, bounds: dict[int, int]) -> int:
    """The last line of a part that could run from ``start`` to ``end``: the line before the
    shallowest statement start in the second half of that window (the last start when none is
    there), or ``end`` when no statement starts in it."""
    cands = [c for c in range(start + 1, end + 2) if c in bounds]
    if not cands:
        return end
    half = start + (end - start) // 2
    good = [c for c in cands if c - 1 >= half]
    best = min(good, key=lambda c: (bounds[c], -c)) if good else max(cands)
    return best - 1


def code_chunks(doc: CodeDocument, max_chars: int = MAX_CHARS, min_chars: int = MIN_CHARS) -> list[Chunk]:
    """A source file's chunks: the heading is the module (the document's title) and the symbol path;
    ``metadata`` holds the 1-based line span under both names the citations and the retrieval
    contract read (``span_start``/``span_end``, ``start_line``/``end_line``), the language, the
    chunk's main symbol and every symbol defined in it."""
    module = (doc.title,) if doc.title else ()
    out: list[Chunk] = []
    for c in chunk_code(doc, max_chars, min_chars):
        meta = {
            "span_start": c.start,
            "span_end": c.end,
            "start_line": c.start,
            "end_line": c.end,
            "language": doc.language,
            "symbol": ".".join(c.heading) or (c.symbols[0] if len(c.symbols) == 1 else ""),
            "symbols": list(c.symbols),
        }
        if c.continued:
            meta["continued"] = True
        out.append(Chunk(len(out), c.content, module + c.heading, "code", None, meta))
    return out


def code_context(chunk: Chunk, module: str) -> str:
    """A code chunk's context: its symbol path without the module (the file's path), so the text it
    is embedded with does not change when the file is renamed or moved."""
    heading = chunk.heading_path[1:] if chunk.heading_path[:1] == (module,) else chunk.heading_path
    return HEADING_SEP.join(heading)
