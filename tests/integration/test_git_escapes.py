"""A ``git:`` address, a git source and a repository ingest read only the repository they name.

Tenant globex has a repository with a board-only document; tenant acme has folders of its own it
may write into (granted roots, a configured source's folder). Each escape form makes git read
globex's objects through one of acme's folders: the folder is inside globex's work tree, or holds a
``.git`` file (a gitdir link, a worktree), a symlinked ``.git``, or a ``.git`` whose alternates or
commondir lead to globex. Every entry point (an upsert event with a ``git:`` address, ``ragline
ingest REPO``, a configured git source at reindex, a push event, a clone fetched from a local
path) must refuse every form with a clear error and store nothing of globex in acme; a plain
repository in the same places is read as before (the control cell).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.names import TASK_INGEST_EVENT
from ragline.shared.worker import db
from tests.gitrepo import git as sh
from tests.integration.lifecycle_helpers import wait_job
from tests.loopback import loopback_voyage

SECRET = "GLOBEX-BOARD-ONLY-4711"
#: the layouts that make git read another repository's objects: the first six lead the whole git dir
#: elsewhere; the last two keep acme's own repository and reach one object or store through its
#: object folder (a symlinked loose object named by acme's own tree, a quoted alternates line; the
#: links that lead no git version here to another's objects are tests/unit/test_git_links.py's)
FORMS = (
    "parent_work_tree",
    "gitdir_file",
    "symlinked_git",
    "worktree_file",
    "alternates",
    "commondir",
    "loose_object_symlink",
    "quoted_alternates",
)
ENTRIES = ("upsert_event", "cli_ingest", "reindex_source", "push_event", "fetch_clone")


def globex_repository(base: Path) -> tuple[Path, str]:
    """globex's repository: the board-only document, and a folder ``acme-area`` in its work tree."""
    repo = base / "globex"
    (repo / "acme-area").mkdir(parents=True)
    (repo / "board.md").write_text(f"# Board\n\nОтчёт совета директоров {SECRET}.\n")
    (repo / "acme-area" / "readme.md").write_text("# Acme\n\nПапка арендатора acme.\n")
    sh(base, "init", "-q", "-b", "main", str(repo))
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "board")
    return repo, sh(repo, "rev-parse", "HEAD")


