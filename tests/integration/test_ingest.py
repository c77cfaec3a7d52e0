"""Ingestion on the embedded stack with the Voyage embedder against the loopback server: cross-document
embedding batches, idempotent upserts, partial re-embedding, concurrent versions, bad input."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ragline.ingest.pipeline import ingest_batch, ingest_document
from ragline.ingest.roots import grant_roots
from ragline.shared.sdk import formats
from ragline.shared.sdk.contracts import IngestRequest
from ragline.shared.worker import db, jobs
from tests.loopback import LoopbackServer, loopback_voyage


@pytest.fixture()
def voyage(use_settings):
    with loopback_voyage(use_settings, embed_backoff_base_s=0.01) as srv:
        yield srv


def wait_job(job_id: str, timeout: float = 300) -> dict:
    summary = jobs.wait_for_job(job_id, timeout, poll_s=0.2)
    assert summary["state"] not in jobs.ACTIVE_STATES, f"job {job_id} still running: {summary}"
    return summary


def section(title: str, n: int, word: str = "пункт") -> str:
    body = " ".join(
        f"Предложение {i} раздела {title} описывает {word} номер {i} подробно и ясно." for i in range(n)
    )
    return f"## {title}\n\n{body}\n\n"


def doc(tenant: str, doc_id: str, text: str, version: int = 1, **kw) -> IngestRequest:
    return IngestRequest(
        tenant=tenant, doc_id=doc_id, content=text, fmt="md", version=version, acl=["staff"], **kw
    )


def chunk_rows(tenant: str, doc_id: str | None = None) -> list[dict]:
    with db.connection() as c:
        return c.execute(
            "SELECT doc_id, chunk_no, content, context, heading_path, page, content_hash, embedding::text AS emb,"
            " updated_at FROM chunks WHERE tenant = %s AND (%s::text IS NULL OR doc_id = %s) ORDER BY doc_id, chunk_no",
            (tenant, doc_id, doc_id),
        ).fetchall()


def test_chunks_of_many_documents_share_embedding_batches(voyage, tenant):
    reqs = [
        doc(tenant, f"d{i}.md", f"# Документ {i}\n\n" + section("А", 60) + section("Б", 60))
        for i in range(14)
    ]
    results = ingest_batch(reqs)
    assert [r.status for r in results] == ["stored"] * 14
    total = sum(r.chunks for r in results)
    assert total > 128 and all(r.chunks < 128 for r in results)
    sizes = [len(b["input"]) for b in voyage.stats.bodies]
    assert sizes[0] == 128 and sum(sizes) == total  # the first batch spans several documents
    assert sum(r.embedded for r in results) == total
    with db.connection() as c:
        n = c.execute(
            "SELECT count(*) AS n FROM chunks WHERE tenant = %s AND embedding IS NOT NULL", (tenant,)
        ).fetchone()["n"]
    assert n == total


def test_a_document_postgres_refuses_fails_alone_and_the_others_commit(voyage, tenant):
    """Stores share one connection but not a transaction: a value Postgres refuses (NUL in jsonb metadata)
    fails that document at the store stage; the documents before and after it are stored and committed,
    and the refused document's earlier good version keeps serving."""
    assert (
        ingest_document(doc(tenant, "b.md", "# Б\n\nПервая хорошая версия документа Б.\n")).status == "stored"
    )
    reqs = [
        doc(tenant, "a.md", "# А\n\nДокумент А о пакетах."),
        doc(
            tenant,
            "b.md",
            "# Б\n\nВторая версия с плохими метаданными.",
            version=2,
            metadata={"note": "x\u0000y"},
        ),
        doc(tenant, "c.md", "# В\n\nДокумент В о транзакциях."),
    ]
    # every text already in the embedding cache: the cache lookup alone must not leave a transaction
    # open, or the documents would become savepoints of one transaction
    warm = ingest_batch([r.model_copy(update={"tenant": f"{tenant}-warm", "metadata": {}}) for r in reqs])
    assert [r.status for r in warm] == ["stored"] * 3
    results = ingest_batch(reqs)
    assert [r.status for r in results] == ["stored", "failed", "stored"] and results[2].embedded == 0
    assert results[1].error.startswith("store: ")
    with db.connection() as c:
        docs = {
            r["doc_id"]: r
            for r in c.execute(
                "SELECT doc_id, version, status FROM documents WHERE tenant = %s", (tenant,)
            ).fetchall()
        }
        errors = c.execute(
            "SELECT stage FROM document_errors WHERE tenant = %s AND doc_id = 'b.md' AND NOT resolved",
            (tenant,),
        ).fetchall()
    assert (docs["a.md"]["status"], docs["c.md"]["status"]) == ("ready", "ready")
    assert (docs["b.md"]["version"], docs["b.md"]["status"]) == (1, "ready")
    assert [e["stage"] for e in errors] == ["store"]
    assert "Первая хорошая версия" in " ".join(r["content"] for r in chunk_rows(tenant, "b.md"))
    assert [r["doc_id"] for r in chunk_rows(tenant) if r["chunk_no"] == 0] == ["a.md", "b.md", "c.md"]


