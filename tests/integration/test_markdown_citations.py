"""A cited Markdown or reStructuredText passage says ``path:start-end`` like code, its lines those
of the file; MkDocs attribute lists (``{ #handling-errors }``) reach neither titles nor citations.
Ingested by the real pipeline, asked through the query pool."""

from __future__ import annotations

import re

import pytest

from ragline.ingest.pipeline import ingest_document
from ragline.shared.sdk.contracts import IngestRequest
from ragline.shared.sdk.names import TASK_QUERY_ASK
from tests.unit.test_parse_lines import MD, RST

QUESTION = "Что объясняет второй абзац про исключения клиента?"


@pytest.mark.parametrize(
    ("fmt", "doc_id", "source", "line"),
    [("md", "guide/errors.md", MD, 10), ("rst", "guide/errors.rst", RST, 9)],
)
def test_a_cited_passage_says_its_path_and_lines(
    celery_worker, voyage, use_settings, tenant, fmt, doc_id, source, line
):
    from ragline.shared.worker.celery_app import app

    use_settings(answer_min_confidence=0, answer_grounding="off")
    req = IngestRequest(tenant=tenant, doc_id=doc_id, content=source, fmt=fmt, acl=["g"])
    assert ingest_document(req).status == "stored"
    payload = {"query": QUESTION, "tenant": tenant, "groups": ["g"], "k": 3, "mode": "lexical"}
    res = app.send_task(TASK_QUERY_ASK, args=[payload]).get(timeout=120)
    assert res["citations"], res
    for c in res["citations"]:
        m = re.fullmatch(re.escape(doc_id) + r":(\d+)(?:-(\d+))?", c["locator"])
        assert m, c["locator"]
        start, end = int(m.group(1)), int(m.group(2) or m.group(1))
        assert (c["start_line"], c["end_line"] or start) == (start, end)
        assert 1 <= start <= end <= len(source.splitlines())
        assert "{" not in c["heading_path"] and "#handling" not in c["locator"]
    cited = [c for c in res["citations"] if "исключения" in c["snippet"].lower()]
    assert cited and cited[0]["start_line"] <= line <= (cited[0]["end_line"] or line)
