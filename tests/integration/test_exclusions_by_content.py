"""An exclusion keeps out the excluded document's file and content under any doc id.

A secret file is ingested, then ``docs delete --exclude``d. The matrix sends it back under another
doc id through every ingest path: ``ragline ingest`` of its folder under another source name or of
a copy in another folder, the reindex of a configured folder source holding it or a copy, an upsert
event naming its file or a copy, a producer's ingest task with its bytes inline, and a git
repository holding it (the reindex of a git source, a push event, a ``git:`` upsert). None may
store it; ``docs include`` lifts the exclusion for all of them (the control cell, so the refusals
are the exclusion's). Keyed by doc id alone (the old rule), every cell stored it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragline.ingest.enqueue import default_source_name
from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT, TASK_INGEST_EVENT
from ragline.shared.worker import db
from tests.gitrepo import commit
from tests.gitrepo import git as sh
from tests.integration.lifecycle_helpers import wait_job
from tests.integration.test_exclusions import TEXT, _cli, _json

SECRET = "hunter2"
#: a file beside the secret in every folder and repository: the listing paths must store it (each
#: cell's proof that the path ran)
OPEN = "# Открыто\n\nОбщий регламент дежурств, его читают все.\n"


def _secret_docs(tenant: str, text: str = SECRET) -> list[str]:
    """The tenant's stored documents whose chunks hold ``text`` (the secret by default)."""
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT DISTINCT doc_id FROM chunks WHERE tenant = %s AND content LIKE %s ORDER BY doc_id",
            (tenant, f"%{text}%"),
        ).fetchall()
    return [r["doc_id"] for r in rows]


def _send(name: str, payload: dict) -> dict:
    from ragline.shared.worker.celery_app import app

    out = app.send_task(name, args=[payload]).get(timeout=120)
    if out.get("task_id"):
        return app.AsyncResult(out["task_id"]).get(timeout=120)
    if out.get("job_id"):
        wait_job(out["job_id"])
    return out


def _reindex(voyage, tenant: str, spec: dict) -> None:
    from ragline.ingest.control.tasks import run_reindex

    voyage(
        embed_model="voyage-exclusions",
        lifecycle_sources=json.dumps([{"tenant": tenant, "acl": ["g"], **spec}]),
    )
    out = run_reindex([spec["name"]])
    if out["job_id"]:
        wait_job(out["job_id"])


def _git_repository(folder: Path) -> str:
    folder.mkdir()
    sh(folder, "init", "-q", "-b", "main")
    return commit(folder, {"notes/secret.md": TEXT, "notes/open.md": OPEN})


