"""`ragline ingest`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ragline.cli.common import console, reload_app, split_csv, wait_with_progress

app = typer.Typer()


@app.command()
def ingest(
    paths: list[Path] = typer.Argument(..., exists=True, help="files or folders"),
    tenant: str = typer.Option(..., "--tenant"),
    acl: str = typer.Option("", "--acl", help="comma-separated groups"),
    wait: bool = typer.Option(False, "--wait"),
    as_json: bool = typer.Option(False, "--json"),
    timeout: float = typer.Option(3600.0, help="seconds to wait with --wait"),
) -> None:
    """Enqueue the documents in batch tasks of the ingest pool."""
    from ragline.ingest.enqueue import collect_files, enqueue_files  # start-up: Celery, psycopg load on use

    reload_app()
    files = collect_files(paths)
    job_id = enqueue_files(files, tenant=tenant, acl=split_csv(acl))
    if not wait:
        print(
            json.dumps({"job_id": job_id, "documents": len(files)})
            if as_json
            else f"job {job_id}: {len(files)} documents queued"
        )
        return
    summary = wait_with_progress(job_id, len(files), timeout, quiet=as_json)
    out = {
        k: summary[k] for k in ("documents", "chunks", "embedded", "skipped_unchanged", "failed", "errors")
    }
    out["job_id"], out["state"] = job_id, summary["state"]
    if as_json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        console.print(out)
    if summary["state"] == "running":
        raise typer.Exit(2)
