"""`ragline search`, `ragline ask`, `ragline demo`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shared.cli_common import console, reload_app, split_csv


def _send(task: str, payload: dict, timeout: float) -> dict:
    from shared.celery_app import app as celery

    reload_app()
    return celery.send_task(task, args=[payload]).get(timeout=timeout)


def search(
    query: str,
    tenant: str = typer.Option(..., "--tenant"),
    groups: str = typer.Option(..., "--groups"),
    k: int = typer.Option(10, "--k"),
    mode: str = typer.Option("hybrid", "--mode"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Hybrid search through the query queue."""
    from shared.contracts import TASK_QUERY_RETRIEVE

    res = _send(TASK_QUERY_RETRIEVE, {"query": query, "tenant": tenant, "groups": split_csv(groups), "k": k, "mode": mode}, 60)
    if as_json:
        print(json.dumps(res, ensure_ascii=False))
        return
    for i, h in enumerate(res.get("hits", []), start=1):
        Console().print(f"[bold]{i}.[/] {h['doc_id']}#{h['chunk_no']} [dim]{h['heading']}[/] score={h['score']:.4f}\n   {h['content'][:200]}")


def ask(
    question: str,
    tenant: str = typer.Option(..., "--tenant"),
    groups: str = typer.Option(..., "--groups"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Ask a question through the query queue; prints the answer with [N] citations."""
    from shared.contracts import TASK_QUERY_ASK

    res = _send(TASK_QUERY_ASK, {"query": question, "tenant": tenant, "groups": split_csv(groups)}, 120)
    if as_json:
        print(json.dumps(res, ensure_ascii=False))
        return
    print_answer(question, res)


def print_answer(question: str, res: dict) -> None:
    out = Console()
    out.rule(f"[bold]{question}")
    if "answer" not in res:
        out.print(f"[red]error:[/] {res}")
        return
    out.print(res["answer"])
    for c in res["citations"]:
        out.print(f"  [{c['n']}] {c['path'] or c['doc_id']} › {c['heading']} (chunk {c['chunk_no']})")
    timings = ", ".join(f"{k}={v:.0f}ms" for k, v in res["timings_ms"].items())
    out.print(f"[dim]degraded={res['degraded']} timings: {timings}[/]")


def demo(
    docs: Path = typer.Argument(Path("docs"), exists=True),
    tenant: str = typer.Option("demo", "--tenant"),
) -> None:
    """Ingest a folder and ask three questions about ragline (what ``make run`` does)."""
    from ingest.enqueue import collect_files, enqueue_files
    from shared import db, jobs
    from shared.contracts import TASK_QUERY_ASK

    reload_app()
    files = collect_files([docs])
    t0 = time.perf_counter()
    job_id = enqueue_files(files, tenant=tenant, acl=["public"])
    with Progress(TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as p:
        bar = p.add_task("docs", total=len(files))
        while True:
            with db.connection() as conn:
                s = jobs.job_summary(conn, job_id)
            p.update(bar, completed=s["done"] + s["skipped_unchanged"] + s["failed"])
            if s["state"] != "running":
                break
            time.sleep(0.3)
    console.print(f"ingested {s['documents']} documents, {s['chunks']} chunks, {s['embedded']} embedded, "
                  f"{s['skipped_unchanged']} unchanged, {s['failed']} failed in {time.perf_counter() - t0:.1f}s")
    if s["failed"]:
        console.print(s["errors"])
    questions = [
        "Какие очереди использует ragline и зачем нужен отдельный пул запросов?",
        "How does ragline keep tenants and ACL groups isolated?",
        "Как ragline объединяет векторный и полнотекстовый поиск?",
    ]
    failures = 0
    for q in questions:
        res = _send(TASK_QUERY_ASK, {"query": q, "tenant": tenant, "groups": ["public"]}, 120)
        print_answer(q, res)
        failures += int(not res.get("citations"))
    if failures:
        raise typer.Exit(1)




def register(app: typer.Typer) -> None:
    app.command()(search)
    app.command()(ask)
    app.command()(demo)
