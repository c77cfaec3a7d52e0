"""`ragline ingest`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ragline.shared.cli_common import console, reload_app, split_csv


def ingest(
    paths: list[Path] = typer.Argument(..., exists=True, help="files or folders"),
    tenant: str = typer.Option(..., "--tenant"),
    acl: str = typer.Option("", "--acl", help="comma-separated groups"),
    wait: bool = typer.Option(False, "--wait"),
    as_json: bool = typer.Option(False, "--json"),
    timeout: float = typer.Option(3600.0, help="seconds to wait with --wait"),
) -> None:
    """Enqueue one ingestion task per document."""
    from ragline.ingest.enqueue import collect_files, enqueue_files
    from ragline.shared import jobs

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
    with Progress(
        TextColumn("[bold]ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[chunks]} chunks"),
        TimeElapsedColumn(),
        console=console,
        disable=as_json,
    ) as progress:
        bar = progress.add_task("docs", total=len(files), chunks=0)
        summary = jobs.wait_for_job(
            job_id,
            timeout,
            on_progress=lambda s: progress.update(
                bar, completed=jobs.finished_documents(s), chunks=s["chunks"]
            ),
        )
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


def register(app: typer.Typer) -> None:
    app.command()(ingest)
