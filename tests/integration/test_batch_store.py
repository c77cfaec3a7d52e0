"""A batch's documents are stored together (one transaction, a fixed number of statements), yet each
document's outcome is what it would be alone: the matrix below ingests every case once by itself, in
a tenant of its own, and once inside one batch with all the others, on both store paths (rows
embedded before they are stored, and rows stored before their vectors), and compares what each
document got and what is stored for it."""

from __future__ import annotations

import pytest

from ragline.ingest import exclusions, store
from ragline.ingest.pipeline import ingest_batch, rounds
from ragline.shared.sdk.contracts import IngestRequest
from ragline.shared.worker import db
from tests.loopback import loopback_voyage


def req(tenant: str, doc_id: str, text: str, version: int = 1, acl=("staff",), **kw) -> IngestRequest:
    return IngestRequest(
        tenant=tenant, doc_id=doc_id, content=text, fmt="md", version=version, acl=list(acl), **kw
    )


def body(word: str, nonce: str) -> str:
    """A two-section text; ``nonce`` (the test's own) keeps it out of the embedding cache of other tests."""
    return (
        f"# {word}\n\nАбзац о {word} с подробностями {nonce}.\n\n"
        f"## Ещё\n\nВторой раздел о {word}, длиннее первого {nonce}.\n"
    )


#: case -> (what is stored before, the batch's requests for it, the outcome expected alone)
def cases(t: str, n: str) -> dict[str, tuple[list[IngestRequest], list[IngestRequest], list[tuple]]]:
    src = {"source": "mine"}
    return {
        "new": ([], [req(t, "new.md", body("новый", n))], [("stored", "updated")]),
        "bad": (
            [req(t, "bad.md", body("хороший", n))],
            [req(t, "bad.md", body("плохой", n), version=2, metadata={"note": "x\u0000y"})],
            [("failed", None)],
        ),
        "stale": (
            [req(t, "stale.md", body("новейший", n), version=5)],
            [req(t, "stale.md", body("старый", n), version=3)],
            [("stale", None)],
        ),
        "duplicate": (
            [],
            [req(t, "dup.md", body("первый", n)), req(t, "dup.md", body("второй", n), version=2)],
            [("stored", "updated"), ("stored", None)],
        ),
        "same twice": (
            [],
            [req(t, "twice.md", body("дважды", n)), req(t, "twice.md", body("дважды", n))],
            [("stored", "updated"), ("stored", None)],
        ),
        "acl change": (
            [req(t, "acl.md", body("права", n), acl=("a",))],
            [req(t, "acl.md", body("права изменены", n), version=2, acl=("b",))],
            [("stored", "updated")],
        ),
        "unchanged": (
            [req(t, "same.md", body("тот же", n))],
            [req(t, "same.md", body("тот же", n))],
            [("skipped_unchanged", None)],
        ),
        "other source": (
            [req(t, "owned.md", body("чужой", n), metadata={"source": "theirs"})],
            [req(t, "owned.md", body("мой", n), version=2, metadata=src)],
            [("failed", None)],
        ),
        "excluded": ([], [req(t, "kept-out.md", body("исключён", n))], [("excluded", None)]),
    }


def prepare_tenant(tenant: str, names: list[str], nonce: str) -> list[IngestRequest]:
    """Store each named case's prior versions, exclude what it excludes; the batch's requests."""
    batch = []
    for name in names:
        before, requests, _ = cases(tenant, nonce)[name]
        if before:
            assert {r.status for r in ingest_batch(before)} == {"stored"}
        if name == "excluded":
            with db.connection() as c:
                exclusions.exclude(c, tenant, [requests[0].doc_id])
        batch += requests
    return batch