def test_unchanged_document_is_skipped_and_embeds_nothing(voyage, tenant):
    text = "# Документ\n\n" + section("А", 20)
    assert ingest_document(doc(tenant, "a.md", text)).status == "stored"
    before = chunk_rows(tenant)
    requests = voyage.stats.requests
    again = ingest_document(doc(tenant, "a.md", text, version=2))
    assert (again.status, again.embedded) == ("skipped_unchanged", 0)
    assert voyage.stats.requests == requests and chunk_rows(tenant) == before


def test_shrinking_document_deletes_its_tail_chunks(voyage, tenant):
    long = "# Документ\n\n" + section("А", 40) + section("Б", 40)
    r1 = ingest_document(doc(tenant, "a.md", long, version=1))
    r2 = ingest_document(doc(tenant, "a.md", "# Документ\n\n" + section("А", 5), version=2))
    assert r1.chunks > r2.chunks >= 1
    rows = chunk_rows(tenant)
    assert [r["chunk_no"] for r in rows] == list(range(r2.chunks))
    with db.connection() as c:
        d = c.execute("SELECT chunk_count, version FROM documents WHERE tenant = %s", (tenant,)).fetchone()
    assert (d["chunk_count"], d["version"]) == (r2.chunks, 2)


def test_editing_one_section_reembeds_only_its_chunks(voyage, tenant):
    sections = [section(t, 12) for t in ("А", "Б", "В")]
    ingest_document(doc(tenant, "a.md", "# Документ\n\n" + "".join(sections), version=1))
    before = {r["chunk_no"]: r for r in chunk_rows(tenant)}
    edited = sections[1].replace("Предложение 3 раздела Б", "Изменённое предложение 3 раздела Б")
    result = ingest_document(
        doc(tenant, "a.md", "# Документ\n\n" + sections[0] + edited + sections[2], version=2)
    )
    after = {r["chunk_no"]: r for r in chunk_rows(tenant)}
    changed = [n for n in after if after[n]["content"] != before[n]["content"]]
    assert len(changed) == 1 and result.embedded == 1
    assert "Б" in after[changed[0]]["heading_path"]
    unchanged = [n for n in after if n not in changed]
    assert all(after[n]["updated_at"] == before[n]["updated_at"] for n in unchanged)  # rows not rewritten


