"""The ACL of a re-ingested document, through every entry point.

Two documents (ALPHA and BETA) are ingested with one ACL, then ingested again through the same
entry point with a narrower or a wider one, with their content unchanged or ALPHA's changed. After
the second ingest every document, and every chunk of it, carries the new ACL, and the embedder saw
only ALPHA's new text (nothing at all when no content changed): a permission change alone goes
through the ACL-only path. ALPHA's new edition may also be broken (it fails to parse): its stored
version keeps serving (a git sync skips a binary file and prunes it) and must carry the new ACL too.
The embedding cache is emptied between the two ingests, so a document run through the pipeline
again would show up at the loopback embedder.

Entry points: ``ragline ingest FILE...``, ``ragline ingest FOLDER``, a URL-list source (a loopback
site) at reindex, ``ragline ingest REPO``, a configured git source at reindex, a push event, and
upsert events with ``git:`` addresses.
"""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.names import TASK_INGEST_EVENT
from ragline.shared.worker import db
from tests.gitrepo import WHEN, git
from tests.integration.lifecycle_helpers import MarkdownSite, acl_of, wait_job
from tests.loopback import loopback_voyage

MODEL = "voyage-acl-matrix"
ENTRIES = ("file", "folder", "url", "git_cli", "git_reindex", "push_event", "upsert_event")
ACLS = {"narrow": (["exec", "staff"], ["exec"]), "widen": (["exec"], ["exec", "staff"])}


#: an edition that fails to parse (a NUL byte in a text document): the stored version keeps serving
BROKEN = 0


def text(name: str, edition: int) -> str:
    if edition == BROKEN:
        return f"# {name}\n\nРегламент\x00 {name}.\n"
    return f"# {name}\n\nРегламент {name} редакция {edition}: порядок согласования заявок.\n"


class _Site(MarkdownSite):
    pages: dict[str, tuple[str, bytes]] = {}


@pytest.fixture()
def voyage(use_settings):
    with loopback_voyage(use_settings, embed_model=MODEL, ingest_fetch_allow_private="true") as srv:
        yield srv


@pytest.fixture()
def site():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


class Entry:
    """One entry point: ``write`` puts the documents' current editions where it reads them,
    ``ingest`` ingests them with an ACL and waits until every document is done."""

    def __init__(self, kind: str, tenant: str, base: Path, site: str, use_settings) -> None:
        self.kind, self.tenant, self.base, self.site, self.use_settings = (
            kind,
            tenant,
            base,
            site,
            use_settings,
        )
        self.folder = base / "kb"
        self.folder.mkdir()
        self.round = 0  # commits (their times)
        self.sent = 0  # ingests (event versions)
        if kind in ("git_cli", "git_reindex", "push_event", "upsert_event"):
            self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return git(self.folder, *args, when=WHEN + self.round)

    def write(self, editions: dict[str, int]) -> None:
        self.round += 1
        for name, edition in editions.items():
            (self.folder / f"{name.lower()}.md").write_text(text(name, edition), encoding="utf-8")
        _Site.pages = {
            f"/{name.lower()}.md": (f'"{name}-{edition}"', text(name, edition).encode())
            for name, edition in editions.items()
        }
        if (self.folder / ".git").is_dir() and self.git("status", "--porcelain"):
            self.git("add", "-A")
            self.git("commit", "-q", "-m", f"round {self.round}")

    def configure(self, acl: list[str]) -> str:
        name = "matrix-src"
        source: dict = {"name": name, "tenant": self.tenant, "acl": acl}
        if self.kind == "url":
            source |= {"kind": "urls", "urls": [f"{self.site}/alpha.md", f"{self.site}/beta.md"]}
        else:
            source |= {"kind": "git", "path": str(self.folder)}
        self.use_settings(lifecycle_sources=json.dumps([source]))
        return name

    def ingest(self, acl: list[str], broken: bool = False) -> None:
        from ragline.cli import app as cli
        from ragline.ingest.control.tasks import run_reindex
        from ragline.shared.worker.celery_app import app

        self.sent += 1
        if self.kind in ("file", "folder", "git_cli"):
            paths = (
                [str(self.folder / "alpha.md"), str(self.folder / "beta.md")]
                if self.kind == "file"
                else [str(self.folder)]
            )
            run = CliRunner().invoke(
                cli, ["ingest", *paths, "--tenant", self.tenant, "--acl", ",".join(acl), "--wait"]
            )
            # a document that failed makes `--wait` exit 1 (a broken file); a skipped one does not
            assert run.exit_code in ((0, 1) if broken else (0,)), run.output
        elif self.kind in ("url", "git_reindex"):
            out = run_reindex([self.configure(acl)])
            if out["job_id"]:
                wait_job(out["job_id"])
        elif self.kind == "push_event":
            ev = {"type": "push", "tenant": self.tenant, "source": self.configure(acl), "after": "main"}
            out = app.send_task(TASK_INGEST_EVENT, args=[{**ev, "version": self.sent}]).get(timeout=120)
            assert out["outcome"] in ("synced", "ignored_duplicate"), out
            if out.get("job_id"):
                wait_job(out["job_id"])
        else:
            grant_roots(self.tenant, [self.folder])  # the operator's grant of the repository
            commit = self.git("rev-parse", "HEAD")
            for name in ("alpha.md", "beta.md"):
                ev = {
                    "type": "upsert",
                    "tenant": self.tenant,
                    "doc_id": name,
                    "uri": f"git:{self.folder}@{commit}:{name}",
                    "acl": acl,
                    "version": self.sent,
                }
                out = app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=120)
                assert out["outcome"] == "enqueued", out
                app.AsyncResult(out["task_id"]).get(timeout=120)


