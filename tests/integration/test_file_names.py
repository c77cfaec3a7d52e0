"""File names with control or bidi characters never become doc ids, for every source that lists
files: each is a failed document of its job with the reason recorded (``ragline errors``), the
other files of the same run are ingested, and nothing is stored under the bad name. Events name
their doc ids themselves: the contract refuses a bad one as an invalid payload.

Real workers (the session's), the voyage embedder on the loopback server."""

from __future__ import annotations

import json
import subprocess
import unicodedata
from pathlib import Path

import pytest

from ragline.shared.sdk.names import TASK_INGEST_EVENT
from ragline.shared.worker import db
from tests.gitrepo import commit, git
from tests.integration.lifecycle_helpers import wait_job
from tests.loopback import LoopbackServer

GOOD = "ok.md"
BAD = {
    "newline": "a\nb.md",
    "RLO": "report\u202edm.exe.md",
    "LRI": "x\u2066y.md",
    "RLM": "z\u200fz.md",
    "zero width": "twin\u200b.md",
    "ESC": "esc\x1b[2J.md",
}


def unsafe_characters(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


TEXT = "# Заметка\n\nОтпуск оформляют заранее, через портал.\n"


@pytest.fixture()
def voyage(use_settings, tenant):
    with LoopbackServer() as srv:

        def apply(**more):
            use_settings(
                embed_provider="voyage",
                providers_voyage_base_url=srv.url + "/v1",
                providers_voyage_api_key="test-key",
                embed_model=f"voyage-names-{tenant}"[:60],
                **more,
            )

        apply()
        yield apply


def _files(folder: Path) -> None:
    folder.mkdir(parents=True)
    for name in (GOOD, *BAD.values()):
        (folder / name).write_text(TEXT)


def _run(source: str, tenant: str, tmp_path: Path, voyage) -> str:
    """Ingest the files through ``source``; the job's id."""
    from ragline.ingest.control.tasks import run_reindex
    from ragline.ingest.enqueue import collect_files, enqueue_files
    from ragline.ingest.roots import grant_roots
    from ragline.shared.worker.celery_app import app

    folder = tmp_path / "docs"
    if source in ("git push", "git reindex"):
        folder.mkdir()
        git(folder, "init", "-q", "-b", "main")
        commit(folder, {name: TEXT for name in (GOOD, *BAD.values())}, 1_700_000_000)
    else:
        _files(folder)
    if source == "ragline ingest":
        grant_roots(tenant, [folder])
        return enqueue_files(collect_files([folder], source="docs"), tenant, ["g"])
    kind = "git" if source.startswith("git") else "folder"
    spec = {"name": "docs", "kind": kind, "tenant": tenant, "acl": ["g"], "path": str(folder)}
    voyage(lifecycle_sources=json.dumps([spec | ({"glob": "**/*.md"} if kind == "folder" else {})]))
    if source == "git push":
        ev = {"type": "push", "tenant": tenant, "source": "docs", "after": "main", "version": 1}
        out = app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=120)
        assert out["push"]["refused_names"] == len(BAD), out
        return out["job_id"]
    out = run_reindex(["docs"])
    assert out["sources"]["docs"]["refused_names"] == len(BAD), out
    return out["job_id"]


@pytest.mark.parametrize("source", ["ragline ingest", "folder reindex", "git push", "git reindex"])
def test_unsafe_names_refused_and_recorded(celery_worker, voyage, tenant, tmp_path, source):
    job = _run(source, tenant, tmp_path, voyage)
    summary = wait_job(job, timeout=300)
    counts = (summary["documents"], summary["done"], summary["failed"])
    assert counts == (1 + len(BAD), 1, len(BAD)), summary["errors"]
    with db.connection() as c:
        stored = [r["doc_id"] for r in c.execute("SELECT doc_id FROM documents WHERE tenant = %s", (tenant,))]
        failed = {
            r["doc_id"]: r["error"]
            for r in c.execute(
                "SELECT doc_id, error FROM job_documents WHERE job_id = %s AND state = 'failed'", (job,)
            )
        }
        recorded = {
            r["doc_id"]: (r["stage"], r["error"])
            for r in c.execute(
                "SELECT doc_id, stage, error FROM document_errors WHERE tenant = %s AND resolved_at IS NULL",
                (tenant,),
            )
        }
    assert stored == ["docs/" + GOOD]  # nothing under a bad name, not even a failed row
    assert len(failed) == len(BAD) and set(recorded) == set(failed)
    for doc_id, error in failed.items():
        assert not unsafe_characters(doc_id) and not unsafe_characters(error), doc_id  # escaped
        assert "may not hold" in error and "rename the file" in error
        assert recorded[doc_id] == ("name", error)
    assert any("\\u202e" in d for d in failed) and any("\\u000a" in d for d in failed)


def test_an_event_naming_an_unsafe_doc_id_is_an_invalid_payload(celery_worker, tenant):
    from ragline.shared.worker.celery_app import app

    for doc_id in BAD.values():
        ev = {
            "type": "upsert",
            "tenant": tenant,
            "doc_id": doc_id,
            "uri": "https://x.example/d",
            "version": 1,
        }
        out = app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=60)
        assert out["ok"] is False and out["error"] == "invalid payload", out
        assert out["detail"][0]["loc"] == ["doc_id"] and "may not hold" in out["detail"][0]["msg"]
    path = {"type": "upsert", "tenant": tenant, "doc_id": "d", "uri": "https://x.example/d", "version": 1}
    out = app.send_task(TASK_INGEST_EVENT, args=[path | {"path": "a\u202eb"}]).get(timeout=60)
    assert out["error"] == "invalid payload" and out["detail"][0]["loc"] == ["path"]
    with db.connection() as c:
        assert (
            c.execute("SELECT count(*) AS n FROM documents WHERE tenant = %s", (tenant,)).fetchone()["n"] == 0
        )


def test_git_can_hold_such_names(tmp_path):
    """The repository really tracks the names (the test is about git's names, not the file system's)."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {name: TEXT for name in BAD.values()}, 1_700_000_000)
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    assert sorted(p.decode() for p in out.split(b"\0") if p) == sorted(BAD.values())
