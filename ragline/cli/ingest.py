"""`ragline ingest`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ragline.cli.common import console, reload_app, split_csv, wait_with_progress

app = typer.Typer()


@app.command()
def ingest(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., exists=True, help="files or folders"),
    tenant: str = typer.Option(..., "--tenant"),
    acl: str | None = typer.Option(
        None,
        "--acl",
        help="required: comma-separated groups that may read the documents; '' stores them visible to no group",
    ),
    source: str | None = typer.Option(
        None,
        "--source",
        help="doc ids are SOURCE/<path relative to the folder given>; default: the folder's name and a hash"
        " of its absolute path",
    ),
    wait: bool = typer.Option(False, "--wait"),
    as_json: bool = typer.Option(False, "--json"),
    timeout: float = typer.Option(3600.0, help="seconds to wait with --wait"),
) -> None:
    """Enqueue the documents in batch tasks of the ingest pool; a document's id is
    SOURCE/<its path relative to the folder given> (a file given directly: relative to its folder)."""
    from ragline.ingest.enqueue import (  # start-up: Celery, psycopg load on use
        collect_files,
        enqueue_files,
        stored_under_other_ids,
    )

    if acl is None:
        ctx.fail(  # a usage error (exit 2), like a missing argument
            "--acl is required: the comma-separated groups that may read these documents"
            " (--acl '' stores them visible to no group until `ragline acl set` gives them one)"
        )
    groups = split_csv(acl)
    try:
        files = collect_files(paths, source)
    except ValueError as exc:  # an invalid --source name, or two files under one doc id
        raise typer.BadParameter(str(exc), param_hint="'--source'") from None
    reload_app()
    sources = [{"source": s, "folder": str(r)} for s, r in dict.fromkeys((f.source, f.root) for f in files)]
    duplicates = stored_under_other_ids(tenant, files)
    warnings = []
    if not groups:
        warnings.append(
            f"--acl is empty: the {len(files)} documents are stored visible to no group (no search or"
            " answer returns them) until `ragline acl set` gives them one"
        )
    if duplicates:
        d = duplicates[0]
        warnings.append(
            f"{len(duplicates)} of these files are already stored under another doc id (e.g. {d['doc_id']}"
            f" is also {d['also_stored_as']}: an ingest from before doc ids had a source prefix, or from"
            " another folder given), so answers may cite both; delete the old ids (docs/operations.md,"
            ' "Document ids")'
        )
    for w in warnings:
        typer.echo(f"warning: {w}", err=True)
    job_id = enqueue_files(files, tenant=tenant, acl=groups)
    extra = {"sources": sources, "duplicates": duplicates, "warnings": warnings}
    if not wait:
        print(
            json.dumps({"job_id": job_id, "documents": len(files), **extra}, ensure_ascii=False)
            if as_json
            else f"job {job_id}: {len(files)} documents queued"
            + "".join(f"; {s['source']}/... from {s['folder']}" for s in sources)
        )
        return
    summary = wait_with_progress(job_id, len(files), timeout, quiet=as_json)
    out = {
        k: summary[k]
        for k in (
            "documents",
            "chunks",
            "embedded",
            "skipped_unchanged",
            "acl_updated",
            "acl_ignored_stale",
            "failed",
            "errors",
            "visible_to_no_group",
        )
    }
    out["job_id"], out["state"] = job_id, summary["state"]
    out.update(extra)
    if as_json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        console.print(out)
    if summary["state"] == "running":
        raise typer.Exit(2)
