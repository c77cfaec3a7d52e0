"""Code chunks of one file are merged into one excerpt only when their lines meet: a signature at
line 129 and a body at 316-327 stay two passages, each cited with its own ``path:start-end``
(``query/answer/context.py``); prose neighbours are merged as before."""

from __future__ import annotations

import pytest

from ragline.query.answer.citations import build_citations
from ragline.query.answer.context import assemble
from ragline.shared.sdk.contracts import Hit


def hit(doc_id: str, chunk_no: int, start: int, end: int, content: str, score: float = 1.0, **meta) -> Hit:
    meta = {"start_line": start, "end_line": end, **meta}
    return Hit(doc_id=doc_id, path=doc_id, chunk_no=chunk_no, content=content, score=score, metadata=meta)


def code(chunk_no: int, start: int, end: int, content: str, score: float = 1.0) -> Hit:
    return hit("r/enc.py", chunk_no, start, end, content, score, language="python")


SIGNATURE = code(3, 129, 131, "def jsonable_encoder(\n    obj,\n):", 0.9)
BODY = code(4, 316, 327, "\n".join(f"    line_{i} = {i}" for i in range(316, 328)))
NEXT = code(5, 328, 330, "    return encoded\n\n", 0.5)


@pytest.mark.parametrize(
    ("hits", "passages"),
    [
        ([BODY, SIGNATURE], [["r/enc.py:316-327"], ["r/enc.py:129-131"]]),  # apart: two passages
        ([NEXT, BODY], [["r/enc.py:316-330"]]),  # lines meet: one passage, numbered from its first line
    ],
)
def test_code_chunks_are_merged_only_when_their_lines_meet(hits, passages):
    assembly = assemble(hits)
    assert [[h.chunk_no for h in p.hits] for p in assembly.passages] == (
        [[4], [3]] if len(passages) == 2 else [[4, 5]]
    )
    answer = " ".join(f"[{n}]" for n in range(1, len(assembly.passages) + 1))
    cited = build_citations(answer, assembly.hits())
    assert [c.locator for c in cited] == [p[0] for p in passages]
    for hit, p in zip(assembly.hits(), assembly.passages, strict=True):  # numbered from the excerpt's start
        assert hit.metadata["start_line"] == p.hits[0].metadata["start_line"]


def test_prose_neighbours_still_merge():
    a, b = hit("d.md", 0, 1, 1, "Первый абзац."), hit("d.md", 1, 9, 9, "Второй абзац.", 0.5)
    assert [[h.chunk_no for h in p.hits] for p in assemble([a, b]).passages] == [[0, 1]]
