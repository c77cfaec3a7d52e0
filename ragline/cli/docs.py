"""`ragline docs list|show|delete` and `ragline job`: what is indexed, and what a job did.

The queries are in ``ragline.ingest.catalog`` and ``ragline.shared.worker.jobs``; this module only reads
options and formats. Times are printed as ISO 8601 in UTC, like everywhere else.
"""

from __future__ import annotations

from datetime import UTC, datetime

import typer

from ragline.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    columns,
    connect,
    echo,
    fail,
    iso,
    job_exit_code,
    jsonable,
    plural,
    print_json,
    split_csv,
    state_line,
    summary_details,
    summary_line,
)
from ragline.shared.config.settings import get_settings

app = typer.Typer()
docs_app = typer.Typer(no_args_is_help=True, help="List, show and delete a tenant's documents.")
app.add_typer(docs_app, name="docs")

STATUSES = ("ready", "pending", "failed", "deleted")


def version_text(version: int | None) -> str:
    """A document version with the time it stands for when it is one (ragline's own versions are
    Unix time in nanoseconds: a file's modification time, a URL's Last-Modified)."""
    if version is None:
        return "-"
    if 10**17 <= version < 10**19:  # 1973..2286 in nanoseconds
        return f"{version} ({iso(datetime.fromtimestamp(version / 1e9, UTC))})"
    return str(version)


@docs_app.command("list")
def list_docs(
    tenant: str = typer.Option(..., "--tenant"),
    prefix: str | None = typer.Option(None, "--prefix", help="only doc ids starting with this"),
    status: str | None = typer.Option(
        None,
        "--status",
        help="comma-separated: ready, pending (permissions waiting for a first ingest), failed, deleted"
        " (tombstones); default: all but deleted",
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000, help="documents per page"),
    after: str | None = typer.Option(
        None, "--after", help="the page after this doc id (the last one of the previous page)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the page as one JSON document"),
) -> None:
    """List a tenant's documents in doc id order, a page at a time.

    Shows each document's status, chunk count, groups (ACL) and last change. An empty listing (nothing
    starts with --prefix, no document has --status) is an answer and exits 0; exits 1 only when the
    tenant has no documents at all (a misspelt tenant).
    """
    from ragline.ingest import catalog  # start-up: psycopg loads only for commands that use it

    statuses = tuple(split_csv(status)) or None
    if statuses and not set(statuses) <= set(STATUSES):
        raise typer.BadParameter(f"one or more of {', '.join(STATUSES)}", param_hint="'--status'")
    with connect() as conn:
        rows = catalog.list_documents(conn, tenant, prefix, statuses, limit + 1, after)
        total = catalog.count_documents(conn, tenant, prefix, statuses)
        known = bool(total) or catalog.tenant_known(conn, tenant)
    rows, more = rows[:limit], len(rows) > limit
    next_after = rows[-1]["doc_id"] if more else None
    if as_json:
        print_json(
            {
                "tenant": tenant,
                "prefix": prefix,
                "total": total,
                "documents": rows,
                "next_after": next_after,
            }
        )
    elif rows:
        for line in columns(
            ("doc_id", "status", "chunks", "acl", "updated (UTC)"),
            [
                (
                    r["doc_id"],
                    r["status"],
                    str(r["chunks"]),
                    ",".join(r["acl"]) or "(no group)",
                    iso(r["updated_at"]),
                )
                for r in rows
            ],
        ):
            echo(line)
        echo(
            f"{plural(len(rows), 'document')} of {total}"
            + (f"; next page: --after '{next_after}'" if next_after else "")
        )
    if not known:
        fail(f"not found: tenant {tenant!r} has no documents (misspelt?)")
    if total == 0 and not as_json:  # an empty page is an answer: no failed document is good news
        echo(
            f"no document of tenant {tenant}"
            + (f" starts with {prefix!r}" if prefix else "")
            + (f" with status {','.join(statuses)}" if statuses else "")
        )


