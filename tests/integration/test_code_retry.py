"""`ragline retry-failed` on a git document that failed before it was ever stored: the retry
stores it under its source's prefix, owned by its source, like the sync that first sent it."""

from __future__ import annotations

from ragline.shared.worker import db
from tests.gitrepo import commit, git, git_sources
from tests.integration.lifecycle_helpers import wait_job
from tests.integration.test_code_structure import loopback  # noqa: F401  (fixture)


def test_a_never_stored_git_document_keeps_its_source_prefix(
    celery_worker,
    use_settings,
    loopback,  # noqa: F811
    tenant,
    tmp_path,
):
    from ragline.ingest.retry import enqueue_retries
    from ragline.ingest.sources import git_uri
    from ragline.ingest.store import mark_failed

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    head = commit(repo, {"pkg/hooks.py": "def register_hook(event, hook):\n    return hook\n"}, 1_700_000_000)
    use_settings(
        embed_provider="voyage",
        providers_voyage_base_url=loopback.url + "/v1",
        providers_voyage_api_key="test-key",
        embed_model=f"voyage-retry-{tenant}"[:60],
        lifecycle_sources=git_sources(tenant, "r", repo, ["dev"]),
    )
    # the first attempt failed before anything was stored: what the pipeline records then is a
    # failed document row without path or metadata, and the error
    with db.connection() as c:
        uri = git_uri(repo, head, "pkg/hooks.py")
        mark_failed(c, tenant, "r/pkg/hooks.py", uri, "embed", "embedder: ReadTimeout")
        c.commit()
    out = enqueue_retries(tenant, [])
    assert out["requeued"] == 1 and out["skipped"] == [], out
    assert wait_job(out["job_id"])["failed"] == 0
    with db.connection() as c:
        doc = c.execute(
            "SELECT path, layer, acl, status, metadata FROM documents WHERE tenant = %s AND doc_id = 'r/pkg/hooks.py'",
            (tenant,),
        ).fetchone()
        paths = {r["path"] for r in c.execute("SELECT path FROM chunks WHERE tenant = %s", (tenant,))}
        open_errors = c.execute(
            "SELECT count(*) AS n FROM document_errors WHERE tenant = %s AND NOT resolved", (tenant,)
        ).fetchone()["n"]
    assert doc["status"] == "ready" and doc["path"] == "r/pkg/hooks.py" and doc["acl"] == ["dev"]
    assert doc["layer"] == "C0_SOURCE_CHUNKS"
    assert paths == {"r/pkg/hooks.py"}
    meta = doc["metadata"]
    assert (meta["source"], meta["repo_path"], meta["commit"]) == ("r", "pkg/hooks.py", head)
    assert open_errors == 0
