"""Section and parent-document expansion of the top hits: what the answer reads beyond the chunks.

A chunk is a fragment: the list item ``.lazy`` without its siblings ``.number`` and ``.trim``, a
comparison's second half, a heading with one sentence under it. Retrieval ranks chunks because a
short text is matched precisely; the answer needs the whole of what the chunk belongs to. For
generators with a large context ("RAG selects whole documents, not chunks, and puts 3–5 of them
into the context"), ``ask`` can send more than the chunks it found:

* ``section``: for each of the first ``hits`` hits, the chunks of its document under the same
  section (the hit's heading path without its last heading, or the whole path when it has one
  level), the nearest to the hit first, at most ``chunks`` in all per hit;
* ``document``: the hit's whole document, the nearest chunks first, at most ``chunks`` per hit.

The chunks added keep the hit's score (just below it, in document order), so context assembly
(``query/answer/context.py``) merges them with the hit into one passage and its token budget drops what
does not fit. Pure functions; the statement that reads the chunks is ``retrievers.document_chunks``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragline.shared.sdk.contracts import Hit

SEPARATOR = " › "


def section_of(heading_path: str) -> str:
    """The section a chunk belongs to: its heading path without the last heading (a chunk under
    "Формы › Модификаторы › .lazy" belongs to "Формы › Модификаторы"), or the path itself when it
    has one level (a chapter's chunk, its chapter)."""
    parts = [p for p in (heading_path or "").split(SEPARATOR) if p]
    return SEPARATOR.join(parts[:-1] if len(parts) > 1 else parts)


def in_section(heading_path: str, section: str) -> bool:
    return heading_path == section or (heading_path or "").startswith(section + SEPARATOR) or not section


@dataclass(frozen=True)
class Expansion:
    """``mode``: off, section or document; ``hits``: how many of the top hits are expanded;
    ``chunks``: at most this many chunks added per expanded hit."""

    mode: str = "off"
    hits: int = 3
    chunks: int = 6

    def documents(self, hits: Sequence[Hit]) -> list[str]:
        """The documents whose chunks the expansion reads (none when off)."""
        if self.mode == "off":
            return []
        return list(dict.fromkeys(h.doc_id for h in hits[: self.hits]))

    def expand(self, hits: Sequence[Hit], chunks: Iterable[Hit]) -> list[Hit]:
        """``hits`` with the chunks each of the first ``self.hits`` hits brings, right after it;
        ``chunks``: the chunks of :meth:`documents` (any order). A chunk already among the hits
        or added for an earlier hit is not added again."""
        if self.mode == "off":
            return list(hits)
        by_doc: dict[str, list[Hit]] = {}
        for c in chunks:
            by_doc.setdefault(c.doc_id, []).append(c)
        seen = {(h.doc_id, h.chunk_no) for h in hits}
        out: list[Hit] = []
        for i, h in enumerate(hits):
            out.append(h)
            if i >= self.hits:
                continue
            section = section_of(h.heading)
            pool = [
                c
                for c in by_doc.get(h.doc_id, [])
                if (c.doc_id, c.chunk_no) not in seen
                and (self.mode == "document" or in_section(c.heading, section))
            ]
            pool.sort(key=lambda c: (abs(c.chunk_no - h.chunk_no), c.chunk_no))
            added = sorted(pool[: self.chunks], key=lambda c: c.chunk_no)
            for c in added:
                seen.add((c.doc_id, c.chunk_no))
                out.append(c.model_copy(update={"score": h.score, "fused_score": h.fused_score}))
        return out
