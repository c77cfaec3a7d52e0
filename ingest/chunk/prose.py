"""Prose chunking: sections by heading, sentences packed up to ``max_chars`` with whole-sentence overlap.

Pure functions only. Tables and code blocks are indivisible units unless one alone exceeds
``hard_max_chars``; then it is split by lines (a table repeats its header line in each part).
Source files are chunked along their definitions instead (:mod:`.code`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby

from ragline.ingest.chunk.base import Chunk
from ragline.ingest.parse.common import Block
from ragline.shared.worker.text import split_sentences

#: the whole-sentence overlap between neighbouring chunks, as a share of ``max_chars``: a sentence
#: that continues the one before keeps its context. Part of how a document is prepared, so a change
#: is a version bump of the formats (docs/contributing.md, "Add a file format")
OVERLAP_RATIO = 0.15


@dataclass(frozen=True)
class _Unit:
    text: str
    kind: str  # sentence | table | code
    page: int | None
    block_start: bool  # first unit of its block: joined with a newline, not a space
    lines: tuple[int, int] | None = None  # its block's source lines (Block.lines)


def _split_lines(text: str, limit: int, repeat_header: bool) -> list[str]:
    lines = text.splitlines() or [text]
    header = lines[0] if repeat_header and len(lines) > 1 else None
    body = lines[1:] if header is not None else lines
    parts: list[str] = []
    cur: list[str] = [header] if header else []
    for line in body:
        while len(line) > limit:  # a single monstrous line: cut by code points
            if cur and cur != [header]:
                parts.append("\n".join(cur))
                cur = [header] if header else []
            parts.append(line[:limit])
            line = line[limit:]
        size = sum(len(x) + 1 for x in cur) + len(line)
        if cur and cur != [header] and size > limit:
            parts.append("\n".join(cur))
            cur = [header] if header else []
        cur.append(line)
    if cur and cur != [header]:
        parts.append("\n".join(cur))
    return parts


def _units(blocks: Iterable[Block], max_chars: int, hard_max: int) -> list[_Unit]:
    units: list[_Unit] = []
    for block in blocks:
        if block.kind in ("table", "code"):
            pieces = (
                [block.text]
                if len(block.text) <= hard_max
                else _split_lines(block.text, hard_max, repeat_header=block.kind == "table")
            )
            units.extend(_Unit(p, block.kind, block.page, True, block.lines) for p in pieces)
            continue
        for i, sent in enumerate(split_sentences(block.text)):
            # a single sentence longer than the limit is cut at whitespace (rare: URLs, lists)
            pieces = (
                [sent] if len(sent) <= max_chars else _split_lines(_wrap(sent, max_chars), max_chars, False)
            )
            units.extend(
                _Unit(p, "sentence", block.page, i == 0 and j == 0, block.lines) for j, p in enumerate(pieces)
            )
    return units


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=True, break_on_hyphens=False))


def _join(units: list[_Unit]) -> str:
    out = ""
    for u in units:
        if not out:
            out = u.text
        else:
            out += ("\n" if u.block_start or u.kind != "sentence" else " ") + u.text
    return out


def _size(units: list[_Unit]) -> int:
    return len(_join(units))


def pack_section(units: list[_Unit], max_chars: int, overlap_chars: int) -> list[list[_Unit]]:
    """Greedy packing; each new chunk starts with the previous chunk's trailing whole sentences
    (at most ``overlap_chars``), and only when it also gets at least one new unit."""
    chunks: list[list[_Unit]] = []
    cur: list[_Unit] = []
    n_overlap = 0  # how many leading units of ``cur`` are overlap
    for unit in units:
        if cur and len(cur) > n_overlap and _size([*cur, unit]) > max_chars:
            chunks.append(cur)
            overlap = _tail_overlap(cur, overlap_chars)
            cur, n_overlap = list(overlap), len(overlap)
            # drop overlap that would push the new unit over the limit
            while n_overlap and _size([*cur, unit]) > max_chars:
                cur.pop(0)
                n_overlap -= 1
        cur.append(unit)
    if cur and len(cur) > n_overlap:
        chunks.append(cur)
    return chunks


def _tail_overlap(units: list[_Unit], budget: int) -> list[_Unit]:
    tail: list[_Unit] = []
    for u in reversed(units):
        if u.kind != "sentence" or _size([u, *tail]) > budget:
            break
        tail.insert(0, u)
    if len(tail) == len(units):  # never repeat a whole chunk
        tail = tail[1:]
    return tail


def chunk_blocks(
    blocks: list[Block],
    max_chars: int = 800,
    overlap_ratio: float = OVERLAP_RATIO,
    hard_max_chars: int = 4000,
) -> list[Chunk]:
    overlap_chars = int(max_chars * overlap_ratio)
    chunks: list[Chunk] = []
    for heading_path, section in groupby(blocks, key=lambda b: b.heading_path):
        units = _units(section, max_chars, hard_max_chars)
        for packed in pack_section(units, max_chars, overlap_chars):
            kinds = {u.kind for u in packed}
            kind = (
                "text"
                if kinds == {"sentence"}
                else ("table" if "table" in kinds else ("code" if "code" in kinds else "text"))
            )
            pages = [u.page for u in packed if u.page is not None]
            chunks.append(
                Chunk(
                    len(chunks),
                    _join(packed),
                    heading_path,
                    kind if len(kinds) == 1 else "mixed",
                    pages[0] if pages else None,
                    line_span([u.lines for u in packed]),
                )
            )
    return chunks


def line_span(lines: list[tuple[int, int] | None]) -> dict:
    """A chunk's ``start_line``/``end_line`` (the metadata a citation reads, as for code) from
    its units' source lines; {} when none of them was placed (pure)."""
    placed = [span for span in lines if span is not None]
    if not placed:
        return {}
    return {"start_line": min(a for a, _ in placed), "end_line": max(b for _, b in placed)}
