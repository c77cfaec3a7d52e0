"""Document events from a webhook or an upstream queue: upsert, delete, acl.

Every event carries the source's version (an integer, or an ISO 8601 time the contract turns into
Unix nanoseconds: the unit of the versions ``ragline ingest`` stores), so a duplicate or an
out-of-order event is harmless:
an upsert older than (or equal to) what is stored is ignored, a delete older than the stored
version is ignored, and a delete leaves a ``status = 'deleted'`` row (a tombstone) without
chunks whose version makes a late older upsert stale in ``ingest/store.py``.

Permissions (an ``acl`` event, the ``acl`` of an upsert) go through the ACL path at once, ordered
on the server's clock; the event's version only drops replays and older changes of the same
producer (``ingest/acl_sync.py``). An upsert's ingest then stores content only.

No embedder import here: events are handled by the control pool; an upsert only enqueues the
ingestion task on the ingest queue.

A ``push`` event names a configured git source: :func:`sync_git_source` (also behind
``ragline ingest REPO``) ingests what changed since the commit last indexed and prunes what was
deleted, renamed away or is now skipped (docs/code.md).
"""

from __future__ import annotations

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from ragline.ingest import git, store
from ragline.ingest.acl_sync import apply_acl_sync, apply_ingest_acls, clock
from ragline.ingest.enqueue import send_in_batches
from ragline.ingest.file_names import record_refused, split_named
from ragline.ingest.sources import GitSource, SourceSpec, SourceUnavailable, configured_sources, git_uri
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import AclSyncItem, EventResult, IngestEvent, IngestRequest
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT
from ragline.shared.sdk.sender import UNSIGNED
from ragline.shared.worker import jobs, replicas


def delete_document(
    conn: psycopg.Connection[DictRow], tenant: str, doc_id: str, version: int | None
) -> tuple[str, int]:
    """Remove a document's chunks and leave a tombstone. ``version`` None deletes unconditionally
    (a reindex prune: the source no longer lists the document). Returns (outcome, chunks deleted).

    A document ingested again after its deletion takes that ingest's permissions (unless a permission
    change reaches the tombstone first); the producers' ACL versions are kept to drop their replays."""
    with conn.transaction():
        store.lock_document(conn, tenant, doc_id)
        state = store.current_state(conn, tenant, doc_id)
        if version is not None and state is not None and state["version"] > version:
            return "ignored_stale", 0
        if (
            version is not None
            and state is not None
            and state["status"] == "deleted"
            and state["version"] == version
        ):
            return "ignored_duplicate", 0
        deleted = conn.execute(
            "DELETE FROM chunks WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
        ).rowcount
        keep_version = max(version or 0, state["version"] if state else 0)
        conn.execute(
            """
            INSERT INTO documents (tenant, doc_id, version, status, chunk_count)
            VALUES (%s, %s, %s, 'deleted', 0)
            ON CONFLICT (tenant, doc_id) DO UPDATE SET status = 'deleted', version = EXCLUDED.version,
                chunk_count = 0, content_hash = NULL, error = NULL, updated_at = now(),
                ingest_acl = NULL, acl_seq = 0
            """,
            (tenant, doc_id, keep_version),
        )
        jobs.resolve_errors(conn, tenant, doc_id)
    return "deleted", deleted


def upsert_decision(state: dict | None, version: int) -> str | None:
    """Why an upsert at ``version`` must be ignored, or None to ingest it (pure)."""
    if state is None:
        return None
    if state["version"] > version:
        return "ignored_stale"
    if state["version"] == version and state["status"] in ("ready", "deleted"):
        return "ignored_duplicate"  # the same version is stored, or was deleted at this version
    return None


