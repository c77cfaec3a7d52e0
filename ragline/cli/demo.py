"""`ragline demo`: what ``make run`` shows: ingest a folder, ask three questions, print cited answers."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from ragline.cli.common import console, reload_app, send_and_wait, wait_with_progress
from ragline.cli.query import print_answer
from ragline.shared.names import TASK_QUERY_ASK

app = typer.Typer()

QUESTIONS = [
    "Какие очереди использует ragline и зачем нужен отдельный пул запросов?",
    "How does ragline keep tenants and ACL groups isolated?",
    "Как ragline объединяет векторный и полнотекстовый поиск?",
]


@app.command()
def demo(
    docs: Path = typer.Argument(Path("docs"), exists=True),
    tenant: str = typer.Option("demo", "--tenant"),
) -> None:
    """Ingest a folder and ask three questions about ragline (what ``make run`` does)."""
    from ragline.ingest.enqueue import collect_files, enqueue_files  # start-up: Celery, psycopg load on use

    reload_app()
    files = collect_files([docs])
    t0 = time.perf_counter()
    job_id = enqueue_files(files, tenant=tenant, acl=["public"])
    s = wait_with_progress(job_id, len(files), 3600)
    console.print(
        f"ingested {s['documents']} documents, {s['chunks']} chunks, {s['embedded']} embedded, "
        f"{s['skipped_unchanged']} unchanged, {s['failed']} failed in {time.perf_counter() - t0:.1f}s"
    )
    if s["failed"]:
        console.print(s["errors"])
    failures = 0
    for q in QUESTIONS:
        res = send_and_wait(TASK_QUERY_ASK, {"query": q, "tenant": tenant, "groups": ["public"]}, 120)
        print_answer(q, res)
        failures += int(not res.get("citations"))
    if failures:
        raise typer.Exit(1)
