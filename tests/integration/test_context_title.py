"""An inline document that brings no title is embedded without its doc id as context."""

from __future__ import annotations

from ragline.ingest.pipeline import ingest_document
from ragline.shared.sdk.contracts import IngestRequest
from tests.integration.test_ingest import chunk_rows, doc
from tests.loopback import LoopbackServer


def test_inline_document_without_title_gets_no_doc_id_context(use_settings, tenant):
    with LoopbackServer() as srv:
        use_settings(
            embed_provider="voyage",
            providers_voyage_base_url=srv.url + "/v1",
            providers_voyage_api_key="test-key",
        )
        plain = IngestRequest(
            tenant=tenant, doc_id="Super_Bowl_50_p0", content="Защита уступила всего 308 очков.", fmt="text"
        )
        titled = doc(tenant, "guide-7", "# Руководство\n\nУстановка занимает пять минут.")
        assert ingest_document(plain).status == "stored"
        assert ingest_document(titled).status == "stored"
    rows = {r["doc_id"]: r for r in chunk_rows(tenant)}
    assert rows["Super_Bowl_50_p0"]["context"] == ""  # was the doc id
    assert rows["guide-7"]["context"] == "Руководство"  # a real title stays