def escape(form: str, globex: Path, base: Path) -> tuple[Path, str]:
    """acme's folder, built so that git run in it (or on its ``.git``) reads globex's objects, and
    the commit to read there: globex's, or acme's own whose tree names globex's blob."""
    commit = sh(globex, "rev-parse", "HEAD")
    if form == "parent_work_tree":
        return globex / "acme-area", commit
    folder = base / "acme" / form
    folder.parent.mkdir(parents=True, exist_ok=True)
    if form == "worktree_file":
        sh(globex, "worktree", "add", "-q", "--detach", str(folder))
        return folder, commit
    folder.mkdir()
    (folder / "readme.md").write_text("# Acme\n\nПапка арендатора acme.\n")
    objects = folder / ".git" / "objects"
    if form == "gitdir_file":
        (folder / ".git").write_text(f"gitdir: {globex / '.git'}\n")
    elif form == "symlinked_git":
        os.symlink(globex / ".git", folder / ".git")
    elif form == "commondir":
        (folder / ".git").mkdir()
        (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (folder / ".git" / "commondir").write_text(f"{globex / '.git'}\n")
    else:
        sh(folder, "init", "-q", "-b", "main")
    if form == "alternates":
        (objects / "info" / "alternates").write_text(f"{globex / '.git' / 'objects'}\n")
    elif form == "quoted_alternates":  # git unquotes a line that starts with '"'
        (objects / "info" / "alternates").write_text(f'"{globex / ".git" / "objects"}"\n')
    elif form == "loose_object_symlink":
        blob = sh(globex, "rev-parse", "HEAD:board.md")
        (objects / blob[:2]).mkdir()
        (objects / blob[:2] / blob[2:]).symlink_to(globex / ".git" / "objects" / blob[:2] / blob[2:])
        sh(folder, "update-index", "--add", "--cacheinfo", f"100644,{blob},board.md")
        sh(folder, "commit", "-q", "-m", "acme's tree naming globex's blob")
        commit = sh(folder, "rev-parse", "HEAD")
    return folder, commit


def stored(tenant: str) -> list[dict]:
    with db.connection() as c:
        return c.execute(
            "SELECT d.doc_id, d.status, d.error, string_agg(ch.content, ' ') AS text FROM documents d"
            " LEFT JOIN chunks ch USING (tenant, doc_id) WHERE d.tenant = %s GROUP BY d.doc_id, d.status,"
            " d.error",
            (tenant,),
        ).fetchall()


def leaked(tenant: str) -> list[str]:
    return [r["doc_id"] for r in stored(tenant) if SECRET in (r["text"] or "")]


@pytest.fixture()
def voyage(use_settings):
    with loopback_voyage(use_settings, embed_model="voyage-git-escapes") as srv:
        yield srv


def attempt(entry: str, tenant: str, folder: Path, commit: str, use_settings) -> str:
    """Send acme's folder through one entry point; returns the error it reported (or "" if none)."""
    from ragline.ingest.control.tasks import run_reindex
    from ragline.shared.worker.celery_app import app

    name = "acme-src"
    source = {"name": name, "kind": "git", "tenant": tenant, "acl": ["staff"], "ref": commit}
    if entry == "upsert_event":
        grant_roots(tenant, [folder])  # the operator granted acme its folder
        ev = {
            "type": "upsert",
            "tenant": tenant,
            "doc_id": "board",
            "uri": f"git:{folder}@{commit}:board.md",
            "acl": ["staff"],
            "version": 1,
        }
        out = app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=120)
        assert out["outcome"] == "enqueued", out
        result = app.AsyncResult(out["task_id"]).get(timeout=120)
        return result.get("error") or ""
    if entry == "cli_ingest":
        from ragline.cli import app as cli

        run = CliRunner().invoke(
            cli, ["ingest", str(folder), "--tenant", tenant, "--acl", "staff", "--ref", commit, "--wait"]
        )
        return "" if run.exit_code == 0 else run.output
    if entry in ("reindex_source", "fetch_clone"):
        source |= {"path": str(folder)} if entry == "reindex_source" else {"url": str(folder)}
        use_settings(lifecycle_sources=json.dumps([source]))
        out = run_reindex([name])
        if out["job_id"]:
            wait_job(out["job_id"])
        return out["sources"][name].get("error") or ""
    assert entry == "push_event"
    use_settings(lifecycle_sources=json.dumps([source | {"path": str(folder)}]))
    ev = {"type": "push", "tenant": tenant, "source": name, "after": commit, "version": 1}
    out = app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=120)
    if out.get("job_id"):
        wait_job(out["job_id"])
    return (out.get("push") or {}).get("error") or out.get("error") or ""


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("form", FORMS)
def test_no_entry_point_reads_another_repository(celery_worker, voyage, use_settings, tmp_path, form, entry):
    tenant = f"acme-{form}-{entry}"  # the tenant fixture's name is cut at 60 characters
    globex, _ = globex_repository(tmp_path)
    folder, commit = escape(form, globex, tmp_path)
    error = attempt(entry, tenant, folder, commit, use_settings)
    assert leaked(tenant) == [], f"{form} via {entry}: globex's document stored in acme"
    if entry == "cli_ingest" and form == "parent_work_tree":
        # not a repository: ingested as the folder it is, its own files only
        assert error == "" and {r["doc_id"].split("/", 1)[1] for r in stored(tenant)} == {"readme.md"}
    else:
        assert "refused" in error or "not a git repository" in error, (form, entry, error)


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_plain_repository_is_read_through_every_entry_point(
    celery_worker, voyage, use_settings, tmp_path, entry
):
    """The control cell: acme's own repository at the same places is ingested, so the refusals
    above are about the escapes, not about the entry points."""
    tenant = f"acme-plain-{entry}"
    repo, commit = globex_repository(tmp_path)  # acme's own repository this time
    error = attempt(entry, tenant, repo, commit, use_settings)
    assert error == "", error
    assert any(SECRET in (r["text"] or "") and r["status"] == "ready" for r in stored(tenant)), stored(tenant)
