"""The CLI's citation line for code: the path once, with its lines, then the symbol path."""

from __future__ import annotations

from ragline.cli.query import citation_line
from ragline.query.answer.citations import build_citations
from ragline.shared.sdk.contracts import Hit


def code_citation(heading: str) -> dict:
    hit = Hit(
        doc_id="r/pkg/hooks.py",
        chunk_no=2,
        path="r/pkg/hooks.py",
        heading=heading,
        content="def run(self):\n    return 1\n",
        metadata={"start_line": 7, "end_line": 9, "span_start": 7, "span_end": 9},
    )
    return build_citations("It runs [1].", [hit])[0].model_dump()


def test_a_code_citation_names_its_path_once():
    line = citation_line(code_citation("pkg/hooks.py › Registry › run"))
    assert line == "[1] r/pkg/hooks.py:7-9 · Registry › run"
    assert line.count("hooks.py") == 1


def test_module_level_code_prints_the_located_path_alone():
    assert citation_line(code_citation("pkg/hooks.py")) == "[1] r/pkg/hooks.py:7-9"


def test_documents_keep_their_path_locator_and_heading():
    c = {
        "n": 2,
        "doc_id": "d",
        "chunk_no": 0,
        "path": "docs/a.pdf",
        "locator": "p. 3",
        "heading_path": "A › B",
    }
    assert citation_line(c) == "[2] docs/a.pdf · p. 3 · A › B"
    c = {
        "n": 3,
        "doc_id": "d",
        "chunk_no": 0,
        "path": "docs/a.md",
        "locator": "§ A › B",
        "heading_path": "A › B",
    }
    assert citation_line(c) == "[3] docs/a.md · § A › B"
