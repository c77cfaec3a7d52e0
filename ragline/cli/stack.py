"""`ragline up`, `down`, `status`, `migrate`, `worker`: the embedded stack and its processes.

Commands import the stack's modules (Celery, psycopg, the embedded servers) inside their function:
each is needed by one command only, and ``ragline --help`` should not pay for all of them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ragline.cli.common import console, reload_app
from ragline.cli.lifecycle import lifecycle_rows, lifecycle_status
from ragline.shared.names import POOLS
from ragline.shared.settings import get_settings

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="ragline: a RAG backend on Celery and pgvector"
)


@app.command()
def up(wait: bool = typer.Option(True, help="wait until every worker pool answers a ping")) -> None:
    """Start embedded Postgres and Redis (unless external URLs are set), migrate, start pools, beat, Flower."""
    from ragline.shared import processes, services  # start-up: loads psutil and prometheus_client
    from ragline.shared.migrate import apply_migrations  # start-up: yoyo loads only for up and migrate

    settings = get_settings()
    if settings.embedded_db:
        url = services.start_postgres(settings)
        console.print(f"[green]postgres[/] {url}")
    if settings.embedded_redis:
        url = services.start_redis(settings)
        console.print(f"[green]redis[/] {url}")
    applied = apply_migrations()
    console.print(f"[green]migrations[/] applied {len(applied)}")
    reload_app()
    started = processes.start_all(settings)
    console.print(f"[green]processes[/] {', '.join(f'{k}={v}' for k, v in started.items())}")
    if wait:
        _wait_workers(timeout=120)
    console.print(
        f"[green]flower[/] http://{settings.flower.host}:{settings.flower.port} (user {settings.flower.user})"
    )


def _wait_workers(timeout: float) -> None:
    from ragline.shared.celery_app import app as celery  # start-up: Celery loads only for commands that send

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
    from ragline.shared import processes, services  # start-up: loads psutil and prometheus_client

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
    from ragline.shared import processes, services  # start-up: loads psutil and prometheus_client

    settings = get_settings()
    info: dict = {
        "postgres": {
            "embedded": settings.embedded_db,
            "pid": services.postgres_pid(settings) if settings.embedded_db else None,
        },
        "redis": {
            "embedded": settings.embedded_redis,
            "pid": services.redis_pid(settings) if settings.embedded_redis else None,
        },
        "processes": processes.running(settings),
    }
    info.update(lifecycle_status(settings))  # queue depths, running jobs, recent errors
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return
    table = Table("component", "state")
    table.add_row("postgres", str(info["postgres"]))
    table.add_row("redis", str(info["redis"]))
    for name, pid in info["processes"].items():
        table.add_row(name, f"running pid {pid}" if pid else "stopped")
    for name, state in lifecycle_rows(info):
        table.add_row(name, state)
    Console().print(table)


@app.command()
def migrate() -> None:
    """Apply pending schema migrations."""
    from ragline.shared.migrate import apply_migrations  # start-up: yoyo loads only for up and migrate

    applied = apply_migrations()
    console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or '-'}")


@app.command()
def worker(
    pool: str = typer.Argument(..., help="ingest | query | control"),
    index: int = typer.Option(
        1, "--index", min=1, help="this process's number among its pool's processes on the host"
    ),
    siblings: int = typer.Option(
        1, "--siblings", min=1, help="processes of this pool sharing the host's cores"
    ),
    show: bool = typer.Option(
        False, "--print", help="print the command line and environment as JSON, do not run"
    ),
) -> None:
    """Run one worker process of POOL: the command line ``ragline up``, the container and Kubernetes use."""
    from ragline.shared.processes import worker_command  # start-up: loads psutil and prometheus_client

    try:
        spec = worker_command(get_settings(), pool, index, siblings)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if show:
        print(json.dumps({"name": spec.name, "argv": spec.argv, "env": spec.env}))
        return
    Path(spec.env["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
    os.execve(spec.argv[0], spec.argv, {**os.environ, **spec.env})
