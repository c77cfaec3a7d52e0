"""Permissions on one clock (issue 15, items 1 and 2; issue 17, item 3).

* A re-ingest asking for other groups changes the permissions of an unchanged document through the
  ACL-only path, for every entry point (pipeline, ``ragline ingest``, upsert events, reindex).
* Every permission change is ordered by the server's sequence; a producer's version only drops its
  own replays, so an operator's ``acl set`` no longer makes later event revocations stale.
* The operator's commands report unknown documents, prefixes and tenants instead of succeeding.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragline.ingest.acl_sync import apply_acl_sync, clock
from ragline.ingest.events import handle_event
from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.contracts import AclSyncItem, IngestEvent, IngestRequest, SearchRequest
from ragline.shared.worker import jobs
from tests.integration.lifecycle_helpers import acl_of, put_document, wait_job
from tests.loopback import loopback_voyage

TEXT = "# Политика\n\nПравила отпусков для сотрудников отдела кадров.\n\n## Детали\n\nЗаявление подают заранее.\n"


@pytest.fixture()
def voyage(use_settings):
    with loopback_voyage(use_settings, embed_model="voyage-acl-clock") as srv:
        yield srv


def _req(tenant: str, doc_id: str, acl: list[str], **kw) -> IngestRequest:
    return IngestRequest(tenant=tenant, doc_id=doc_id, content=TEXT, fmt="md", acl=acl, version=1, **kw)


def _visible(tenant: str, groups: list[str]) -> set[str]:
    from ragline.query.service import search

    hits = search(SearchRequest(query="правила отпусков", tenant=tenant, groups=groups, mode="lexical")).hits
    return {h.doc_id for h in hits}


def _cli(*args: str):
    from ragline.cli import app as cli

    return CliRunner().invoke(cli, list(args))


def _last_json(run) -> dict:
    return json.loads(run.stdout.strip().splitlines()[-1])


def _stale_count(path: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("rag_acl_changes_total", {"path": path, "outcome": "stale"}) or 0.0


# --- 15.1: narrowing permissions through a re-ingest ------------------------------------------------


def test_reingest_of_an_unchanged_document_applies_a_narrower_acl(voyage, conn, tenant):
    from ragline.ingest.pipeline import ingest_document

    assert ingest_document(_req(tenant, "policy.md", ["all"])).status == "stored"
    requests = voyage.stats.requests
    again = ingest_document(_req(tenant, "policy.md", ["hr"]))
    assert acl_of(conn, tenant, "policy.md") == (["hr"], {("hr",)})
    assert (again.status, again.acl_outcome, again.embedded) == ("skipped_unchanged", "updated", 0)
    assert voyage.stats.requests == requests  # the ACL-only path: nothing sent to the embedder
    assert _visible(tenant, ["all"]) == set() and _visible(tenant, ["hr"]) == {"policy.md"}
    # the same request again changes nothing and reports nothing
    assert ingest_document(_req(tenant, "policy.md", ["hr"])).acl_outcome is None


def test_reingest_with_the_same_acl_keeps_a_later_sync_and_a_new_acl_replaces_it(voyage, conn, tenant):
    """The rule between an ingest's ACL and `acl sync`: the ingest's ACL is a permission change only
    when it differs from what the last ingest asked for, and the newer change wins."""
    from ragline.ingest.pipeline import ingest_document

    ingest_document(_req(tenant, "d.md", ["staff"]))
    apply_acl_sync(conn, [AclSyncItem(tenant=tenant, doc_id="d.md", acl=["auditors"], version=1)])
    conn.commit()
    kept = ingest_document(_req(tenant, "d.md", ["staff"]))  # a re-run of the same ingest
    assert kept.acl_outcome is None and acl_of(conn, tenant, "d.md")[0] == ["auditors"]
    changed = ingest_document(_req(tenant, "d.md", ["hr"]))  # the ingest now asks for other groups
    assert changed.acl_outcome == "updated" and acl_of(conn, tenant, "d.md") == (["hr"], {("hr",)})
    # and a later sync wins again, whatever its producer's version
    apply_acl_sync(conn, [AclSyncItem(tenant=tenant, doc_id="d.md", acl=["x"], version=2)])
    conn.commit()
    assert acl_of(conn, tenant, "d.md")[0] == ["x"]


def test_an_ingest_accepted_before_a_revocation_cannot_undo_it(voyage, conn, tenant):
    """The ingest's clock is when ragline accepted it (its job's creation): a revocation applied while
    it waited in the queue stands, for a document whose content changed and for an unchanged one."""
    from ragline.ingest.pipeline import ingest_batch

    ingest_batch([_req(tenant, "a.md", ["staff"]), _req(tenant, "b.md", ["staff"])])
    job_id = jobs.create_job(conn, "ingest", tenant, ["a.md", "b.md"])
    conn.commit()
    apply_acl_sync(
        conn, [AclSyncItem(tenant=tenant, doc_id=d, acl=[], ts=time.time()) for d in ("a.md", "b.md")]
    )
    conn.commit()
    before = _stale_count("ingest")
    unchanged = _req(tenant, "a.md", ["everyone"], job_id=job_id)
    edited = IngestRequest(
        tenant=tenant,
        doc_id="b.md",
        content=TEXT + "\nНовый абзац.\n",
        fmt="md",
        acl=["everyone"],
        version=2,
        job_id=job_id,
    )
    results = ingest_batch([unchanged, edited])
    assert [(r.status, r.acl_outcome) for r in results] == [
        ("skipped_unchanged", "ignored_stale"),
        ("stored", "ignored_stale"),
    ]
    assert acl_of(conn, tenant, "a.md")[0] == [] and acl_of(conn, tenant, "b.md") == ([], {()})
    assert _stale_count("ingest") == before + 2
    # a later ingest (a new job: a newer clock) that asks for these groups again is a new change
    late = jobs.create_job(conn, "ingest", tenant, ["a.md"])
    conn.commit()
    assert ingest_batch([_req(tenant, "a.md", ["hr"], job_id=late)])[0].acl_outcome == "updated"


def test_cli_ingest_again_with_a_narrower_acl_counts_acl_updated(
    celery_worker, voyage, conn, tenant, tmp_path
):
    folder = tmp_path / "kb"
    folder.mkdir()
    for name in ("one.md", "two.md"):
        (folder / name).write_text(TEXT.replace("Политика", name), encoding="utf-8")
    first = _cli("ingest", str(folder), "--tenant", tenant, "--acl", "all", "--wait", "--json")
    assert first.exit_code == 0, first.output
    assert _last_json(first)["acl_updated"] == 0
    second = _cli("ingest", str(folder), "--tenant", tenant, "--acl", "hr", "--wait", "--json")
    assert second.exit_code == 0, second.output
    rows = conn.execute("SELECT DISTINCT acl FROM chunks WHERE tenant = %s", (tenant,)).fetchall()
    assert [r["acl"] for r in rows] == [["hr"]]
    out = _last_json(second)
    assert (out["skipped_unchanged"], out["acl_updated"], out["embedded"]) == (2, 2, 0)


def test_upsert_event_with_a_new_acl_applies_it_at_once(voyage, conn, tenant, tmp_path):
    from ragline.ingest.pipeline import ingest_document

    f = tmp_path / "note.md"
    f.write_text(TEXT, encoding="utf-8")
    grant_roots(tenant, [tmp_path])  # the operator's grant: an event's path is read only below it
    sent: list[dict] = []

    def send(name, payload):
        sent.append(payload)
        return f"task-{len(sent)}"

    def upsert(version: int, acl: list[str] | None):
        ev = IngestEvent(type="upsert", tenant=tenant, doc_id="note", uri=str(f), version=version, acl=acl)
        out = handle_event(conn, ev, send)
        conn.commit()
        return out

    assert upsert(1, ["all"]).outcome == "enqueued"
    assert ingest_document(IngestRequest(**sent[-1])).status == "stored"
    narrowed = upsert(2, ["hr"])
    assert ingest_document(IngestRequest(**sent[-1])).status == "skipped_unchanged"
    assert acl_of(conn, tenant, "note") == (["hr"], {("hr",)})
    assert (narrowed.outcome, narrowed.acl_outcome) == ("enqueued", "applied")  # applied by the event
    # a replayed older upsert cannot widen it again; an upsert without 'acl' keeps it
    assert upsert(1, ["all"]).acl_outcome == "ignored_stale"
    assert upsert(3, None).acl_outcome is None
    ingest_document(IngestRequest(**sent[-1]))
    assert acl_of(conn, tenant, "note")[0] == ["hr"]


def test_reindex_applies_a_changed_source_acl_to_unchanged_documents(
    celery_worker, voyage, use_settings, conn, tenant, tmp_path
):
    from ragline.ingest.control.tasks import run_reindex

    root = tmp_path / "wiki"
    root.mkdir()
    for name in ("a.md", "b.md"):
        (root / name).write_text(TEXT.replace("Политика", name), encoding="utf-8")
    name = f"{tenant}-src"

    def configure(acl: list[str]) -> None:
        source = {
            "name": name,
            "kind": "folder",
            "tenant": tenant,
            "acl": acl,
            "path": str(root),
            "glob": "*.md",
        }
        use_settings(
            embed_provider="voyage",
            providers_voyage_base_url=voyage.url + "/v1",
            providers_voyage_api_key="test-key",
            embed_model="voyage-acl-clock",
            lifecycle_sources=json.dumps([source]),
        )

    def reindex() -> dict:
        out = run_reindex([name])
        if out["job_id"]:
            wait_job(out["job_id"])
        return out

    configure(["staff"])
    assert reindex()["new"] == 2
    configure(["hr"])
    requests = voyage.stats.requests
    out = reindex()
    assert acl_of(conn, tenant, f"{name}/a.md") == (["hr"], {("hr",)})
    assert (out["unchanged"], out["enqueued"], out["acl_updated"]) == (2, 0, 2)
    assert voyage.stats.requests == requests
    # a later sync of one document survives the next scheduled reindex with the same source acl
    apply_acl_sync(conn, [AclSyncItem(tenant=tenant, doc_id=f"{name}/b.md", acl=["board"], version=1)])
    conn.commit()
    assert reindex()["acl_updated"] == 0
    assert acl_of(conn, tenant, f"{name}/b.md")[0] == ["board"] and acl_of(conn, tenant, f"{name}/a.md")[
        0
    ] == ["hr"]


# --- 15.2: one clock ----------------------------------------------------------------------------------


def test_event_revocation_after_a_manual_acl_set_takes_effect(celery_worker, conn, tenant):
    """`acl set` versions by the time in microseconds, the events by the source's small integers:
    before one clock, every event after a manual set was ignored as stale."""
    put_document(tenant, "doc", ["правила отпусков"], acl=["all"])
    run = _cli("acl", "set", "doc", "--tenant", tenant, "--acl", "all,contractors", "--json")
    assert run.exit_code == 0, run.output
    assert _last_json(run)["documents_updated"] == 1
    revoke = handle_event(
        conn, IngestEvent(type="acl", tenant=tenant, doc_id="doc", version=3, acl=["all"]), None
    )
    conn.commit()
    assert revoke.outcome == "acl_applied"
    assert acl_of(conn, tenant, "doc") == (["all"], {("all",)})
    # the same producer's replay and its older change stay harmless, and are counted
    before = _stale_count("event")
    replay = handle_event(
        conn, IngestEvent(type="acl", tenant=tenant, doc_id="doc", version=3, acl=["all"]), None
    )
    older = handle_event(
        conn,
        IngestEvent(type="acl", tenant=tenant, doc_id="doc", version=2, acl=["all", "contractors"]),
        None,
    )
    conn.commit()
    assert (replay.outcome, older.outcome) == ("ignored_stale", "ignored_stale")
    assert _stale_count("event") == before + 2 and acl_of(conn, tenant, "doc")[0] == ["all"]
    # and the operator acts after the events: the operator's change wins (the server's order)
    assert _cli("acl", "set", "doc", "--tenant", tenant, "--acl", "hr").exit_code == 0
    assert acl_of(conn, tenant, "doc")[0] == ["hr"]


def test_producers_versions_never_meet(conn, tenant):
    """A producer with nanosecond versions and one with small integers: each orders only its own."""
    put_document(tenant, "d", ["текст"], acl=["a"])
    big = AclSyncItem(
        tenant=tenant, doc_id="d", acl=["from-ns"], version=time.time_ns(), producer="folder-watch"
    )
    small = AclSyncItem(tenant=tenant, doc_id="d", acl=["from-int"], version=7, producer="crm")
    assert apply_acl_sync(conn, [big]).documents_updated == 1
    assert apply_acl_sync(conn, [small]).documents_updated == 1
    assert acl_of(conn, tenant, "d")[0] == ["from-int"]
    stale = apply_acl_sync(
        conn, [AclSyncItem(tenant=tenant, doc_id="d", acl=["x"], version=6, producer="crm")]
    )
    assert (stale.documents_updated, stale.ignored_stale) == (0, 1)
    seqs = conn.execute(
        "SELECT acl_seq, acl_versions FROM documents WHERE tenant = %s AND doc_id = 'd'", (tenant,)
    ).fetchone()
    assert seqs["acl_versions"] == {"unsigned/folder-watch": big.version, "unsigned/crm": 7}
    assert seqs["acl_seq"] <= clock(conn)  # the document's change is on the server's clock
    # one batch, two producers changing one document: in batch order, the later one wins unless stale
    both = [
        AclSyncItem(
            tenant=tenant, doc_id="d", acl=["ns-2"], version=big.version + 1, producer="folder-watch"
        ),
        AclSyncItem(
            tenant=tenant, doc_id="d", acl=["int-5"], version=5, producer="crm"
        ),  # older than crm's 7
    ]
    # the chunks carry the document's final ACL, the later round's
    assert apply_acl_sync(conn, both).documents_updated == 1
    assert acl_of(conn, tenant, "d") == (["ns-2"], {("ns-2",)})
    both[1] = AclSyncItem(tenant=tenant, doc_id="d", acl=["int-8"], version=8, producer="crm")
    both[0] = AclSyncItem(
        tenant=tenant, doc_id="d", acl=["ns-3"], version=big.version + 3, producer="folder-watch"
    )
    assert apply_acl_sync(conn, both).documents_updated == 1
    assert acl_of(conn, tenant, "d") == (["int-8"], {("int-8",)})
    # the same for a document not ingested yet (a connector's pending row)
    early = apply_acl_sync(
        conn, [AclSyncItem(tenant=tenant, doc_id="new", acl=["e"], version=1, producer=p) for p in ("a", "b")]
    )
    assert (early.documents_updated, early.pending) == (1, 1) and acl_of(conn, tenant, "new")[0] == ["e"]


# --- 17.3: typos are reported ---------------------------------------------------------------------------


def test_acl_set_reports_unknown_documents_and_tenants(celery_worker, conn, tenant):
    put_document(tenant, "real", ["текст"], acl=["a"])
    wrong_id = _cli("acl", "set", "WRONG_ID", "--tenant", tenant, "--acl", "hr")
    assert wrong_id.exit_code == 1, wrong_id.output
    assert "not found" in wrong_id.output and "WRONG_ID" in wrong_id.output
    assert "0 documents updated" in wrong_id.output and "{" not in wrong_id.output  # no dict repr
    as_json = _cli("acl", "set", "WRONG_ID", "--tenant", tenant, "--acl", "hr", "--json")
    out = _last_json(as_json)
    assert as_json.exit_code == 1 and out["documents_updated"] == 0
    assert out["not_found"] == [{"tenant": tenant, "doc_id": "WRONG_ID", "reason": "no such document"}]
    typo = _cli("acl", "set", "real", "--tenant", tenant + "-typo", "--acl", "hr", "--json")
    out = _last_json(typo)
    assert (
        typo.exit_code == 1 and out["unknown_tenants"] == [tenant + "-typo"] and out["documents_updated"] == 0
    )
    n = conn.execute(
        "SELECT count(*) AS n FROM documents WHERE tenant = ANY(%s) AND doc_id <> 'real'",
        ([tenant, tenant + "-typo"],),
    ).fetchone()["n"]
    assert n == 0  # no pending rows were created by the typos
    ok = _cli("acl", "set", "real", "--tenant", tenant, "--acl", "hr")
    assert ok.exit_code == 0 and "1 document updated" in ok.output
    # a permission for a document that is not ingested yet, on purpose
    early = _cli("acl", "set", "coming.md", "--tenant", tenant, "--acl", "hr", "--pending", "--json")
    assert early.exit_code == 0 and _last_json(early)["pending"] == 1


def test_acl_sync_file_applies_what_exists_and_lists_the_rest(celery_worker, conn, tenant, tmp_path: Path):
    put_document(tenant, "a", ["один"], acl=["old"], path="hr/a.md")
    put_document(tenant, "b", ["два"], acl=["old"], path="hr/b.md")
    f = tmp_path / "changes.jsonl"
    f.write_text(
        "\n".join(
            json.dumps(x)
            for x in (
                {"tenant": tenant, "doc_id": "a", "acl": ["hr"]},
                {"tenant": tenant, "doc_id": "nope", "acl": ["hr"]},
                {"tenant": tenant, "path_prefix": "hr/", "acl": ["hr", "board"]},
                {"tenant": tenant, "path_prefix": "finance/", "acl": ["fin"]},
            )
        ),
        encoding="utf-8",
    )
    run = _cli("acl", "sync", str(f), "--json")
    assert run.exit_code == 1, run.output
    out = _last_json(run)
    assert (out["items"], out["documents_updated"], out["chunks_updated"]) == (4, 2, 2)
    assert sorted((x.get("doc_id") or x["path_prefix"]) for x in out["not_found"]) == ["finance/", "nope"]
    assert acl_of(conn, tenant, "a")[0] == ["board", "hr"] and acl_of(conn, tenant, "b")[0] == ["board", "hr"]
    readable = _cli("acl", "sync", str(f))
    assert readable.exit_code == 1 and "no document under 'finance/'" in readable.output
    assert "{" not in readable.output
