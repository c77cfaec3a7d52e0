"""Full reindex: list every configured source, enqueue new and changed documents, prune vanished ones.

The comparison is cheap: a source lists ``(doc_id, version, fingerprint)`` and the database keeps
the fingerprint of the last ingest in ``documents.metadata->>'source_fp'``; an unchanged document
is not even enqueued, so a reindex with nothing changed sends no text to the embedder. One reindex
runs at a time (advisory lock); the scheduled tick and ``ragline reindex`` share this code. A source
whose ``acl`` changed gives it to its documents through the ACL-only path (:func:`unchanged_source_acl`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg.rows import DictRow

from ragline.ingest import exclusions
from ragline.ingest.enqueue import send_in_batches
from ragline.ingest.events import apply_source_acl, delete_document
from ragline.ingest.file_names import record_refused, split_named
from ragline.ingest.load import read_local, size_limit
from ragline.ingest.parse import SUPPORTED, ParseError
from ragline.ingest.roots import resolve
from ragline.ingest.sources import (
    GitSource,
    Listed,
    Listing,
    SourceSpec,
    SourceUnavailable,
    build_source,
    configured_sources,
    parse_git_uri,
)
from ragline.ingest.vanished import settle_vanished
from ragline.shared.sdk.contracts import IngestRequest
from ragline.shared.worker import db, jobs, replicas

log = logging.getLogger(__name__)

LOCK_KEY = "ragline.reindex"
TOTALS = (
    "listed",
    "new",
    "changed",
    "unchanged",
    "touched",
    "pruned",
    "unavailable",
    "enqueued",
    "acl_updated",
    "excluded",
)


@dataclass
class Plan:
    enqueue: list[tuple[Listed, int, str]] = field(default_factory=list)  # (item, version, 'new'|'changed')
    unchanged: int = 0
    vanished: list[str] = field(default_factory=list)

    def count(self, reason: str) -> int:
        return sum(1 for _, _, r in self.enqueue if r == reason)


def plan(listing: Listing, stored: dict[str, dict], source_name: str) -> Plan:
    """What to do with one source (pure). ``stored`` maps doc_id to {version, fp, status, source}.

    A changed document gets a version above the stored one even when the source's own version went
    backwards (a file restored from a backup keeps its old mtime), so the store does not call it stale.
    """
    out = Plan()
    seen = set()
    for item in listing.items:
        seen.add(item.doc_id)
        s = stored.get(item.doc_id)
        if s is None or (s["status"] != "deleted" and s.get("source") not in (None, source_name)):
            # another source's document (one URL in two sources): the ingest refuses it with an error
            out.enqueue.append((item, item.version, "new"))
            continue
        if s["status"] == "ready" and item.fingerprint and s.get("fp") == item.fingerprint:
            out.unchanged += 1
            continue
        reason = "new" if s["status"] in ("deleted", "pending") else "changed"
        out.enqueue.append((item, max(item.version, int(s["version"]) + 1), reason))
    for doc_id, s in stored.items():
        if (
            s.get("source") == source_name
            and s["status"] != "deleted"
            and doc_id not in seen
            and doc_id not in listing.unavailable
        ):
            out.vanished.append(doc_id)
    out.vanished.sort()
    return out


def stored_state(
    conn: psycopg.Connection[DictRow], tenant: str, source_name: str, doc_ids: list[str]
) -> dict[str, dict]:
    rows = conn.execute(
        """
        SELECT doc_id, version, status, content_hash, metadata->>'source_fp' AS fp, metadata->>'source' AS source
        FROM documents
        WHERE tenant = %s AND (metadata->>'source' = %s OR doc_id = ANY(%s))
        """,
        (tenant, source_name, doc_ids),
    ).fetchall()
    return {r["doc_id"]: dict(r) for r in rows}


def tie_break(conn: psycopg.Connection[DictRow], spec: SourceSpec, p: Plan, stored: dict[str, dict]) -> int:
    """Folder files whose fingerprint moved but whose bytes did not (a ``touch``, a copy that kept the
    content): the content hash decides, the stored fingerprint is refreshed and nothing is enqueued.
    Reading the file is still far cheaper than parsing and embedding it. Returns how many were touched."""
    if spec.kind != "folder":
        return 0
    keep, touched = [], []
    root = [resolve(spec.path)]  # type: ignore[arg-type]
    for item, version, reason in p.enqueue:
        s = stored.get(item.doc_id)
        if reason == "changed" and s and s["status"] == "ready" and s.get("content_hash"):
            # read like the ingest reads: inside the source's folder, a regular file, bounded
            # (a symlink to /dev/zero in the folder must not hang the control pool)
            fmt = SUPPORTED.get(Path(item.uri).suffix.lower(), "text")
            try:
                digest = hashlib.sha256(read_local(Path(item.uri), root, size_limit(fmt))).hexdigest()
            except (OSError, ParseError):
                digest = None  # enqueued: the ingest records what is wrong with the file
            if digest == s["content_hash"]:
                touched.append((item, version))
                continue
        keep.append((item, version, reason))
    for item, version in touched:
        conn.execute(
            "UPDATE documents SET version = greatest(version, %s),"
            " metadata = metadata || jsonb_build_object('source_fp', %s::text)"
            " WHERE tenant = %s AND doc_id = %s AND content_hash IS NOT DISTINCT FROM %s",
            (version, item.fingerprint, spec.tenant, item.doc_id, stored[item.doc_id]["content_hash"]),
        )
    p.enqueue = keep
    p.unchanged += len(touched)
    return len(touched)


def unchanged_source_acl(
    conn: psycopg.Connection[DictRow], spec: SourceSpec, listing: Listing, stored: dict[str, dict]
) -> int:
    """The source's ``acl`` for its stored documents, changed or not (an unchanged one is never
    enqueued), through :func:`ragline.ingest.events.apply_source_acl`, the ACL-only path a git sync
    takes too. Returns how many documents' permissions changed."""
    ours = [i.doc_id for i in listing.items if (stored.get(i.doc_id) or {}).get("source") == spec.name]
    return apply_source_acl(conn, spec, ours, "reindex")


