"""The code evaluation's corpora: a repository snapshot ingested into its own tenant through the real
git source (the path of ``ragline ingest REPO``), then the wait for the fill task to embed what was
stored before its vectors (which ``ragline demo`` waits for too). Called by ``ragline eval --code``
and by tests; prints nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def snapshot_ingest(
    include: list[str], exclude: list[str], timeout: float = 7200.0, wait_vectors: bool = True
):
    """The code evaluation's ingest: a snapshot into its own tenant through the real git source (the
    path of `ragline ingest REPO`), a bundle cloned once into the ragline home; waits for the job,
    then (``wait_vectors``) for the fill task to embed what was stored before its vectors."""
    import hashlib
    import time

    from ragline.ingest import git  # start-up: the ingest side loads only for a code evaluation
    from ragline.ingest.events import sync_git_source
    from ragline.ingest.roots import grant_roots
    from ragline.ingest.sources import SourceSpec
    from ragline.operations.eval_code import EVAL_GROUP, Snapshot, snapshot_tenant
    from ragline.shared.config.settings import get_settings
    from ragline.shared.worker import db, jobs
    from ragline.shared.worker.celery_app import app as celery_app

    def repository(snap: Snapshot) -> Path:
        src = snap.repo.expanduser().resolve()
        if src.is_dir():
            return src
        digest = hashlib.sha256(str(src).encode()).hexdigest()[:8]
        dest = get_settings().home_dir / "eval" / "repos" / f"{snap.name}-{digest}.git"
        if not (dest / "HEAD").is_file():  # a bundle does not change: cloned once
            git.sync_clone(str(src), dest)
        return dest

    def ingest(snap: Snapshot, config: str, source: str) -> dict:
        repo = repository(snap)
        commit = git.resolve_commit(repo, snap.ref)
        tenant = snapshot_tenant(snap, commit, config)
        grant_roots(tenant, [repo], granted_by="eval")
        spec = SourceSpec(
            name=source,
            kind="git",
            tenant=tenant,
            acl=[EVAL_GROUP],
            path=repo,
            ref=commit,
            include=include,
            exclude=exclude,
        )
        with db.connection() as conn:
            out = sync_git_source(
                conn, spec, commit, lambda n, p: celery_app.send_task(n, args=[p]), kind="ingest"
            )
        summary = {
            "tenant": tenant,
            "commit": commit,
            "outcome": out["outcome"],
            "skipped": out.get("skipped", 0),
        }
        job_id = out.get("job_id")
        if not job_id:  # ingested before (ignored_duplicate): wait for that job if it still runs
            with db.connection() as conn:
                rec = conn.execute(
                    "SELECT job_id FROM source_commits WHERE tenant = %s AND source = %s", (tenant, source)
                ).fetchone()
            if rec is None or rec["job_id"] is None:
                return summary
            job_id = str(rec["job_id"])
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            with db.connection() as conn:
                s = jobs.job_summary(conn, job_id)
            if s["state"] != "running":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"ingest job {job_id} still running after {timeout:.0f}s")
            time.sleep(1.0)
        # stored by this run: the lexical search answers from here on (None: stored before)
        summary["searchable_s"] = round(time.monotonic() - t0, 1) if out.get("job_id") else None
        if wait_vectors:  # the vector modes are measured on vectors: until the fill has embedded it
            wait_for_vectors(tenant, deadline)
            summary["embedded_s"] = round(time.monotonic() - t0, 1)
        if out.get("job_id"):  # a rerun reports no new work
            summary.update({k: s[k] for k in ("documents", "chunks", "embedded", "failed")})
        summary.update(state=s["state"], job_id=job_id, errors=s["errors"][:20])
        return summary

    return ingest


def wait_for_vectors(
    tenant: str, deadline: float, every_s: float = 2.0, on_pending: Callable[[int], None] | None = None
) -> None:
    """Until no row of ``tenant`` awaits its vector (the fill task), or ``TimeoutError`` at
    ``deadline`` (monotonic). ``on_pending(n)`` is called whenever the number of rows still awaiting
    their vectors changes (the demo's progress lines)."""
    import time

    from ragline.shared.worker import db, pending_vectors  # start-up: psycopg loads on use

    shown = None
    while True:
        with db.connection() as conn:
            n = pending_vectors.by_tenant(conn).get(tenant, 0)
        if not n:
            return
        if on_pending is not None and n != shown:
            on_pending(n)
            shown = n
        if time.monotonic() > deadline:
            raise TimeoutError(f"vectors of {tenant} still being filled")
        time.sleep(every_s)