def test_concurrent_ingests_of_one_document_do_not_interleave_and_newest_wins(voyage, tenant):
    versions = {
        v: "# Документ\n\n" + "".join(section(f"Раздел {v}-{k}", 8, f"версия{v}") for k in range(v))
        for v in range(1, 7)
    }
    results: dict[int, str] = {}

    def run(v: int) -> None:
        results[v] = ingest_document(doc(tenant, "shared.md", versions[v], version=v)).status

    threads = [threading.Thread(target=run, args=(v,)) for v in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[6] == "stored" and set(results.values()) <= {"stored", "stale"}
    rows = chunk_rows(tenant)
    with db.connection() as c:
        d = c.execute("SELECT version, chunk_count FROM documents WHERE tenant = %s", (tenant,)).fetchone()
    assert d["version"] == 6 and d["chunk_count"] == len(rows)
    assert all("версия6" in r["content"] for r in rows)
    # an older version arriving late changes nothing
    assert ingest_document(doc(tenant, "shared.md", versions[2], version=2)).status == "stale"
    assert chunk_rows(tenant) == rows


def _make_encrypted_pdf(tmp: Path) -> Path:
    import io

    pypdf = pytest.importorskip("pypdf")
    from tests.unit.test_parse import SAMPLE_PDF, make_pdf

    reader = pypdf.PdfReader(io.BytesIO(make_pdf(SAMPLE_PDF)))
    writer = pypdf.PdfWriter()
    for page in reader.pages:
        writer.add_page(page)
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    out = tmp / "locked.pdf"
    with out.open("wb") as f:
        writer.write(f)
    return out


def test_bad_input_fails_alone_and_nothing_is_half_written(celery_worker, voyage, tenant, tmp_path):
    from ragline.ingest.enqueue import collect_files, default_source_name, enqueue_files

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("# Хороший\n\n" + section("А", 10), encoding="utf-8")
    (folder / "good2.html").write_text(
        "<html><body><main><h1>Страница</h1><p>" + "Текст страницы. " * 30 + "</p></main></body></html>",
        encoding="utf-8",
    )
    (folder / "empty.md").write_bytes(b"")
    (folder / "garbage.md").write_bytes(bytes(range(256)) * 64)
    (folder / "latin1.txt").write_bytes("Привет мир".encode("cp1251") + b"\xff" * 10)
    (folder / "corrupt.pdf").write_bytes(
        b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\nendobj\ntrailer <<>>\n%%EOF"
    )
    (folder / "huge.txt").write_bytes(b"word " * (20 * 1024 * 1024 // 5))
    (folder / "truncated.docx").write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    _make_encrypted_pdf(folder)
    odd = tmp_path / "notes.xyz"
    odd.write_text("unknown format", encoding="utf-8")
    files = collect_files([folder, odd])
    assert len(files) == 10
    grant_roots(tenant, [folder, odd])  # what `ragline ingest` does before it enqueues
    summary = wait_job(enqueue_files(files, tenant=tenant, acl=["staff"], batch_docs=4))
    assert summary["state"] == "completed_with_errors"
    assert (summary["documents"], summary["failed"]) == (10, 8)
    ids = {f"{default_source_name(f.parent)}/{f.name}": f.name for f in (*folder.iterdir(), odd)}
    errors = {ids[e["doc_id"]]: e["error"] for e in summary["errors"]}
    expected = {
        "empty.md": "empty document",
        "garbage.md": "binary content",
        "latin1.txt": "not valid UTF-8",
        "corrupt.pdf": "PDF",
        "huge.txt": "document too large",
        "truncated.docx": "corrupt DOCX",
        "locked.pdf": "encrypted PDF",
        "notes.xyz": "unsupported file type '.xyz'",
    }
    assert set(errors) == set(expected)
    for doc_id, fragment in expected.items():
        assert fragment in errors[doc_id], (doc_id, errors[doc_id])
    with db.connection() as c:
        docs = {
            ids[r["doc_id"]]: r
            for r in c.execute(
                "SELECT doc_id, status, chunk_count, (SELECT count(*) FROM chunks k WHERE k.tenant = d.tenant"
                " AND k.doc_id = d.doc_id) AS n FROM documents d WHERE tenant = %s",
                (tenant,),
            ).fetchall()
        }
    assert {d: (r["status"], r["n"]) for d, r in docs.items() if r["status"] == "failed"} == {
        d: ("failed", 0) for d in expected
    }
    assert docs["good.md"]["status"] == docs["good2.html"]["status"] == "ready"
    assert docs["good.md"]["n"] == docs["good.md"]["chunk_count"] > 0


def test_failed_reingest_keeps_the_good_version(voyage, tenant):
    good = ingest_document(doc(tenant, "a.md", "# Документ\n\n" + section("А", 10), version=1))
    rows = chunk_rows(tenant)
    # the same groups: a failed re-ingest's ACL would still apply to the kept version
    # (tests/integration/test_reingest_acl_matrix.py, "broken")
    bad = ingest_document(
        IngestRequest(tenant=tenant, doc_id="a.md", content="   ", fmt="md", version=2, acl=["staff"])
    )
    assert good.status == "stored" and bad.status == "failed" and "empty document" in bad.error
    assert chunk_rows(tenant) == rows
    with db.connection() as c:
        d = c.execute("SELECT status, version, error FROM documents WHERE tenant = %s", (tenant,)).fetchone()
    assert (d["status"], d["version"]) == ("ready", 1) and "empty document" in d["error"]


def test_provider_outage_retries_the_task_then_records_embed_errors(
    celery_worker, use_settings, tenant, tmp_path
):
    from ragline.ingest.enqueue import collect_files, enqueue_files
    from tests.loopback import Faults

    (tmp_path / "a.md").write_text("# А\n\n" + section("А", 3), encoding="utf-8")
    (tmp_path / "b.md").write_text("# Б\n\n" + section("Б", 3), encoding="utf-8")
    with LoopbackServer(faults=Faults(every_nth_500=1)) as srv:
        use_settings(
            embed_provider="voyage",
            providers_voyage_base_url=srv.url + "/v1",
            providers_voyage_api_key="test-key",
            embed_backoff_base_s=0.01,
            embed_backoff_max_s=0.02,
            embed_max_retries=0,
            ingest_task_max_retries=1,
        )  # one task retry (countdown 1 s), then the documents fail
        grant_roots(tenant, [tmp_path])
        summary = wait_job(enqueue_files(collect_files([tmp_path]), tenant=tenant, acl=["g"]), timeout=120)
    # two documents on two ingest processes: two tasks, each a first run + one retry, 1 attempt each
    assert summary["failed"] == 2 and srv.stats.requests == 4
    assert all(e["error"].startswith("embed: ProviderError: voyage") for e in summary["errors"])
    assert "test-key" not in str(summary)


def test_ingest_batches_are_bounded_by_documents_and_bytes():
    from ragline.ingest.enqueue import plan_batches

    groups = plan_batches([10, 10, 10, 500, 10, 10, 10, 10, 10], max_docs=3, max_bytes=100)
    assert [list(g) for g in groups] == [[0, 1, 2], [3], [4, 5, 6], [7, 8]]
    assert plan_batches([], 3, 100) == []


def test_allowed_roots_confine_local_reads(stack, use_settings, tmp_path):
    """With ingest_allowed_roots set, a payload naming a file elsewhere fails with a clear error."""
    import json

    from ragline.ingest.load import load
    from ragline.ingest.parse import ParseError
    from ragline.shared.sdk.contracts import IngestRequest

    inside = tmp_path / "kb"
    inside.mkdir()
    (inside / "a.md").write_text("# A\n\ntext\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    use_settings(ingest_allowed_roots=json.dumps([str(inside)]))
    assert load(IngestRequest(tenant="t", doc_id="a", uri=str(inside / "a.md"))).data.startswith(b"# A")
    with pytest.raises(ParseError, match="outside the allowed ingest roots"):
        load(IngestRequest(tenant="t", doc_id="s", uri=str(secret)))
    with pytest.raises(ParseError, match="outside the allowed ingest roots"):
        load(IngestRequest(tenant="t", doc_id="s", uri=str(inside / ".." / "secret.txt")))


def test_a_document_stored_for_no_group_is_logged_by_the_worker(voyage, tenant, caplog):
    """Whatever sent it (an event, a direct payload): the worker warns about a document nobody can read."""
    from ragline.ingest.tasks import _warn_visible_to_no_group

    nobody = doc(tenant, "nobody.md", "# Никто\n\nЭтот документ не видит никто.").model_copy(
        update={"acl": []}
    )
    staff = doc(tenant, "staff.md", "# Сотрудники\n\nЭтот документ видят сотрудники.")
    results = ingest_batch([nobody, staff])
    assert [r.status for r in results] == ["stored", "stored"]
    with caplog.at_level("WARNING", logger="ragline.ingest.tasks"):
        _warn_visible_to_no_group([nobody, staff], results)
    warned = [r.getMessage() for r in caplog.records if "visible to no group" in r.getMessage()]
    assert len(warned) == 1 and "'nobody.md'" in warned[0] and tenant in warned[0]


def test_an_rst_page_keeps_its_sections_and_literal_blocks(celery_worker, voyage, tenant, tmp_path):
    """A Sphinx page from a folder: its section titles are the chunks' heading path and its literal
    block is stored whole, not as lines read as headings (the page of the requests docs)."""
    import shutil

    from ragline.ingest.enqueue import collect_files, enqueue_files
    from tests.conftest import REPO

    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(REPO / "tests" / "data" / "rst" / "authentication.rst", folder)
    files = collect_files([folder])
    grant_roots(tenant, [folder])
    summary = wait_job(enqueue_files(files, tenant=tenant, acl=["staff"]))
    assert (summary["state"], summary["failed"]) == ("succeeded", 0), summary
    rows = chunk_rows(tenant)
    paths = {r["heading_path"] for r in rows}
    assert "Authentication › Basic Authentication › netrc Authentication" in paths
    basic = [r["content"] for r in rows if r["heading_path"] == "Authentication › Basic Authentication"]
    literal = (
        ">>> from requests.auth import HTTPBasicAuth\n"
        ">>> requests.get('https://api.github.com/user', auth=HTTPBasicAuth('user', 'pass'))\n"
        "<Response [200]>"
    )
    assert any(literal in c for c in basic), basic
    assert not any("=====" in c or "-----" in c for c in (r["content"] for r in rows))


RST_PAGE = (
    "Retries\n=======\n\nThe client waits between attempts.\n\nBackoff\n-------\n\nEach wait doubles.\n"
)


def stored_preparation(tenant: str, doc_id: str) -> tuple[str | None, str | None]:
    with db.connection() as c:
        row = c.execute(
            "SELECT metadata->>'format' AS f, metadata->>'prepared_with' AS p FROM documents"
            " WHERE tenant = %s AND doc_id = %s",
            (tenant, doc_id),
        ).fetchone()
    return row["f"], row["p"]


def forget_preparation(tenant: str, doc_id: str, stored_format: str) -> None:
    """The document as a release before the preparation was recorded stored it, read as ``stored_format``."""
    with db.connection() as c:
        c.execute(
            "UPDATE documents SET metadata = (metadata - 'prepared_with') || jsonb_build_object('format', %s::text)"
            " WHERE tenant = %s AND doc_id = %s",
            (stored_format, tenant, doc_id),
        )


@pytest.mark.parametrize(
    ("stored_as", "bump", "status"),
    [
        ("rst", False, "skipped_unchanged"),  # the same bytes, read the same way: skipped
        ("rst", True, "stored"),  # the format's parser changed: prepared again
        # stored before versions were recorded: it counts as version 1 of its format, so it is
        # skipped while rST is at version 1 and prepared again once the parser moved on (2: lines)
        ("legacy-rst", False, "skipped_unchanged" if formats.get("rst").version == 1 else "stored"),
        ("legacy-text", False, "stored"),  # stored as plain text before rST had a parser of its own
    ],
)
def test_unchanged_bytes_are_prepared_again_when_their_preparation_changed(
    voyage, tenant, monkeypatch, stored_as, bump, status
):
    from dataclasses import replace

    v = formats.get("rst").version
    req = IngestRequest(tenant=tenant, doc_id="retries.rst", content=RST_PAGE, fmt="rst", acl=["staff"])
    assert ingest_document(req).status == "stored"
    assert stored_preparation(tenant, "retries.rst") == ("rst", f"rst/{v}")
    if stored_as.startswith("legacy-"):
        forget_preparation(tenant, "retries.rst", stored_as.removeprefix("legacy-"))
    if bump:
        monkeypatch.setitem(formats._BY_NAME, "rst", replace(formats.get("rst"), version=v + 1))
    again = ingest_document(req.model_copy(update={"version": 2}))
    assert again.status == status
    if status == "stored":
        assert stored_preparation(tenant, "retries.rst") == ("rst", f"rst/{v + 1}" if bump else f"rst/{v}")
        assert {r["heading_path"] for r in chunk_rows(tenant, "retries.rst")} >= {"Retries › Backoff"}