def documents(tenant: str) -> dict[str, str]:
    """doc id -> the name of the document (ALPHA or BETA) of every document ready in ``tenant``."""
    with db.connection() as c:
        rows = c.execute(
            "SELECT doc_id FROM documents WHERE tenant = %s AND status = 'ready'", (tenant,)
        ).fetchall()
    return {r["doc_id"]: "ALPHA" if r["doc_id"].endswith("alpha.md") else "BETA" for r in rows}


CONTENTS = ("unchanged", "changed", "broken")


def reingest_cell(
    conn, voyage, use_settings, base: Path, site: str, entry: str, content: str, direction: str
) -> dict:
    """One cell of the matrix, asserted; returns what it measured (the chaos suite records it)."""
    tenant = f"m-{entry}-{content}-{direction}"  # the tenant fixture's name is cut at 60 characters
    before, after = ACLS[direction]
    way = Entry(entry, tenant, base, site, use_settings)
    way.write({"ALPHA": 1, "BETA": 1})
    way.ingest(before)
    docs = documents(tenant)
    assert sorted(docs.values()) == ["ALPHA", "BETA"], docs
    assert all(acl_of(conn, tenant, d) == (before, {tuple(before)}) for d in docs)

    conn.execute("DELETE FROM embedding_cache WHERE model = %s", (MODEL,))
    conn.commit()
    voyage.reset_stats()
    if content != "unchanged":
        way.write({"ALPHA": BROKEN if content == "broken" else 2, "BETA": 1})
    way.ingest(after, broken=content == "broken")

    now = documents(tenant)
    if content == "broken" and entry in ("git_cli", "git_reindex", "push_event"):
        assert sorted(now.values()) == ["BETA"]  # a binary file is skipped, its document pruned
    else:
        assert now == docs  # the same documents, none lost or added
    acls = {d: acl_of(conn, tenant, d) for d in now}
    assert acls == {d: (after, {tuple(after)}) for d in now}
    embedded = [t for body in voyage.stats.bodies if "input" in body for t in body["input"]]
    if content != "changed":
        assert voyage.stats.requests == 0, embedded  # a permission change alone embeds nothing
    else:
        assert embedded and all("ALPHA" in t and "редакция 2" in t for t in embedded), embedded
    conn.commit()
    return {
        "entry": entry,
        "content": content,
        "direction": direction,
        "documents": len(now),
        "on_new_acl": sum(1 for a in acls.values() if a == (after, {tuple(after)})),
        "texts_embedded": len(embedded),
    }


@pytest.mark.parametrize("direction", sorted(ACLS))
@pytest.mark.parametrize("content", CONTENTS)
@pytest.mark.parametrize("entry", ENTRIES)
def test_reingest_gives_every_document_the_new_acl_without_reembedding(
    celery_worker, voyage, use_settings, conn, tmp_path, site, entry, content, direction
):
    reingest_cell(conn, voyage, use_settings, tmp_path, site, entry, content, direction)