def handle_event(
    conn: psycopg.Connection[DictRow], ev: IngestEvent, send_task, sender: str = UNSIGNED
) -> EventResult:
    """Apply one event. ``send_task(name, payload) -> task id`` enqueues the ingestion of an upsert;
    ``sender`` is who sent the event as the worker verified it: the producer of its ACL."""
    base = {"type": ev.type, "tenant": ev.tenant, "doc_id": ev.doc_id}
    if ev.type == "push":
        return handle_push(conn, ev, send_task)
    if ev.type == "delete":
        outcome, n = delete_document(conn, ev.tenant, ev.doc_id, ev.version)
        stored = store.current_state(conn, ev.tenant, ev.doc_id) if outcome != "deleted" else None
        return EventResult(
            **base, outcome=outcome, chunks_deleted=n, stored_version=stored["version"] if stored else None
        )
    if ev.type == "acl":
        out = apply_acl_sync(conn, [event_acl(ev)], path="event", sender=sender, default_producer="events")
        return EventResult(**base, outcome="acl_applied" if out.documents_updated else "ignored_stale")
    acl_outcome = None
    if ev.acl is not None:  # the permissions take effect now, whatever the content turns out to be
        out = apply_acl_sync(conn, [event_acl(ev)], path="event", sender=sender, default_producer="events")
        acl_outcome = "applied" if out.documents_updated else "ignored_stale"
    state = store.current_state(conn, ev.tenant, ev.doc_id)
    reason = upsert_decision(state, ev.version)
    if reason:  # the producer sees the version it would have to exceed
        return EventResult(**base, outcome=reason, acl_outcome=acl_outcome, stored_version=state["version"])
    # an upsert without 'acl' asks for what the last ingest asked for (new documents get none:
    # invisible); the request's clock is now, so a permission change applied later wins over it
    acl = (
        ev.acl
        if ev.acl is not None
        else list(state["ingest_acl"] if state["ingest_acl"] is not None else state["acl"])
        if state
        else []
    )
    req = IngestRequest(
        tenant=ev.tenant,
        doc_id=ev.doc_id,
        uri=ev.uri,
        path=ev.path or ev.doc_id,
        layer=ev.layer,
        fmt=ev.fmt,
        acl=acl,
        version=ev.version,
        acl_seq=clock(conn),
    )
    task_id = send_task(TASK_INGEST_DOCUMENT, req.model_dump(exclude_none=True))
    return EventResult(**base, outcome="enqueued", task_id=task_id, acl_outcome=acl_outcome)


def event_acl(ev: IngestEvent) -> AclSyncItem:
    """The permission change an event carries, named by its producer (default ``events``, within the
    event's sender: ``acl_sync.producer_key``) at its version."""
    # built without validation: an upsert's version may be 0, which a sync item does not accept
    return AclSyncItem.model_construct(
        tenant=ev.tenant,
        doc_id=ev.doc_id,
        path_prefix=None,
        acl=list(ev.acl or []),
        version=ev.version,
        ts=ev.ts,
        producer=ev.producer,
    )


# --- git sources: push events and `ragline ingest REPO` ------------------------------------------


def handle_push(conn: psycopg.Connection[DictRow], ev: IngestEvent, send_task) -> EventResult:
    """A push to a configured git source of the event's tenant; anything else is a ``ValueError``."""
    spec = next(
        (s for s in configured_sources(get_settings().lifecycle.sources) if s.name == ev.source), None
    )
    if spec is None or spec.kind != "git" or spec.tenant != ev.tenant:
        raise ValueError(f"push: tenant {ev.tenant!r} has no git source named {ev.source!r}")
    try:
        out = sync_git_source(
            conn, spec, ev.after or spec.ref, send_task, before=ev.before, event_version=ev.version
        )
    except (SourceUnavailable, git.GitError) as exc:  # nothing pruned: the producer is told why
        out = {"outcome": "unavailable", "source": spec.name, "error": str(exc)}
    return EventResult(
        type="push",
        tenant=ev.tenant,
        outcome=out.pop("outcome"),
        job_id=out.get("job_id"),
        push=out,
    )


def _stored(conn: psycopg.Connection[DictRow], tenant: str, source: str) -> dict[str, dict]:
    rows = conn.execute(
        "SELECT doc_id, status, version, metadata->>'source_fp' AS fp FROM documents"
        " WHERE tenant = %s AND metadata->>'source' = %s",
        (tenant, source),
    ).fetchall()
    return {r["doc_id"]: r for r in rows}


def apply_source_acl(
    conn: psycopg.Connection[DictRow], spec: SourceSpec, doc_ids: list[str], path: str
) -> int:
    """The source's ``acl`` for stored documents of it that are not ingested again (unchanged, or at
    a commit already indexed), through the ACL-only path: no embedding, and decided like the ACL of
    every re-ingested document (:func:`~ragline.ingest.acl_sync.ingest_acl_decision`), so listing
    again with the same ``acl`` never undoes a later ``acl sync``. Returns how many changed."""
    outcomes = apply_ingest_acls(conn, [(spec.tenant, d, list(spec.acl), None) for d in doc_ids], path=path)
    return sum(1 for o in outcomes.values() if o == "updated")


def _selected(src: GitSource, repo, commit: str, entries, prefix: str) -> tuple[list, list, list]:
    """The files of a commit that are ingested (the source's rules, doc-id length, safe names): kept,
    skipped with a reason, refused names."""
    kept, skipped = src.select(repo, commit, list(entries))
    too_long = [e for e in kept if len(prefix + e.path) > 512]
    skipped += [(e.path, "path longer than a doc id may be") for e in too_long]
    kept = [e for e in kept if e not in too_long]
    kept, refused = split_named(kept, lambda e: (prefix + e.path, prefix + e.path))
    return kept, skipped, refused