def request_for(spec: SourceSpec, item: Listed, version: int, job_id: str | None) -> IngestRequest:
    metadata: dict = {"source": spec.name, "source_fp": item.fingerprint}
    if spec.kind == "git":  # what a push's ingest records too (ingest/events.py)
        repo, commit, rel = parse_git_uri(item.uri)
        metadata.update(source_root=str(repo), repo_path=rel, commit=commit)
    return IngestRequest(
        tenant=spec.tenant,
        doc_id=item.doc_id,
        uri=item.uri,
        path=item.path,
        layer=spec.layer,
        acl=list(spec.acl),
        version=version,
        job_id=job_id,
        metadata=metadata,
    )


def namespaced(spec: SourceSpec, listing: Listing) -> Listing:
    """Folder and git doc ids are prefixed with the source name, so two folders (or repositories) with
    the same file names in one tenant never overwrite (or prune) each other's documents."""
    if spec.kind not in ("folder", "git"):
        return listing
    items = [
        Listed(f"{spec.name}/{i.doc_id}", i.version, i.fingerprint, i.uri, f"{spec.name}/{i.path}", i.size)
        for i in listing.items
    ]
    return Listing(
        items,
        {f"{spec.name}/{d}" for d in listing.unavailable},
        listing.errors,
        listing.commit,
        listing.skipped,
    )


def record_commit(
    conn: psycopg.Connection[DictRow], spec: SourceSpec, commit: str, p: Plan, job_id: str
) -> None:
    """A git source's listed commit, as a push records it (``source_commits``): the next push diffs
    from it instead of listing the whole tree. Under the source's lock, like a push; the version only
    grows, so a push's later versions stay above every document written here."""
    src = GitSource(spec)
    repo = str(src.repo_dir())
    version = max((v for _, v, _ in p.enqueue), default=0)
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('ragline.git_source'), hashtext(%s))",
            (f"{spec.tenant}/{spec.name}",),
        )
        conn.execute(
            """
            INSERT INTO source_commits (tenant, source, repo, commit_id, version, job_id, selection)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant, source) DO UPDATE SET repo = EXCLUDED.repo, commit_id = EXCLUDED.commit_id,
                version = greatest(source_commits.version, EXCLUDED.version), job_id = EXCLUDED.job_id,
                selection = EXCLUDED.selection, updated_at = now()
            """,
            (spec.tenant, spec.name, repo, commit, version, job_id, src.selection()),
        )


def keep_out(conn: psycopg.Connection[DictRow], spec: SourceSpec, listing: Listing, p: Plan) -> int:
    """What a listing settles beside its plan: the excluded documents leave the plan (the ingest
    would refuse them, ``ingest/exclusions.py``), and a folder's errors of files that are gone are
    resolved (``ingest/vanished.py``; a prune covers the stored documents). Returns how many were
    excluded."""
    if spec.kind == "folder":
        settle_vanished(conn, spec.tenant, spec.name, {i.doc_id for i in listing.items})
    kept_out = exclusions.excluded(conn, spec.tenant, [i.doc_id for i, _, _ in p.enqueue])
    p.enqueue = [e for e in p.enqueue if e[0].doc_id not in kept_out]
    return len(kept_out)