@docs_app.command("show")
def show_doc(
    doc_id: str = typer.Argument(..., help="the document's id, as `ragline docs list` shows it"),
    tenant: str = typer.Option(..., "--tenant"),
    as_json: bool = typer.Option(False, "--json", help="print the document as one JSON document"),
) -> None:
    """Show everything stored about one document.

    Status, groups, chunks, source, version, content hash, open errors and the last job.

    Exits 1 when the tenant holds no such doc id.
    """
    from ragline.ingest import catalog  # start-up: psycopg loads only for commands that use it

    with connect() as conn:
        doc = catalog.get_document(conn, tenant, doc_id)
    if doc is None:
        fail(f"not found: tenant {tenant!r} has no document {doc_id!r} (`ragline docs list` shows its ids)")
    if as_json:
        print_json(doc)
        return
    meta = doc["metadata"] or {}
    rows = [
        ("doc_id", doc["doc_id"]),
        ("tenant", doc["tenant"]),
        (
            "status",
            doc["status"] + (" (a tombstone: its chunks are deleted)" if doc["status"] == "deleted" else ""),
        ),
        ("title", doc["title"] or "-"),
        ("groups (acl)", ", ".join(doc["acl"]) or "(none: no search returns it)"),
        (
            "chunks",
            f"{doc['chunks_stored']} stored"
            + (f", model {doc['embed_model']}" if doc["embed_model"] else ""),
        ),
        ("source", meta.get("source") or "-"),
        ("file", doc["source_uri"] or "-"),
        ("version", version_text(doc["version"])),
        ("content hash", doc["content_hash"] or "-"),
        ("created", iso(doc["created_at"])),
        ("updated", iso(doc["updated_at"])),
    ]
    if doc["ingest_acl"] is not None and sorted(doc["ingest_acl"]) != sorted(doc["acl"]):
        rows.append(("ingest asked for", ", ".join(doc["ingest_acl"]) or "(no group)"))
    if doc["error"]:
        rows.append(("error", doc["error"]))
    for e in doc["open_errors"]:
        rows.append(("open error", f"{iso(e['created_at'])} {e['stage']}: {e['error']}"))
    job = doc["last_job"]
    if job:
        rows.append(
            (
                "last job",
                f"{job['job_id']} ({job['kind']}, {job['job_state']}): this document {job['state']}"
                + (f": {job['error']}" if job["error"] else "")
                + f", {iso(job['updated_at'])}",
            )
        )
    width = max(len(k) for k, _ in rows) + 2
    for k, v in rows:
        echo(f"{k:<{width}}{v}")