def _not_stored(kept: list, stored: dict, prefix: str) -> list:
    """The files not stored ready at their blob: what an ingest of the commit still has to do."""
    return [
        e
        for e in kept
        if (s := stored.get(prefix + e.path)) is None or s["status"] != "ready" or s["fp"] != e.blob
    ]


def _changed(changes: list[git.Change], tracked: set[str]) -> tuple[set[str], set[str], dict[str, int]]:
    """A diff's paths to select again and to prune, and its counts by kind. A change of a
    ``.gitattributes`` file selects every tracked file: the files it vendors may be others."""
    touched = {c.path for c in changes if c.status != "D"}
    gone = {c.path for c in changes if c.status == "D"} | {c.old_path for c in changes if c.status == "R"}
    counts = dict.fromkeys(("added", "modified", "renamed", "deleted"), 0)
    for c in changes:
        counts[{"A": "added", "C": "added", "D": "deleted", "R": "renamed"}.get(c.status, "modified")] += 1
    if git.has_attributes_file(p for c in changes for p in (c.path, c.old_path) if p):
        touched |= tracked
    return touched, {p for p in gone if p is not None}, counts


def sync_git_source(
    conn: psycopg.Connection[DictRow],
    spec: SourceSpec,
    after: str,
    send_task,
    before: str | None = None,
    event_version: int | None = None,
    kind: str = "push",
) -> dict:
    """Bring a git source's documents to the commit ``after`` names, and their permissions to the
    source's ``acl``; returns the summary (:func:`_sync_git_source`). Done once the query pool's
    replicas serve the permission changes."""
    summary = _sync_git_source(conn, spec, after, send_task, before, event_version, kind)
    if summary.get("acl_updated"):
        replicas.wait_for_replay(conn, what=f"source {spec.name}'s permission changes")
    return summary


