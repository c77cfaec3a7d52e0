"""``git:`` addresses that reach another tenant's repository, sent as upsert events and read by a real
prefork ingest pool (started like ``ragline up``). Tenant acme holds granted folders; tenant globex
a repository with a board-only document. The two escapes the review reproduced (acme's folder inside
globex's work tree, a ``.git`` gitdir file in acme's folder) and the other forms that lead git to
another repository (a symlinked ``.git``, a worktree's ``.git`` file, alternates, a commondir) must
each end as a clear per-document error with nothing of globex stored, the worker alive, and acme's
own repository still ingested. Results: the ``attacks_git`` section of ``bench/results/chaos.json``.
"""

from __future__ import annotations

import pytest

from ragline.ingest.events import handle_event
from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.contracts import IngestEvent
from tests.chaos import harness
from tests.integration.test_git_escapes import FORMS, escape, globex_repository, leaked, stored
from tests.loopback import LoopbackServer
from tests.pools import start_pool, wait_ready

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

REPRODUCED = {
    "parent_work_tree": "a granted folder inside another tenant's work tree",
    "gitdir_file": "a .git gitdir file in a granted folder",
}


def test_git_addresses_outside_the_tenants_repositories(stack, conn, tmp_path):
    from ragline.shared.worker.celery_app import app

    tenant = "acme-chaos-git"
    globex, _ = globex_repository(tmp_path / "globex-home")
    folders = {form: escape(form, globex, tmp_path) for form in FORMS}  # form -> (folder, commit)
    own, own_commit = globex_repository(tmp_path / "acme-own")  # acme's own repository: read as before
    grant_roots(tenant, [*(f for f, _ in folders.values()), own])

    with LoopbackServer() as voyage:
        env = {
            "RAGLINE_EMBED_PROVIDER": "voyage",
            "RAGLINE_PROVIDERS_VOYAGE_BASE_URL": voyage.url,
            "RAGLINE_PROVIDERS_VOYAGE_API_KEY": "pa-git-attacks",
            "RAGLINE_EMBED_MODEL": "voyage-git-attacks",
        }
        pool = start_pool(stack, "ingest", concurrency=1, env=env)
        try:
            wait_ready(app, pool)

            def send(name: str, payload: dict) -> str:
                return app.send_task(name, args=[payload], queue=pool.queue).id

            def upsert(doc_id: str, folder, at: str) -> dict:
                ev = IngestEvent(
                    type="upsert",
                    tenant=tenant,
                    doc_id=doc_id,
                    uri=f"git:{folder}@{at}:board.md",
                    acl=["staff"],
                    version=1,
                )
                out = handle_event(conn, ev, send)  # the control pool's handling, in this process
                conn.commit()
                assert out.outcome == "enqueued", out
                return app.AsyncResult(out.task_id).get(timeout=300)

            results = {form: upsert(f"attack-{form}", *where) for form, where in folders.items()}
            good = upsert("own", own, own_commit)
            alive = pool.proc.poll() is None
        finally:
            pool.stop()

    rows = []
    for form, res in results.items():
        assert res["status"] == "failed", (form, res)
        assert "refused" in res["error"] or "not a git repository" in res["error"], (form, res)
        rows.append(
            {
                "attack": REPRODUCED.get(form, form.replace("_", " "))
                + (" (reproduced)" if form in REPRODUCED else ""),
                "status": res["status"],
                "error": res["error"],
            }
        )
    leaks = [d for d in leaked(tenant) if d != "own"]
    assert leaks == [], f"globex's document stored in acme: {leaks}"
    assert alive and good["status"] == "stored", good
    assert [r["status"] for r in stored(tenant) if r["doc_id"] == "own"] == ["ready"]
    rows.append({"attack": "globex documents stored in acme", "status": str(len(leaks)), "error": None})
    rows.append(
        {
            "attack": "worker alive, acme's own repository stored after all",
            "status": str(alive),
            "error": None,
        }
    )
    harness.record("attacks_git", rows)