def reindex(
    conn: psycopg.Connection[DictRow],
    specs: list[SourceSpec],
    send_task: Callable[[str, dict], object],
    http_timeout: float = 10.0,
    kind: str = "reindex",
) -> dict:
    """Run one full reindex over ``specs``; returns {job_id, state, sources: {name: counts}, totals}.

    Every document to ingest is attached to the job and committed before the first task is sent,
    so a fast worker can never finish the job while later sources are still being listed.
    """
    got = db.one(conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS ok", (LOCK_KEY,)))["ok"]
    conn.commit()
    if not got:
        return {"job_id": None, "state": "skipped", "reason": "another reindex is running", "sources": {}}
    try:
        job_id = jobs.create_job(conn, kind, None, [], {"sources": [s.name for s in specs]})
        conn.commit()
        report: dict[str, dict] = {}
        plans: list[tuple[SourceSpec, Plan]] = []
        commits: list[tuple[SourceSpec, str, Plan]] = []
        refusals: list[tuple[str, list[tuple[str, str]]]] = []
        for spec in specs:
            try:
                listing = namespaced(spec, build_source(spec, http_timeout).list())
            except SourceUnavailable as exc:
                log.warning("source %s unavailable, nothing pruned: %s", spec.name, exc)
                report[spec.name] = {"error": str(exc), "listed": 0, "enqueued": 0, "pruned": 0}
                continue
            listing.items, refused = split_named(listing.items, lambda i: (i.doc_id, i.path))
            refusals.append((spec.tenant, refused))
            stored = stored_state(conn, spec.tenant, spec.name, [i.doc_id for i in listing.items])
            p = plan(listing, stored, spec.name)
            touched = tie_break(conn, spec, p, stored)
            kept_out = keep_out(conn, spec, listing, p)
            acl_updated = unchanged_source_acl(conn, spec, listing, stored)
            plans.append((spec, p))
            if spec.kind == "git" and listing.commit:
                commits.append((spec, listing.commit, p))
            report[spec.name] = {
                "listed": len(listing.items),
                "new": p.count("new"),
                "changed": p.count("changed"),
                "unchanged": p.unchanged,
                "touched": touched,
                "unavailable": len(listing.unavailable),
                "excluded": kept_out,
                "enqueued": len(p.enqueue),
                "pruned": 0,
                "acl_updated": acl_updated,
                "refused_names": len(refused),
                "errors": (listing.errors + [e for _, e in refused])[:20],
            }
            jobs.heartbeat(conn, job_id, progress=True)
            conn.commit()
        for spec, p in plans:
            if p.enqueue:
                jobs.add_documents(conn, job_id, spec.tenant, [i.doc_id for i, _, _ in p.enqueue])
        for tenant, refused in refusals:  # after the documents to ingest: the job is not done yet
            record_refused(conn, job_id, tenant, refused)
        conn.commit()
        for spec, p in plans:  # batch tasks: the chunks of a source's documents share embedding requests
            send_in_batches(
                [
                    request_for(spec, item, version, job_id).model_dump(exclude_none=True)
                    for item, version, _ in p.enqueue
                ],
                [item.size for item, _, _ in p.enqueue],
                send_task,
            )
        for spec, p in plans:
            for doc_id in p.vanished:
                outcome, _ = delete_document(conn, spec.tenant, doc_id, None)
                report[spec.name]["pruned"] += outcome == "deleted"
            conn.commit()
        if any(r.get("acl_updated") or r.get("pruned") for r in report.values()):
            # done once the query pool's replicas serve the new permissions and the deletions
            replicas.wait_for_replay(conn, what="reindex's permission changes and deletions")
        for spec, commit, p in commits:  # enqueued and pruned: a push may now diff from here
            record_commit(conn, spec, commit, p, job_id)
            report[spec.name]["commit"] = commit
        totals = {k: sum(r.get(k, 0) for r in report.values()) for k in TOTALS}
        jobs.finish_if_done(conn, job_id, {"sources": report, **totals})
        conn.commit()
        return {"job_id": job_id, "state": jobs.job_state(conn, job_id), "sources": report, **totals}
    finally:
        conn.rollback()
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_KEY,))
        conn.commit()


def select_sources(raw: list[dict], names: list[str] | None) -> list[SourceSpec]:
    specs = configured_sources(raw)
    if names:
        unknown = sorted(set(names) - {s.name for s in specs})
        if unknown:
            raise ValueError(f"unknown source(s): {', '.join(unknown)}")
        specs = [s for s in specs if s.name in names]
    return specs