def stored(tenant: str) -> dict:
    """Everything stored for the tenant, keyed by doc id, tenant-free: comparable across tenants."""
    with db.connection() as c:
        docs = c.execute(
            "SELECT doc_id, version, status, acl, ingest_acl, content_hash, chunk_count, layer, title"
            " FROM documents WHERE tenant = %s",
            (tenant,),
        ).fetchall()
        chunks = c.execute(
            "SELECT doc_id, chunk_no, content, acl, embedding IS NOT NULL AS has_vector, embed_model"
            " FROM chunks WHERE tenant = %s ORDER BY doc_id, chunk_no",
            (tenant,),
        ).fetchall()
        errors = c.execute(
            "SELECT doc_id, stage FROM document_errors WHERE tenant = %s AND NOT resolved ORDER BY doc_id, stage",
            (tenant,),
        ).fetchall()
    out: dict = {d["doc_id"]: {"doc": dict(d), "chunks": [], "errors": []} for d in docs}
    for ch in chunks:
        out[ch["doc_id"]]["chunks"].append({k: ch[k] for k in ch if k != "doc_id"})
    for e in errors:
        out.setdefault(e["doc_id"], {"doc": None, "chunks": [], "errors": []})["errors"].append(e["stage"])
    return out


def outcome(result) -> tuple:
    return (result.status, result.acl_outcome)


@pytest.mark.parametrize("defer", ["none", "all"], ids=["embedded-then-stored", "stored-before-vectors"])
def test_each_document_of_a_batch_gets_what_it_would_get_alone(use_settings, tenant, monkeypatch, defer):
    with loopback_voyage(use_settings, embed_backoff_base_s=0.01, ingest_defer_vectors=defer):
        names = list(cases(tenant, tenant))
        alone: dict[str, tuple[list[tuple], dict]] = {}
        for i, name in enumerate(names):
            t = f"{tenant}-{i}"
            results = ingest_batch(prepare_tenant(t, [name], tenant))
            alone[name] = ([outcome(r) for r in results], stored(t))

        sizes: list[int] = []
        upsert = store.upsert_documents

        def spy(conn, items, *a, **kw):
            sizes.append(len(items))
            return upsert(conn, items, *a, **kw)

        monkeypatch.setattr(store, "upsert_documents", spy)
        batch = prepare_tenant(tenant, names, tenant)
        results = ingest_batch(batch)
        together = stored(tenant)

    assert max(sizes) > 2  # the documents were written together, not one transaction each
    by_name: dict[str, list[tuple]] = {}
    for r, name in zip(results, [n for n in names for _ in cases(tenant, tenant)[n][1]], strict=True):
        by_name.setdefault(name, []).append(outcome(r))
    for name in names:
        doc_ids = {r.doc_id for r in cases(tenant, tenant)[name][1]}
        expected = cases(tenant, tenant)[name][2]
        assert [o[0] for o in alone[name][0]] == [o[0] for o in expected], name
        assert by_name[name] == alone[name][0], name
        assert {d: together.get(d) for d in doc_ids} == {d: alone[name][1].get(d) for d in doc_ids}, name

    # and what "alone" is: the rules each case stands for
    assert together["bad.md"]["doc"]["version"] == 1 and together["bad.md"]["errors"] == ["store"]
    assert together["stale.md"]["doc"]["version"] == 5
    assert "новейший" in together["stale.md"]["chunks"][0]["content"]
    assert together["dup.md"]["doc"]["version"] == 2
    assert all("второй" in c["content"] or "Ещё" in c["content"] for c in together["dup.md"]["chunks"])
    assert [c["chunk_no"] for c in together["twice.md"]["chunks"]] == list(
        range(together["twice.md"]["doc"]["chunk_count"])
    )
    assert together["acl.md"]["doc"]["acl"] == ["b"]
    assert {tuple(c["acl"]) for c in together["acl.md"]["chunks"]} == {("b",)}
    assert together["owned.md"]["errors"] == ["identity"] and together["owned.md"]["doc"]["version"] == 1
    assert "kept-out.md" not in together
    vectors = {c["has_vector"] for c in together["new.md"]["chunks"]}
    assert vectors == ({True} if defer == "none" else {False})


def test_rounds_put_each_request_of_a_document_in_its_own_transaction():
    a, b, c = ("t", "a"), ("t", "b"), ("t", "c")
    assert rounds([a, b, a, c, a, b]) == [[0, 1, 3], [2, 5], [4]]
    assert rounds([a, b, c]) == [[0, 1, 2]]
    assert rounds([]) == []
