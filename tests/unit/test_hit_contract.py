"""The hit's row contract (design seed 000): ``span_start``, ``span_end`` and ``title`` are optional
top-level fields of every hit, whatever built it, next to the fields they repeat."""

from __future__ import annotations

import json

from ragline.query.schemas import schemas
from ragline.shared.sdk.contracts import Hit, RerankRequest, SearchResponse


def test_a_code_hit_carries_its_line_span_and_title_at_the_top_level():
    hit = Hit(
        doc_id="repo/app.py",
        chunk_no=0,
        heading="app › Server.start",
        metadata={"span_start": 12, "span_end": 40, "start_line": 12, "end_line": 40},
    )
    assert (hit.span_start, hit.span_end, hit.title) == (12, 40, "app › Server.start")
    dumped = hit.model_dump(mode="json")
    assert (dumped["span_start"], dumped["span_end"], dumped["title"]) == (12, 40, "app › Server.start")
    # the old fields stay
    assert dumped["metadata"]["span_start"] == 12 and dumped["heading"] == "app › Server.start"


def test_a_text_hit_has_no_span_and_a_hit_without_heading_no_title():
    text = Hit(doc_id="kb/leave.md", chunk_no=1, heading="Отпуск", metadata={"kind": "text"})
    assert (text.span_start, text.span_end, text.title) == (None, None, "Отпуск")
    bare = Hit(doc_id="x", chunk_no=0, metadata={"span_start": True, "span_end": "7"})
    assert (bare.span_start, bare.span_end, bare.title) == (None, None, None)


def test_given_fields_win_and_every_model_holding_hits_fills_them():
    given = Hit(doc_id="x", chunk_no=0, heading="h", title="T", span_start=1, metadata={"span_start": 9})
    assert (given.title, given.span_start) == ("T", 1)
    # a reply of a worker that sent only metadata and heading (the older shape), decoded by a client
    reply = {
        "hits": [
            {"doc_id": "a.py", "chunk_no": 0, "heading": "a", "metadata": {"span_start": 3, "span_end": 5}}
        ]
    }
    hit = SearchResponse.model_validate(reply).hits[0]
    assert (hit.span_start, hit.span_end, hit.title) == (3, 5, "a")
    rerank = RerankRequest.model_validate({"query": "q", "tenant": "t", "hits": reply["hits"]})
    assert rerank.hits[0].span_end == 5


def test_the_exported_schema_lists_the_fields_as_optional():
    hit = json.loads(schemas()["search_response.json"])["$defs"]["Hit"]
    for field in ("span_start", "span_end", "title"):
        assert field in hit["properties"] and field not in hit.get("required", [])
    for old in ("heading", "metadata", "path", "content", "layer"):
        assert old in hit["properties"]