def bring_back(way: str, f: Path, copy: Path, tenant: str, voyage, tmp_path: Path) -> None:
    """The excluded file (``f``) or its bytes (``copy``, ``TEXT``) ingested under another doc id."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    if way == "cli_other_source":
        run = _cli("ingest", str(f.parent), "--tenant", tenant, "--acl", "g", "--source", "other", "--wait")
        assert run.exit_code == 0, run.output
    elif way == "cli_copy":
        run = _cli("ingest", str(copy.parent), "--tenant", tenant, "--acl", "g", "--wait")
        assert run.exit_code == 0, run.output
    elif way in ("reindex_same_folder", "reindex_copy"):
        folder = f.parent if way == "reindex_same_folder" else copy.parent
        _reindex(voyage, tenant, {"name": "kb2", "kind": "folder", "path": str(folder), "glob": "*.md"})
    elif way in ("event_same_file", "event_copy"):
        uri = str(f if way == "event_same_file" else copy)
        ev = {
            "type": "upsert",
            "tenant": tenant,
            "doc_id": "elsewhere",
            "uri": uri,
            "version": 1,
            "acl": ["g"],
        }
        _send(TASK_INGEST_EVENT, ev)
    elif way == "task_inline":
        payload = {"tenant": tenant, "doc_id": "pasted", "content": TEXT, "fmt": "md", "acl": ["g"]}
        _send(TASK_INGEST_DOCUMENT, payload | {"version": 1})
    else:
        repo = tmp_path / "repo"
        at = _git_repository(repo)
        spec = {"name": "code", "kind": "git", "path": str(repo), "ref": at}
        if way == "git_reindex":
            _reindex(voyage, tenant, spec)
        elif way == "git_push":
            voyage(
                embed_model="voyage-exclusions",
                lifecycle_sources=json.dumps([{"tenant": tenant, "acl": ["g"], **spec}]),
            )
            _send(
                TASK_INGEST_EVENT,
                {"type": "push", "tenant": tenant, "source": "code", "after": at, "version": 1},
            )
        else:
            assert way == "git_upsert"
            grant_roots(tenant, [repo])
            uri = f"git:{repo}@{at}:notes/secret.md"
            ev = {
                "type": "upsert",
                "tenant": tenant,
                "doc_id": "from-git",
                "uri": uri,
                "version": 1,
                "acl": ["g"],
            }
            _send(TASK_INGEST_EVENT, ev)


WAYS = (
    "cli_other_source",
    "cli_copy",
    "reindex_same_folder",
    "reindex_copy",
    "event_same_file",
    "event_copy",
    "task_inline",
    "git_reindex",
    "git_push",
    "git_upsert",
)


@pytest.fixture()
def excluded_secret(celery_worker, voyage, tenant, tmp_path):
    """The secret ingested from ``kb/secret.md`` and excluded; a copy waits in ``copy/``."""
    voyage(embed_model="voyage-exclusions")
    root, other = tmp_path / "kb", tmp_path / "copy"
    root.mkdir()
    other.mkdir()
    f = root / "secret.md"
    f.write_text(TEXT, encoding="utf-8")
    shutil.copy(f, other / "secret-copy.md")
    (root / "open.md").write_text(OPEN, encoding="utf-8")
    (other / "open-copy.md").write_text(OPEN, encoding="utf-8")
    grant_roots(tenant, [root, other])
    run = _cli("ingest", str(root), "--tenant", tenant, "--acl", "g", "--wait")
    assert run.exit_code == 0, run.output
    doc_id = f"{default_source_name(root)}/secret.md"
    assert _secret_docs(tenant) == [doc_id]
    gone = _cli("docs", "delete", doc_id, "--tenant", tenant, "--exclude", "--json")
    assert gone.exit_code == 0 and _json(gone)["excluded"] == [doc_id], gone.output
    assert _secret_docs(tenant) == []
    return f, other / "secret-copy.md", doc_id


@pytest.mark.parametrize("way", WAYS)
def test_an_excluded_file_stays_out_under_any_doc_id(excluded_secret, voyage, tenant, tmp_path, way):
    f, copy, doc_id = excluded_secret
    witnesses = len(_secret_docs(tenant, "регламент"))
    bring_back(way, f, copy, tenant, voyage, tmp_path / "back")
    assert _secret_docs(tenant) == [], f"{way}: the excluded content is back"
    if way.startswith(("cli_", "reindex_", "git_reindex", "git_push")):
        # the path ran: the file beside the secret is stored under its new doc id
        assert len(_secret_docs(tenant, "регламент")) == witnesses + 1, way
    else:
        # the control cell: lifted, the same way stores it
        assert _cli("docs", "include", doc_id, "--tenant", tenant).exit_code == 0
        bring_back(way, f, copy, tenant, voyage, tmp_path / "again")
        assert _secret_docs(tenant) != [], f"{way}: not stored after `docs include`"


def test_excluding_names_the_documents_already_holding_the_content(celery_worker, voyage, tenant, tmp_path):
    """A copy stored before the exclusion is not deleted with it: the command names it."""
    voyage(embed_model="voyage-exclusions")
    for name in ("kb", "copy"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "secret.md").write_text(TEXT, encoding="utf-8")
        assert _cli("ingest", str(tmp_path / name), "--tenant", tenant, "--acl", "g", "--wait").exit_code == 0
    doc_id, copy_id = (f"{default_source_name(tmp_path / n)}/secret.md" for n in ("kb", "copy"))
    gone = _cli("docs", "delete", doc_id, "--tenant", tenant, "--exclude", "--json")
    assert gone.exit_code == 0, gone.output
    assert _json(gone)["same_content"] == [copy_id]
    assert copy_id in " ".join(gone.stderr.split())


def test_the_migration_gives_existing_exclusions_the_source_of_their_tombstone(conn, tenant):
    """Migration 0023's back-fill names a source as ``source_key`` does, so an exclusion made before
    it keeps the file out under another doc id too (its content hash is gone with the tombstone)."""
    from yoyo import read_migrations

    from ragline.ingest.exclusions import source_key
    from ragline.shared.worker.migrate import MIGRATIONS_DIR

    uris = {
        "file": "/srv/kb/secret.md",
        "file-url": "file:///srv/kb/other.md",
        "git": f"git:/srv/repo@{'a' * 40}:docs/secret.md",
        "url": "https://docs.example.org/secret.html#part",
    }
    for doc_id, uri in uris.items():
        conn.execute(
            "INSERT INTO documents (tenant, doc_id, source_uri, status, version) VALUES (%s, %s, %s, 'deleted', 1)",
            (tenant, doc_id, uri),
        )
        conn.execute("INSERT INTO document_exclusions (tenant, doc_id) VALUES (%s, %s)", (tenant, doc_id))
    (migration,) = [m for m in read_migrations(str(MIGRATIONS_DIR)) if m.id.startswith("0023")]
    migration.load()
    conn.execute(migration.steps[1].step._apply)
    rows = conn.execute(
        "SELECT doc_id, source FROM document_exclusions WHERE tenant = %s", (tenant,)
    ).fetchall()
    assert {r["doc_id"]: r["source"] for r in rows} == {d: source_key(u) for d, u in uris.items()}