def _sync_git_source(
    conn: psycopg.Connection[DictRow],
    spec: SourceSpec,
    after: str,
    send_task,
    before: str | None,
    event_version: int | None,
    kind: str,
) -> dict:
    """Bring a git source's documents to the commit ``after`` names; returns the summary.

    The diff starts at the commit recorded for the source (``source_commits``), else at ``before``;
    without either (a first ingest, or a recorded commit a force-push removed) every tracked file is
    listed and the source's documents no longer listed are pruned. Added, modified and renamed-to
    files are enqueued in batch tasks of one job (a file whose stored blob is the same is not); deleted
    files, renamed-from paths and files the skip rules now leave out are pruned at once. A commit
    that changes a ``.gitattributes`` file selects every file again: the files it vendors may be
    others than before. A sync under another selection than the recorded one (``GitSource.selection``:
    globs, skip rules, formats) lists every file too. Documents
    get a version above every stored one of the source, so these ingests and prunes win over any
    earlier one still in flight. ``event_version`` (a push event's) must exceed the last push's, so a
    replayed or out-of-order push changes nothing; None (``ragline ingest``) always applies.
    The source's ``acl`` reaches every stored document of the commit at once (:func:`apply_source_acl`),
    also when the commit is the one already indexed (``ignored_duplicate``): a re-ingest with another
    ``--acl`` is a permission change even when no file changed.
    The repository is fetched (clone URLs) and read before the source's lock is taken.
    """
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise RuntimeError("sync_git_source needs an idle connection: it commits its own transaction")
    src = GitSource(spec)
    repo = src.sync()
    commit = git.resolve_commit(repo, after, src.timeout)
    commit_ns = git.commit_time_ns(repo, commit, src.timeout)
    entries = {e.path: e for e in git.list_tree(repo, commit, src.timeout)}
    prefix = f"{spec.name}/"
    summary: dict = {"source": spec.name, "commit": commit, "job_id": None}
    acl_path = "event" if kind == "push" else "ingest"  # the entry points of rag_acl_changes_total
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('ragline.git_source'), hashtext(%s))",
            (f"{spec.tenant}/{spec.name}",),
        )
        rec = conn.execute(
            "SELECT commit_id, version, event_version, job_id, selection FROM source_commits"
            " WHERE tenant = %s AND source = %s",
            (spec.tenant, spec.name),
        ).fetchone()
        selection = src.selection()
        reselect = rec is not None and rec["selection"] != selection
        resume = False
        if rec and rec["commit_id"] == commit:
            if not reselect:
                stored = _stored(conn, spec.tenant, spec.name)
                missing = _not_stored(
                    _selected(src, repo, commit, entries.values(), prefix)[0], stored, prefix
                )
                if not missing or jobs.job_state(conn, rec["job_id"]) in jobs.ACTIVE_STATES:
                    ready = [d for d, r in stored.items() if r["status"] == "ready"]
                    return {
                        **summary,
                        "outcome": "ignored_duplicate",
                        "acl_updated": apply_source_acl(conn, spec, ready, acl_path),
                    }
            # the commit's job ended (cancelled, failed, a worker lost) before every file was stored,
            # or the selection changed: list the commit again, whatever the push's version
            resume = True
        if not resume and rec and event_version is not None and event_version <= rec["event_version"]:
            return {**summary, "outcome": "ignored_stale", "recorded_commit": rec["commit_id"]}
        # another selection than the recorded one: the diff says nothing about the files it now
        # admits or leaves out, so every tracked file is selected again (and the unchanged skipped)
        base = None if resume or reselect else rec["commit_id"] if rec else before
        if base is not None and (git.ZERO_COMMIT.fullmatch(base) or not git.commit_exists(repo, base)):
            base = None
        stored = _stored(conn, spec.tenant, spec.name)
        if base is None:
            touched = set(entries)
            gone = {d.removeprefix(prefix) for d, r in stored.items() if r["status"] != "deleted"} - touched
            counts = {"added": len(touched), "modified": 0, "renamed": 0, "deleted": 0}
        else:
            touched, gone, counts = _changed(git.diff(repo, base, commit, src.timeout), set(entries))
        kept, skipped, refused = _selected(
            src, repo, commit, [entries[p] for p in sorted(touched) if p in entries], prefix
        )
        gone |= touched - {e.path for e in kept}  # now skipped: pruned if it was indexed
        todo = _not_stored(kept, stored, prefix)
        # every file of the commit still indexed, the untouched ones and the changed ones (their old
        # content must not stay readable by the old groups until their ingest runs)
        ready = [
            prefix + p
            for p in sorted(entries)
            if p not in gone and (stored.get(prefix + p) or {}).get("status") == "ready"
        ]
        acl_updated = apply_source_acl(conn, spec, ready, acl_path)
        version = max(
            event_version or 0,
            commit_ns,
            rec["version"] + 1 if rec else 0,
            max((r["version"] for r in stored.values()), default=0) + 1,
        )
        job_id = jobs.create_job(
            conn,
            kind,
            spec.tenant,
            [prefix + e.path for e in todo],
            {"source": spec.name, "commit": commit, "base": base},
        )
        record_refused(conn, job_id, spec.tenant, refused)
        pruned = 0
        for path in sorted(gone):
            s = stored.get(prefix + path)
            if s is not None and s["status"] != "deleted":
                outcome, _ = delete_document(conn, spec.tenant, prefix + path, version)
                pruned += outcome == "deleted"
        conn.execute(
            """
            INSERT INTO source_commits (tenant, source, repo, commit_id, version, event_version, job_id, selection)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant, source) DO UPDATE SET repo = EXCLUDED.repo, commit_id = EXCLUDED.commit_id,
                version = EXCLUDED.version, job_id = EXCLUDED.job_id, selection = EXCLUDED.selection,
                updated_at = now(),
                event_version = greatest(source_commits.event_version, EXCLUDED.event_version)
            """,
            (spec.tenant, spec.name, str(repo.root), commit, version, event_version or 0, job_id, selection),
        )
    payloads = [
        IngestRequest(
            tenant=spec.tenant,
            doc_id=prefix + e.path,
            uri=git_uri(repo.root, commit, e.path),
            path=prefix + e.path,
            layer=spec.layer,
            acl=list(spec.acl),
            version=version,
            job_id=job_id,
            metadata={
                "source": spec.name,
                "source_fp": e.blob,
                "source_root": str(repo.root),
                "repo_path": e.path,
                "commit": commit,
            },
        ).model_dump(exclude_none=True)
        for e in todo
    ]
    # code is many texts per byte: batches by RAGLINE_CODE_BATCH_BYTES stay inside the task time limit
    send_in_batches(payloads, [e.size for e in todo], send_task, batch_bytes=get_settings().code.batch_bytes)
    summary.update(
        outcome="synced",
        job_id=job_id,
        base=base,
        reselected=reselect,
        **counts,
        skipped=len(skipped),
        skipped_files=[{"path": p, "reason": r} for p, r in skipped[:100]],
        refused_names=len(refused),
        enqueued=len(todo),
        unchanged=len(kept) - len(todo),
        pruned=pruned,
        acl_updated=acl_updated,
        version=version,
    )
    jobs.finish_if_done(conn, job_id, {k: v for k, v in summary.items() if k != "skipped_files"})
    conn.commit()
    return summary
