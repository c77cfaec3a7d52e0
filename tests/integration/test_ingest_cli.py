"""`ragline ingest PATH... --tenant T --acl G1,G2 --wait --json` as a user runs it (a subprocess), with the
session's in-process worker consuming the tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ragline.ingest.enqueue import default_source_name
from ragline.ingest.roots import grant_roots
from ragline.shared.worker import db
from tests.conftest import REPO
from tests.integration.test_ingest import section
from tests.loopback import loopback_voyage

KEYS = {"documents", "chunks", "embedded", "skipped_unchanged", "failed", "errors"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragline.cli", *args],
        cwd=REPO,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _ingest(*args: str) -> dict:
    out = _cli("ingest", *args, "--wait", "--json")
    summary = json.loads(out.stdout)
    assert out.returncode == (1 if summary["failed"] else 0), out.stderr[-2000:]  # 1: documents failed
    return summary


def test_cli_json_summary_first_and_second_run(celery_worker, use_settings, tenant, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Первый\n\n" + section("А", 12), encoding="utf-8")
    (tmp_path / "docs" / "b.md").write_text("# Второй\n\n" + section("Б", 12), encoding="utf-8")
    (tmp_path / "docs" / "empty.md").write_bytes(b"")
    (tmp_path / "other").mkdir()
    extra = tmp_path / "other" / "extra.txt"
    extra.write_text("Отдельный файл, переданный путём. В нём два предложения.", encoding="utf-8")
    with loopback_voyage(use_settings) as srv:
        first = _ingest(
            str(tmp_path / "docs"), str(extra), str(extra), "--tenant", tenant, "--acl", "staff, auditors"
        )
        second = _ingest(
            str(tmp_path / "docs"), str(extra), str(extra), "--tenant", tenant, "--acl", "staff,auditors"
        )
    assert KEYS <= set(first)
    assert (first["documents"], first["failed"], first["skipped_unchanged"]) == (4, 1, 0)
    docs_id = default_source_name(tmp_path / "docs")
    assert first["errors"] == [{"doc_id": f"{docs_id}/empty.md", "error": "parse: empty document"}]
    assert first["embedded"] == first["chunks"] == srv.stats.texts_embedded >= 3
    assert (second["documents"], second["skipped_unchanged"], second["embedded"], second["failed"]) == (
        4,
        3,
        0,
        1,
    ), second
    with db.connection() as c:
        acls = {
            tuple(r["acl"]) for r in c.execute("SELECT DISTINCT acl FROM chunks WHERE tenant = %s", (tenant,))
        }
    assert acls == {("staff", "auditors")}


def _documents(tenant: str) -> dict[str, dict]:
    with db.connection() as c:
        rows = c.execute(
            "SELECT d.doc_id, d.acl, d.source_uri, d.version, d.content_hash, d.status, d.error, d.updated_at,"
            " d.metadata->>'source' AS source,"
            " (SELECT array_agg(DISTINCT k.acl::text) FROM chunks k WHERE k.tenant = d.tenant"
            " AND k.doc_id = d.doc_id) AS chunk_acls FROM documents d WHERE d.tenant = %s",
            (tenant,),
        ).fetchall()
    return {r["doc_id"]: r for r in rows}


def test_same_file_names_from_two_folders_stay_two_documents(celery_worker, use_settings, tenant, tmp_path):
    hr, it = tmp_path / "hr" / "docs", tmp_path / "it" / "docs"
    for folder, text in (
        (hr, "# Отпуск\n\nОтпуск согласует отдел кадров."),
        (it, "# VPN\n\nVPN настраивает ИТ."),
    ):
        folder.mkdir(parents=True)
        (folder / "README.md").write_text(text, encoding="utf-8")
    with loopback_voyage(use_settings):
        first = _ingest(str(hr), "--tenant", tenant, "--acl", "hr")
        second = _ingest(str(it), "--tenant", tenant, "--acl", "it")
    hr_id, it_id = f"{default_source_name(hr)}/README.md", f"{default_source_name(it)}/README.md"
    assert (first["failed"], second["failed"], second["skipped_unchanged"]) == (0, 0, 0)
    docs = _documents(tenant)
    assert set(docs) == {hr_id, it_id}
    assert first["sources"] == [{"source": default_source_name(hr), "folder": str(hr.resolve())}]
    assert (docs[hr_id]["acl"], docs[hr_id]["chunk_acls"], docs[hr_id]["source_uri"]) == (
        ["hr"],
        ["{hr}"],
        str((hr / "README.md").resolve()),
    )
    assert (docs[it_id]["acl"], docs[it_id]["chunk_acls"]) == (["it"], ["{it}"])
    # the same folder again: the same ids, nothing new
    with loopback_voyage(use_settings):
        again = _ingest(str(hr / "README.md"), str(hr), "--tenant", tenant, "--acl", "hr")
    assert (again["documents"], again["skipped_unchanged"]) == (1, 1) and set(_documents(tenant)) == set(docs)


def test_a_doc_id_of_another_folder_is_refused_and_left_untouched(
    celery_worker, use_settings, tenant, tmp_path
):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, intro in ((a, "Первая версия введения."), (b, "Совсем другое введение.")):
        folder.mkdir()
        (folder / "README.md").write_text("# Общий\n\nОдинаковый текст в двух папках.", encoding="utf-8")
        (folder / "intro.md").write_text(f"# Введение\n\n{intro}", encoding="utf-8")
    with loopback_voyage(use_settings):
        _ingest(str(a), "--tenant", tenant, "--acl", "hr", "--source", "wiki")
        before = _documents(tenant)
        refused = _ingest(str(b), "--tenant", tenant, "--acl", "it", "--source", "wiki")
        errors = _cli("errors", "--tenant", tenant, "--json")
    assert set(before) == {"wiki/README.md", "wiki/intro.md"}
    # both refused: the identical README (not "unchanged") and the different intro (not overwritten)
    assert (refused["state"], refused["failed"], refused["skipped_unchanged"]) == (
        "completed_with_errors",
        2,
        0,
    )
    assert sorted(e["doc_id"] for e in refused["errors"]) == ["wiki/README.md", "wiki/intro.md"]
    for e in refused["errors"]:
        assert (
            e["error"].startswith("identity: doc id 'wiki/")
            and f"from the folder {a.resolve()}" in e["error"]
        )
        assert str(b.resolve()) in e["error"] and "--source" in e["error"]
    assert _documents(tenant) == before  # ACL, file, version and content of the first folder's documents
    assert errors.returncode == 0, errors.stderr
    listed = {e["doc_id"]: e for e in json.loads(errors.stdout)}
    assert set(listed) == {"wiki/README.md", "wiki/intro.md"}
    assert listed["wiki/intro.md"]["stage"] == "identity"
    assert listed["wiki/intro.md"]["source_uri"] == str((b / "intro.md").resolve())


def test_acl_is_required_and_an_empty_one_is_warned_about(celery_worker, use_settings, tenant, tmp_path):
    (tmp_path / "a.md").write_text("# А\n\nДокумент без групп.", encoding="utf-8")
    missing = _cli("ingest", str(tmp_path), "--tenant", tenant, "--wait", "--json")
    assert missing.returncode == 2 and missing.stdout == ""
    assert "--acl is required" in missing.stderr
    with db.connection() as c:
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE tenant = %s", (tenant,)).fetchone()["n"] == 0
    with loopback_voyage(use_settings):
        out = _cli("ingest", str(tmp_path), "--tenant", tenant, "--acl", "", "--wait", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    doc_id = f"{default_source_name(tmp_path)}/a.md"
    assert summary["failed"] == 0 and summary["visible_to_no_group"] == [doc_id]
    assert any("visible to no group" in w for w in summary["warnings"])
    assert "warning: --acl is empty" in out.stderr and "visible to no group" in out.stderr


def test_files_stored_under_an_old_id_are_reported(celery_worker, use_settings, tenant, tmp_path):
    from ragline.ingest.pipeline import ingest_document
    from ragline.shared.sdk.contracts import IngestRequest

    f = tmp_path / "guide.md"
    f.write_text("# Гайд\n\nКак начать работу.", encoding="utf-8")
    with loopback_voyage(use_settings):
        # what `ragline ingest` stored before doc ids had a source prefix
        grant_roots(tenant, [tmp_path])
        old = IngestRequest(
            tenant=tenant, doc_id="guide.md", uri=str(f.resolve()), path="guide.md", acl=["g"], version=1
        )
        assert ingest_document(old).status == "stored"
        out = _cli("ingest", str(tmp_path), "--tenant", tenant, "--acl", "g", "--wait", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    new_id = f"{default_source_name(tmp_path)}/guide.md"
    assert json.loads(out.stdout)["duplicates"] == [{"doc_id": new_id, "also_stored_as": "guide.md"}]
    assert "already stored under another doc id" in out.stderr and "guide.md" in out.stderr
    assert set(_documents(tenant)) == {"guide.md", new_id}


def test_a_parser_crash_fails_only_its_own_document(celery_worker, use_settings, tenant, tmp_path):
    """One file that crashes the Markdown partitioner in a folder: the others are stored, the
    summary names that file alone with its reason."""
    from tests.unit.test_parse import FRONT_MATTER_ONLY

    (tmp_path / "guide.md").write_text("# Гайд\n\n" + section("Г", 6), encoding="utf-8")
    (tmp_path / "notes.md").write_text("# Заметки\n\n" + section("З", 6), encoding="utf-8")
    (tmp_path / "feature-request.md").write_bytes(FRONT_MATTER_ONLY)
    with loopback_voyage(use_settings):
        summary = _ingest(str(tmp_path), "--tenant", tenant, "--acl", "staff")
    assert (summary["documents"], summary["failed"]) == (3, 1), summary
    [error] = summary["errors"]
    assert error["doc_id"].endswith("/feature-request.md") and "parser failed" in error["error"], error
    stored = {d for d, row in _documents(tenant).items() if row["status"] == "ready"}
    assert {d.rsplit("/", 1)[-1] for d in stored} == {"guide.md", "notes.md"}
