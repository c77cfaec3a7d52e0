"""Tenancy and ACL on the embedded stack: filters in SQL for every retrieval path, the fast ACL
sync (last writer wins, no embedding), revocation, re-ingest keeping synced permissions."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ragline.ingest.acl_sync import apply_acl_sync
from ragline.shared.sdk.contracts import AclSyncItem, AskRequest, SearchRequest
from ragline.shared.sdk.names import TASK_ACL_SYNC
from tests.integration.lifecycle_helpers import acl_of, bulk_documents, put_document
from tests.loopback import LoopbackServer, hashed_embedding, loopback_voyage

GROUPS = ["eng", "hr", "sales", "all", "Eng"]
WORDS = ["очередь", "отчёт", "бюджет", "сервер", "отпуск", "договор", "релиз", "пароль", "индекс", "клиент"]
TENANTS = ("acl-prop-a", "acl-prop-b")


def _search(tenant, groups, query, mode="hybrid", k=20):
    from ragline.query.service import search

    qv = hashed_embedding(query, 384) if mode != "lexical" else None
    return search(
        SearchRequest(query=query, tenant=tenant, groups=groups, k=k, mode=mode, query_vector=qv)
    ).hits


@pytest.fixture(scope="module")
def corpus(stack):
    """Two tenants with the same doc ids and overlapping group names; random ACLs (fixed seed)."""
    rnd = random.Random(20261129)
    truth: dict[tuple[str, str], dict] = {}
    for tenant in TENANTS:
        for i in range(12):
            acl = sorted(set(rnd.sample(GROUPS, rnd.randint(0, 3))))
            paragraphs = [f"{tenant} " + " ".join(rnd.choices(WORDS, k=8)) for _ in range(2)]
            put_document(tenant, f"doc-{i}", paragraphs, acl)
            truth[(tenant, f"doc-{i}")] = {"acl": set(acl), "chunks": paragraphs}
    return truth


@pytest.fixture()
def loop_embedder(use_settings):
    """The voyage embedder at the loopback server, so ask() embeds its query (vector path) quickly."""
    with loopback_voyage(use_settings, embed_model="hashed-trigram") as srv:
        yield srv


def _visible(truth, tenant, groups):
    return {d for (t, d), v in truth.items() if t == tenant and v["acl"] & set(groups)}


def _check_hits(truth, tenant, groups, hits):
    visible = _visible(truth, tenant, groups)
    for h in hits:
        assert h.doc_id in visible, (tenant, groups, h.doc_id)
        # same doc ids exist in the other tenant: the content proves which tenant's chunk this is
        assert h.content == truth[(tenant, h.doc_id)]["chunks"][h.chunk_no]


def test_two_tenants_with_overlapping_groups_see_only_their_own(corpus):
    for tenant in TENANTS:
        hits = _search(tenant, ["eng", "hr", "sales", "all", "Eng"], f"{tenant} очередь отчёт", k=50)
        assert hits, "every tenant has visible documents"
        _check_hits(corpus, tenant, GROUPS, hits)
        assert {h.content.split()[0] for h in hits} == {tenant}


def test_group_names_are_case_sensitive_and_exact(corpus):
    only_upper = _visible(corpus, TENANTS[0], ["Eng"])
    hits = _search(TENANTS[0], ["Eng"], "очередь сервер отпуск", k=50)
    assert {h.doc_id for h in hits} <= only_upper


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(
    tenant=st.sampled_from(TENANTS),
    groups=st.lists(st.sampled_from(GROUPS + ["nobody"]), min_size=1, max_size=3),
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    mode=st.sampled_from(["hybrid", "vector", "lexical"]),
)
def test_property_no_search_or_ask_leaks(corpus, loop_embedder, tenant, groups, words, mode):
    query = " ".join(words)
    hits = _search(tenant, groups, query, mode=mode)
    _check_hits(corpus, tenant, groups, hits)
    if mode == "vector":  # vector search returns everything visible up to k: nothing missing either
        assert len(hits) == min(20, 2 * len(_visible(corpus, tenant, groups)))
    # exact lookup by doc id / path: ids of both tenants exist, only visible ones of the caller come back
    from ragline.query.service import ask, search

    asked = [f"doc-{i}" for i in range(12)]
    exact = search(SearchRequest(tenant=tenant, groups=groups, mode="exact", doc_ids=asked, k=200)).hits
    _check_hits(corpus, tenant, groups, exact)
    assert {h.doc_id for h in exact} == _visible(corpus, tenant, groups)
    by_path = search(SearchRequest(tenant=tenant, groups=groups, mode="exact", paths=asked[:6], k=200)).hits
    _check_hits(corpus, tenant, groups, by_path)

    resp = ask(AskRequest(query=query, tenant=tenant, groups=groups, mode=mode))  # query embedded by loopback
    visible = _visible(corpus, tenant, groups)
    assert {c.doc_id for c in resp.citations} <= visible
    assert {r["doc_id"] for r in resp.trace.get("retrieved", [])} <= visible
    assert not resp.degraded or mode == "lexical"  # the vector path really ran


def test_rerank_input_holds_only_visible_chunks(corpus, use_settings):
    """What the reranker receives is checked on the (loopback Voyage) server side."""
    from ragline.query.service import ask, search

    with LoopbackServer() as srv:
        use_settings(
            rerank_provider="voyage",
            providers_voyage_base_url=srv.url + "/v1",
            providers_voyage_api_key="test-key",
            rerank_timeout_s=5,
        )
        seen = 0
        for tenant, groups in (
            (TENANTS[0], ["hr"]),
            (TENANTS[1], ["eng", "Eng"]),
            (TENANTS[0], ["sales", "all"]),
        ):
            allowed = {c for d in _visible(corpus, tenant, groups) for c in corpus[(tenant, d)]["chunks"]}
            srv.reset_stats()
            search(SearchRequest(query="бюджет отчёт", tenant=tenant, groups=groups, mode="lexical"))
            ask(AskRequest(query="сервер релиз", tenant=tenant, groups=groups, mode="lexical"))
            docs = [d for b in srv.stats.bodies if "documents" in b for d in b["documents"]]
            seen += len(docs)
            assert all(any(c in d for c in allowed) for d in docs), (tenant, groups)
        assert seen > 0, "the reranker was called with candidates"


def test_empty_or_blank_groups_return_nothing(corpus):
    from ragline.query.service import ask, search

    for mode in ("hybrid", "vector", "lexical"):
        req = SearchRequest(
            query="очередь",
            tenant=TENANTS[0],
            groups=[],
            mode=mode,
            query_vector=hashed_embedding("очередь", 384),
        )
        assert search(req).hits == []
    assert ask(AskRequest(query="очередь", tenant=TENANTS[0], groups=[], mode="lexical")).citations == []
    assert search(SearchRequest(tenant=TENANTS[0], groups=[], mode="exact", doc_ids=["doc-1"])).hits == []
    for bad in ([""], ["  "], [None], "eng", [1]):
        with pytest.raises(ValidationError):
            SearchRequest(query="очередь", tenant=TENANTS[0], groups=bad)


def test_documents_without_acl_are_invisible(stack, tenant):
    put_document(tenant, "private", ["секретный бюджет отдела"], acl=[])
    assert _search(tenant, ["eng"], "секретный бюджет", mode="lexical") == []
    assert _search(tenant, ["eng"], "секретный бюджет", mode="vector") == []


def test_revoked_group_no_longer_finds_the_document(conn, tenant):
    put_document(tenant, "plan", ["план релиза на осень", "бюджет релиза"], acl=["eng", "sales"])
    assert {h.doc_id for h in _search(tenant, ["sales"], "план релиза")} == {"plan"}
    out = apply_acl_sync(
        conn, [AclSyncItem(tenant=tenant, doc_id="plan", acl=["eng"], version=2, ts=time.time())]
    )
    assert (out.documents_updated, out.chunks_updated, out.ignored_stale) == (1, 2, 0)
    assert out.lags_s and out.lags_s[0] >= 0
    for mode in ("hybrid", "vector", "lexical"):
        assert _search(tenant, ["sales"], "план релиза", mode=mode) == []
    assert {h.doc_id for h in _search(tenant, ["eng"], "план релиза")} == {"plan"}
    assert acl_of(conn, tenant, "plan") == (["eng"], {("eng",)})


def test_out_of_order_older_sync_is_ignored_and_replay_is_idempotent(conn, tenant):
    put_document(tenant, "d", ["текст"], acl=["a"])
    new = AclSyncItem(tenant=tenant, doc_id="d", acl=["x"], version=5)
    old = AclSyncItem(tenant=tenant, doc_id="d", acl=["y"], version=3)
    assert apply_acl_sync(conn, [new]).documents_updated == 1
    again = apply_acl_sync(conn, [new])
    assert (again.documents_updated, again.ignored_stale) == (0, 1)
    late = apply_acl_sync(conn, [old])
    assert (late.documents_updated, late.ignored_stale) == (0, 1)
    assert acl_of(conn, tenant, "d") == (["x"], {("x",)})
    # within one batch the newest version wins whatever the order
    batch = apply_acl_sync(
        conn,
        [
            AclSyncItem(tenant=tenant, doc_id="d", acl=["z9"], version=9),
            AclSyncItem(tenant=tenant, doc_id="d", acl=["z7"], version=7),
        ],
    )
    assert batch.documents_updated == 1 and acl_of(conn, tenant, "d") == (["z9"], {("z9",)})


def test_reingest_keeps_the_permissions_of_the_latest_sync(conn, tenant):
    put_document(tenant, "d", ["старый текст"], acl=["source-group"], version=1)
    apply_acl_sync(conn, [AclSyncItem(tenant=tenant, doc_id="d", acl=["synced"], version=10)])
    assert (
        put_document(tenant, "d", ["новый текст", "ещё абзац"], acl=["source-group"], version=2) == "stored"
    )
    assert acl_of(conn, tenant, "d") == (["synced"], {("synced",)})


def test_sync_before_the_document_exists_is_kept_by_the_first_ingest(conn, tenant):
    out = apply_acl_sync(conn, [AclSyncItem(tenant=tenant, doc_id="later", acl=["early"], version=3)])
    assert out.documents_updated == 1
    put_document(tenant, "later", ["пришёл позже"], acl=["source"], version=1)
    assert acl_of(conn, tenant, "later") == (["early"], {("early",)})
    assert {h.doc_id for h in _search(tenant, ["early"], "пришёл позже")} == {"later"}


def test_path_prefix_sync_with_like_metacharacters(conn, tenant):
    put_document(tenant, "a", ["один"], acl=["old"], path="hr/2026/a.md")
    put_document(tenant, "b", ["два"], acl=["old"], path="hr/2026/b.md")
    put_document(tenant, "c", ["три"], acl=["old"], path="hr_x/c.md")  # '_' must not match as a wildcard
    out = apply_acl_sync(conn, [AclSyncItem(tenant=tenant, path_prefix="hr/", acl=["hr"], version=4)])
    assert out.documents_updated == 2
    assert acl_of(conn, tenant, "a")[0] == ["hr"] and acl_of(conn, tenant, "b")[0] == ["hr"]
    assert acl_of(conn, tenant, "c")[0] == ["old"]
    stale = apply_acl_sync(conn, [AclSyncItem(tenant=tenant, path_prefix="hr", acl=["x"], version=2)])
    # 'hr' matches all three paths: a and b hold the newer version 4, c has never been synced
    assert (stale.documents_updated, stale.ignored_stale) == (1, 2)
    assert acl_of(conn, tenant, "a")[0] == ["hr"] and acl_of(conn, tenant, "c")[0] == ["x"]
    # one batch with a doc item and a prefix item for the same document: the newer wins, counted once
    both = apply_acl_sync(
        conn,
        [
            AclSyncItem(tenant=tenant, doc_id="a", acl=["doc"], version=6),
            AclSyncItem(tenant=tenant, path_prefix="hr/2026/", acl=["pre"], version=7),
        ],
    )
    assert both.documents_updated == 2 and acl_of(conn, tenant, "a") == (["pre"], {("pre",)})


def test_acl_sync_task_through_the_acl_queue(celery_worker, conn, tenant):
    from prometheus_client import REGISTRY

    from ragline.shared.worker.celery_app import app

    def lag_count():
        return REGISTRY.get_sample_value("rag_acl_sync_lag_seconds_count") or 0.0

    put_document(tenant, "d", ["текст"], acl=["a"])
    before = lag_count()
    res = app.send_task(
        TASK_ACL_SYNC, args=[{"tenant": tenant, "doc_id": "d", "acl": ["b"], "version": 2, "ts": time.time()}]
    )
    out = res.get(timeout=30)
    assert out["documents_updated"] == 1 and out["chunks_updated"] == 1 and out["lag_s_max"] >= 0
    assert lag_count() == before + 1  # ACL_SYNC_LAG_S observed once for the applied change
    job = conn.execute("SELECT kind, state, result FROM jobs WHERE id = %s", (out["job_id"],)).fetchone()
    assert (
        job["kind"] == "acl_sync" and job["state"] == "succeeded" and job["result"]["documents_updated"] == 1
    )
    bad = app.send_task(TASK_ACL_SYNC, args=[{"tenant": tenant, "doc_id": "d", "acl": [""], "version": 3}])
    assert bad.get(timeout=30)["ok"] is False
    assert acl_of(conn, tenant, "d")[0] == ["b"]


@pytest.mark.slow
def test_sync_10k_documents_sends_nothing_to_the_embedder(
    celery_worker, conn, tenant, use_settings, tmp_path
):
    """10,000 permission changes through the CLI and the acl queue with the voyage embedder configured."""
    import json

    from typer.testing import CliRunner

    from ragline.cli import app as cli

    bulk_documents(conn, tenant, 10_000, ["before"])
    with loopback_voyage(use_settings, lifecycle_acl_sync_batch_size=2000) as srv:
        f = tmp_path / "acl.jsonl"
        f.write_text(
            "\n".join(
                json.dumps(
                    {"tenant": tenant, "doc_id": f"d{i:05d}", "acl": ["after", f"g{i % 7}"], "version": 7}
                )
                for i in range(10_000)
            )
        )
        t0 = time.perf_counter()
        run = CliRunner().invoke(cli, ["acl", "sync", str(f), "--json"])
        elapsed = time.perf_counter() - t0
        assert run.exit_code == 0, run.output
        out = json.loads(run.stdout.strip().splitlines()[-1])
        assert srv.stats.requests == 0, srv.stats.by_path
    print(
        f"\nacl sync of 10,000 documents: {elapsed:.2f} s (CLI -> acl queue -> SQL), lag max {out['lag_s_max']} s"
    )
    assert out["items"] == 10_000 and out["documents_updated"] == 10_000 and out["chunks_updated"] == 10_000
    assert out["batches"] == 5 and out["lag_s_max"] is not None
    left = conn.execute(
        "SELECT count(*) AS n FROM chunks WHERE tenant = %s AND NOT acl @> '{after}'", (tenant,)
    ).fetchone()
    assert left["n"] == 0


def test_sync_racing_an_ingest_in_flight_reaches_every_new_chunk(conn, tenant):
    """An ingest holds the document row (uncommitted, more chunks than before) while a sync arrives:
    the sync waits, then its chunk statement sees the chunks that ingest committed."""
    import threading

    import numpy as np

    from ragline.ingest import store
    from ragline.shared.worker import db

    put_document(tenant, "race", ["один"], acl=["old"], version=1)
    results: list = []
    with db.connection() as ingest_conn:
        with ingest_conn.transaction():
            store.lock_document(ingest_conn, tenant, "race")
            rec = store.DocumentRecord(
                tenant=tenant,
                doc_id="race",
                source_uri=None,
                path="race",
                title="race",
                content_hash="v2",
                version=2,
                acl=["source"],
            )
            chunks = [
                store.StoredChunk(
                    i,
                    f"часть {i}",
                    "",
                    "race",
                    None,
                    np.asarray(hashed_embedding(f"часть {i}", 384), np.float32),
                )
                for i in range(3)
            ]
            assert store.upsert_document(ingest_conn, rec, chunks, "m") == "stored"

            def sync():
                with db.connection() as c:
                    results.append(
                        apply_acl_sync(c, [AclSyncItem(tenant=tenant, doc_id="race", acl=["new"], version=5)])
                    )

            t = threading.Thread(target=sync)
            t.start()
            time.sleep(0.5)
            assert t.is_alive() and not results  # blocked on the document row
        t.join(timeout=30)
    assert results and results[0].documents_updated == 1 and results[0].chunks_updated == 3
    conn.rollback()
    assert acl_of(conn, tenant, "race") == (["new"], {("new",)})