@docs_app.command("delete")
def delete_docs(
    doc_ids: list[str] = typer.Argument(None, help="doc ids to delete"),
    tenant: str = typer.Option(..., "--tenant"),
    prefix: str | None = typer.Option(
        None, "--prefix", help="delete every document whose id starts with this (asks first, or --yes)"
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask before deleting by --prefix"),
    exclude: bool = typer.Option(
        False,
        "--exclude",
        help="also keep the documents out of the index: no later ingest, reindex, push or event stores them"
        " again, under any doc id (their file and their content are kept out too), until `ragline docs"
        " include` (e.g. a file that leaked a secret and is still in its folder)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON document"),
) -> None:
    """Delete documents: their chunks go at once, no search returns them any more.

    The same path as a delete event: a tombstone stays, so an older version arriving late (a
    redelivered event) is not stored again. A delete is not an exclusion: a document whose file is
    still in its folder comes back with the next `ragline ingest` of that folder, and one still in
    a configured source (RAGLINE_LIFECYCLE_SOURCES) with the next reindex; the command warns about each. With
    --exclude the doc ids, their files and their contents stay out until `ragline docs include`
    (docs/ingestion.md); other documents already holding the same file or content are named.
    Exits 1 when a doc id is not found (the others are deleted; with --exclude, excluded too).
    """
    from ragline.ingest import catalog  # start-up: psycopg loads only for commands that use it

    doc_ids = list(doc_ids or [])
    if bool(doc_ids) == bool(prefix):
        fail("name the doc ids to delete, or --prefix (not both)", EXIT_USAGE)
    with connect() as conn:
        if prefix:
            doc_ids = catalog.doc_ids_under(conn, tenant, prefix)
            if not doc_ids:
                known = catalog.tenant_known(conn, tenant)
                fail(
                    f"not found: tenant {tenant!r} has no documents (misspelt?)"
                    if not known
                    else f"not found: no document of tenant {tenant!r} starts with {prefix!r}"
                )
            if not yes:
                shown = ", ".join(doc_ids[:5]) + (", ..." if len(doc_ids) > 5 else "")
                if not typer.confirm(f"delete {plural(len(doc_ids), 'document')} ({shown})?", err=True):
                    fail("nothing deleted", EXIT_FAILED)
        res = _delete_and_exclude(conn, tenant, doc_ids, exclude)
        if res["deleted"]:  # done once the query pool's replicas no longer serve them
            from ragline.shared.worker import replicas  # start-up: as above

            wait = replicas.wait_for_replay(conn, what="delete")
            if wait and wait.excluded:
                res["replicas_excluded"] = wait.excluded
    _print_deleted(tenant, res, as_json)
    if res["not_found"] or res["changed"]:
        raise typer.Exit(EXIT_FAILED)


def _delete_and_exclude(conn, tenant: str, doc_ids: list[str], exclude: bool) -> dict:
    """Delete the documents (``catalog.delete_documents``); with ``exclude`` keep their doc ids out
    first (an ingest running meanwhile then stores nothing between the delete and the exclusion),
    else say which of them come back and from where (``comes_back``)."""
    from ragline.ingest import catalog, exclusions  # start-up: psycopg loads only for commands that use it
    from ragline.ingest.sources import configured_sources

    sources = configured_sources(get_settings().lifecycle.sources)
    returns = {
        doc["doc_id"]: why
        for doc in catalog.origins(conn, tenant, doc_ids)
        if (why := exclusions.would_return(doc, sources))
    }
    if exclude:
        exclusions.exclude(conn, tenant, doc_ids, "docs delete --exclude")
    res = catalog.delete_documents(conn, tenant, doc_ids)
    res["excluded"] = sorted(doc_ids) if exclude else []
    res["same_content"] = exclusions.also_stored(conn, tenant, doc_ids) if exclude else []
    res["comes_back"] = (
        [] if exclude else [{"doc_id": d, "why": w} for d, w in returns.items() if d not in res["not_found"]]
    )
    return res


def _print_deleted(tenant: str, res: dict, as_json: bool) -> None:
    chunks = sum(d["chunks"] for d in res["deleted"])
    if as_json:
        print_json({"tenant": tenant, **res})
    else:
        echo(
            f"deleted {plural(len(res['deleted']), 'document')} ({plural(chunks, 'chunk')}) of tenant {tenant}"
        )
        for d in res["not_found"]:
            echo(f"not found: {d} (no such doc id, or already deleted)")
        for d in res["changed"]:
            echo(
                f"not deleted: {d}: a newer version was stored meanwhile (run the command again to delete it)"
            )
        if res["excluded"]:
            echo(
                f"excluded {plural(len(res['excluded']), 'doc id')}: no ingest stores them until"
                " `ragline docs include`"
            )
    for d in res["same_content"]:
        typer.echo(
            f"warning: {d} holds an excluded document's file or content and stays in the index;"
            f" `ragline docs delete {d} --tenant {tenant}` deletes it",
            err=True,
        )
    for c in res["comes_back"]:
        typer.echo(
            f"warning: {c['doc_id']} comes back: {c['why']}; `ragline docs delete --exclude` keeps it out",
            err=True,
        )


@docs_app.command("include")
def include_docs(
    doc_ids: list[str] = typer.Argument(..., help="doc ids excluded by `docs delete --exclude`"),
    tenant: str = typer.Option(..., "--tenant"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON document"),
) -> None:
    """Lift exclusions: the next ingest of the documents' files (or reindex of their source) stores them.

    Exits 1 when a doc id was not excluded (the others are lifted).
    """
    from ragline.ingest import exclusions  # start-up: psycopg loads only for commands that use it

    with connect() as conn:
        lifted = exclusions.include(conn, tenant, doc_ids)
    missing = [d for d in dict.fromkeys(doc_ids) if d not in lifted]
    if as_json:
        print_json({"tenant": tenant, "included": lifted, "not_excluded": missing})
    else:
        echo(f"included {plural(len(lifted), 'doc id')} of tenant {tenant} again")
        for d in missing:
            echo(f"not excluded: {d}")
    if missing:
        raise typer.Exit(EXIT_FAILED)


@docs_app.command("excluded")
def excluded_docs(
    tenant: str = typer.Option(..., "--tenant"),
    as_json: bool = typer.Option(False, "--json", help="print the list as one JSON document"),
) -> None:
    """List the doc ids kept out of the index (`docs delete --exclude`); an empty list exits 0."""
    from ragline.ingest import exclusions  # start-up: psycopg loads only for commands that use it

    with connect() as conn:
        rows = exclusions.list_exclusions(conn, tenant)
    if as_json:
        print_json({"tenant": tenant, "excluded": rows})
        return
    for line in columns(("doc_id", "since (UTC)"), [(r["doc_id"], iso(r["created_at"])) for r in rows]):
        echo(line)
    echo(f"{plural(len(rows), 'doc id')} excluded")


@app.command("job")
def job(
    job_id: str = typer.Argument(..., help="a job id, or its first characters (as `ragline status` shows)"),
    as_json: bool = typer.Option(False, "--json", help="print the job as one JSON document"),
) -> None:
    """Show one job: state, counts, failures, times.

    Exits with the job's outcome: 0 succeeded, 1 failed, cancelled or completed with errors, 3 still
    running; 1 when no job has this id.
    """
    from ragline.shared.worker import jobs  # start-up: psycopg loads only for commands that use it

    with connect() as conn:
        found = jobs.find_jobs(conn, job_id)
        if not found:
            fail(f"not found: no job {job_id!r} (`ragline status` lists recent jobs)")
        if len(found) > 1 and job_id not in found:
            fail(f"{job_id!r} names {len(found)} jobs ({', '.join(found)}): give more of the id", EXIT_USAGE)
        record = jobs.job_record(conn, found[0])
        summary = jobs.job_summary(conn, found[0])
    data = {**record, **{k: v for k, v in summary.items() if k not in ("job_id", "state")}}
    if as_json:
        print_json(data)
    else:
        echo(state_line(record["id"], record["state"]))
        times = [("created", record["created_at"]), ("finished", record["finished_at"])]
        if record["state"] in ("queued", "running"):
            times.append(("last heartbeat", record["heartbeat_at"]))
        echo(
            f"{record['kind']}"
            + (f" for tenant {record['tenant']}" if record["tenant"] else "")
            + "; "
            + ", ".join(f"{k} {iso(v)}" for k, v in times if v)
        )
        if summary["documents"]:
            echo(summary_line(summary))
        if record["error"]:
            echo(f"error: {record['error']}")
        for line in summary_details(summary):
            echo(line)
        if record["result"] and not summary["documents"]:
            result = jsonable(record["result"])
            echo(
                "result: "
                + ", ".join(f"{k}={v}" for k, v in result.items() if not isinstance(v, dict | list))
            )
    raise typer.Exit(job_exit_code(record["state"]))
