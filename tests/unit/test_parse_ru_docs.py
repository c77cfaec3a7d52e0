"""Parse + chunk the real documents of ru-docs; no database, no embedding.

The two PDFs (slow in pdfminer) are covered by the ingestion test
``tests/integration/test_ingest_ru_docs.py``, which parses every file anyway.
"""

from __future__ import annotations

import pytest

from ragline.ingest.chunk import chunk_blocks
from ragline.ingest.enqueue import collect_files
from ragline.ingest.parse import parse_file
from tests.conftest import DATASETS

RU_DOCS = DATASETS / "ru-docs"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not RU_DOCS.is_dir(), reason="ru-docs dataset not present"),
]


@pytest.fixture(scope="module")
def chunked() -> dict[str, list]:
    files = [f for f in collect_files([RU_DOCS]) if f.path.name != "README.md" and f.path.suffix != ".pdf"]
    assert len(files) == 135
    # keyed by the path inside ru-docs (the doc id without its source prefix)
    return {f.doc_id.split("/", 1)[1]: chunk_blocks(parse_file(f.path).blocks) for f in files}


def test_every_file_yields_chunks_with_heading_paths(chunked):
    for doc_id, chunks in chunked.items():
        assert chunks, doc_id
        with_path = [c for c in chunks if c.heading_path]
        # the two OWASP title pages have a logo line above their first heading
        assert len(with_path) >= len(chunks) - 1, doc_id
    formats = {d.rsplit(".", 1)[1] for d in chunked}
    assert formats == {"md", "html", "docx"}


def test_html_pages_lose_their_navigation_chrome(chunked):
    pages = {d: c for d, c in chunked.items() if d.endswith(".html")}
    assert len(pages) == 33
    for doc_id, chunks in pages.items():
        text = "\n".join(c.content for c in chunks)
        for chrome in (
            "Магазин футболок",
            "Еженедельные новости",
            "Платиновые спонсоры",
            "Найти пакеты для Vue",
        ):
            assert chrome not in text, (doc_id, chrome)
        assert chunks[-1].heading_path and chunks[-1].heading_path[0] != "Vue.js", doc_id


def test_same_asvs_requirement_from_md_and_docx(chunked):
    needle = "применяет правила контроля доступа на уровне доверенного сервиса"
    found = {}
    for doc_id in (
        "owasp-asvs-4.0.3-ru/md/0x12-V4-Access-Control.md",
        "owasp-asvs-4.0.3-ru/docx/OWASP_ASVS_4.0.3-ru.docx",
    ):
        hits = [c for c in chunked[doc_id] if needle in " ".join(c.content.split())]
        assert len(hits) == 1, doc_id
        assert "4.1.1" in hits[0].content
        found[doc_id.split("/")[1]] = hits[0]
    assert {c.heading_path for c in found.values()} == {("V4 Контроль доступа", "V4.1 Базовые принципы")}
    assert found["docx"].page is not None
    assert found["md"].kind == found["docx"].kind == "table"


def test_chunks_respect_limits(chunked):
    for doc_id, chunks in chunked.items():
        for c in chunks:
            limit = 4000 if c.kind in ("table", "code", "mixed") else 800
            assert len(c.content) <= limit, (doc_id, c.chunk_no, c.kind, len(c.content))
