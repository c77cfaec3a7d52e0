"""The ``ragline`` command line."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shared.settings import get_settings

app = typer.Typer(add_completion=False, no_args_is_help=True, help="ragline: a RAG backend on Celery and pgvector")
console = Console(stderr=True)


def _split(value: str | None) -> list[str]:
    return [g.strip() for g in (value or "").split(",") if g.strip()]


# ------------------------------------------------------------------------------------------ stack
@app.command()
def up(wait: bool = typer.Option(True, help="wait until every worker pool answers a ping")) -> None:
    """Start embedded Postgres and Redis (unless external URLs are set), migrate, start pools, beat, Flower."""
    from shared import processes, services
    from shared.migrate import apply_migrations

    settings = get_settings()
    if settings.embedded_db:
        url = services.start_postgres(settings)
        console.print(f"[green]postgres[/] {url}")
    if settings.embedded_redis:
        url = services.start_redis(settings)
        console.print(f"[green]redis[/] {url}")
    applied = apply_migrations()
    console.print(f"[green]migrations[/] applied {len(applied)}")
    _reload_app()
    started = processes.start_all(settings)
    console.print(f"[green]processes[/] {', '.join(f'{k}={v}' for k, v in started.items())}")
    if wait:
        _wait_workers(timeout=120)
    console.print(f"[green]flower[/] http://{settings.flower_host}:{settings.flower_port} (user {settings.flower_user})")


def _reload_app() -> None:
    """Point the Celery app at the broker that ``up`` just started."""
    from shared import celery_app

    settings = get_settings()
    url = settings.effective_redis_url()
    celery_app.app.conf.broker_url = url
    celery_app.app.conf.result_backend = url


def _wait_workers(timeout: float) -> None:
    from shared.celery_app import POOLS, app as celery

    deadline = time.monotonic() + timeout
    want = set(POOLS)
    while time.monotonic() < deadline:
        replies = celery.control.ping(timeout=1.0) or []
        seen = {name.split("@", 1)[0] for r in replies for name in r}
        if want <= seen:
            console.print(f"[green]workers[/] ready: {', '.join(sorted(seen))}")
            return
        time.sleep(0.5)
    console.print("[red]workers did not answer in time; see .ragline/logs/[/]")
    raise typer.Exit(1)


@app.command()
def down() -> None:
    """Stop everything ``ragline up`` started, and nothing else."""
    from shared import processes, services

    settings = get_settings()
    stopped = processes.stop_all(settings)
    console.print(f"stopped: {', '.join(stopped) or 'no processes'}")
    if settings.embedded_redis:
        services.stop_redis(settings)
    if settings.embedded_db:
        services.stop_postgres(settings)
    console.print("embedded services stopped")


@app.command()
def status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Services, processes and jobs."""
    from shared import processes, services

    settings = get_settings()
    info: dict = {
        "postgres": {"embedded": settings.embedded_db,
                     "pid": services.postgres_pid(settings) if settings.embedded_db else None},
        "redis": {"embedded": settings.embedded_redis,
                  "pid": services.redis_pid(settings) if settings.embedded_redis else None},
        "processes": processes.running(settings),
    }
    if as_json:
        print(json.dumps(info, indent=2))
        return
    table = Table("component", "state")
    table.add_row("postgres", str(info["postgres"]))
    table.add_row("redis", str(info["redis"]))
    for name, pid in info["processes"].items():
        table.add_row(name, f"running pid {pid}" if pid else "stopped")
    Console().print(table)


@app.command()
def migrate() -> None:
    """Apply pending schema migrations."""
    from shared.migrate import apply_migrations

    applied = apply_migrations()
    console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or '-'}")


# ---------------------------------------------------------------------------------------- ingest
@app.command()
def ingest(
    paths: list[Path] = typer.Argument(..., exists=True, help="files or folders"),
    tenant: str = typer.Option(..., "--tenant"),
    acl: str = typer.Option("", "--acl", help="comma-separated groups"),
    wait: bool = typer.Option(False, "--wait"),
    as_json: bool = typer.Option(False, "--json"),
    timeout: float = typer.Option(3600.0, help="seconds to wait with --wait"),
) -> None:
    """Enqueue one ingestion task per document."""
    from ingest.enqueue import collect_files, enqueue_files
    from shared import db, jobs

    _reload_app()
    files = collect_files(paths)
    job_id = enqueue_files(files, tenant=tenant, acl=_split(acl))
    if not wait:
        print(json.dumps({"job_id": job_id, "documents": len(files)}) if as_json else f"job {job_id}: {len(files)} documents queued")
        return
    deadline = time.monotonic() + timeout
    with Progress(TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[chunks]} chunks"),
                  TimeElapsedColumn(), console=console, disable=as_json) as progress:
        bar = progress.add_task("docs", total=len(files), chunks=0)
        while True:
            with db.connection() as conn:
                summary = jobs.job_summary(conn, job_id)
            finished = summary["done"] + summary["skipped_unchanged"] + summary["failed"]
            progress.update(bar, completed=finished, chunks=summary["chunks"])
            if summary["state"] != "running" or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    out = {k: summary[k] for k in ("documents", "chunks", "embedded", "skipped_unchanged", "failed", "errors")}
    out["job_id"], out["state"] = job_id, summary["state"]
    if as_json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        console.print(out)
    if summary["state"] == "running":
        raise typer.Exit(2)


# ----------------------------------------------------------------------------------------- query
def _send(task: str, payload: dict, timeout: float) -> dict:
    from shared.celery_app import app as celery

    _reload_app()
    return celery.send_task(task, args=[payload]).get(timeout=timeout)


@app.command()
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

    res = _send(TASK_QUERY_RETRIEVE, {"query": query, "tenant": tenant, "groups": _split(groups), "k": k, "mode": mode}, 60)
    if as_json:
        print(json.dumps(res, ensure_ascii=False))
        return
    for i, h in enumerate(res.get("hits", []), start=1):
        Console().print(f"[bold]{i}.[/] {h['doc_id']}#{h['chunk_no']} [dim]{h['heading']}[/] score={h['score']:.4f}\n   {h['content'][:200]}")


@app.command()
def ask(
    question: str,
    tenant: str = typer.Option(..., "--tenant"),
    groups: str = typer.Option(..., "--groups"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Ask a question through the query queue; prints the answer with [N] citations."""
    from shared.contracts import TASK_QUERY_ASK

    res = _send(TASK_QUERY_ASK, {"query": question, "tenant": tenant, "groups": _split(groups)}, 120)
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


@app.command()
def demo(
    docs: Path = typer.Argument(Path("docs"), exists=True),
    tenant: str = typer.Option("demo", "--tenant"),
) -> None:
    """Ingest a folder and ask three questions about ragline (what ``make run`` does)."""
    from ingest.enqueue import collect_files, enqueue_files
    from shared import db, jobs
    from shared.contracts import TASK_QUERY_ASK

    _reload_app()
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


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


if __name__ == "__main__":
    main()
