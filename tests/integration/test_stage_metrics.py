"""Ingestion records where its time goes (``rag_ingest_stage_seconds``): every stage of a document,
by the layer of the rows it made, on both store paths; the symbol records' own chunk and embed time
under their layer, the deferred rows' embedding when the fill embeds them."""

from __future__ import annotations

import hashlib

import pytest

from ragline.ingest.pipeline import ingest_batch
from ragline.ingest.reembed import run_fill
from ragline.ingest.roots import grant_roots
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import IngestRequest
from tests.loopback import loopback_voyage

CODE = '''"""Queues."""


def drain_NAME(queue):
    """Empty the queue."""
    out = list(queue)
    queue.clear()
    return out


class Buffer:
    def push(self, item):
        self.items.append(item)
'''


def sums() -> dict[tuple[str, str], float]:
    from bench.ingest_stages import stage_sums

    return stage_sums()


def grew(after: dict, before: dict) -> set[tuple[str, str]]:
    return {k for k, v in after.items() if v > before.get(k, 0.0)}


@pytest.mark.parametrize("defer", ["none", "code"])
def test_every_stage_is_timed_by_the_layer_of_its_rows(use_settings, tenant, tmp_path, defer):
    (tmp_path / "pkg").mkdir()
    # names of this test's own: no text of it is in the embedding cache already
    own = hashlib.sha1(tenant.encode()).hexdigest()[:8]
    (tmp_path / "pkg" / f"queue_{defer}.py").write_text(CODE.replace("NAME", own), encoding="utf-8")
    (tmp_path / "notes.md").write_text(f"# Заметки\n\nОчередь опустошается функцией drain. {tenant}\n")
    grant_roots(tenant, [tmp_path])
    reqs = [
        IngestRequest(
            tenant=tenant,
            doc_id=f"src/{p.relative_to(tmp_path)}",
            uri=str(p),
            path=f"src/{p.relative_to(tmp_path)}",
            acl=["g"],
            version=1,
            metadata={"source": "src", "source_root": str(tmp_path)},
        )
        for p in (tmp_path / "pkg" / f"queue_{defer}.py", tmp_path / "notes.md")
    ]
    # a budget that embeds the symbol records, so their embed time is there to be split by layer
    with loopback_voyage(use_settings, ingest_defer_vectors=defer, ingest_lexical_only_layers="[]"):
        code = get_settings().code
        source, symbols = code.source_layer, code.symbols_layer
        before = sums()
        assert [r.status for r in ingest_batch(reqs)] == ["stored", "stored"]
        at_store = grew(sums(), before)
        while run_fill()["more"]:
            pass
        after_fill = grew(sums(), before)
    for stage in ("load", "parse", "chunk", "contextualize", "store"):
        assert {(stage, source), (stage, "docs")} <= at_store, stage
    assert {("chunk", symbols), ("contextualize", symbols), ("store", symbols)} <= at_store
    assert ("parse", symbols) not in at_store  # the source file is parsed once, as source
    embedded_at_store = {("embed", "docs")} | (
        {("embed", source), ("embed", symbols)} if defer == "none" else set()
    )
    assert embedded_at_store <= at_store
    if defer == "code":  # the code's vectors come from the fill, and are timed there
        assert not {("embed", source), ("embed", symbols)} & at_store
        assert {("embed", source), ("embed", symbols)} <= after_fill
