"""The ``ragline`` command line."""

from __future__ import annotations

import json
import sys
import time

import typer
from rich.console import Console
from rich.table import Table

from ragline.shared.cli_common import console, reload_app
from ragline.shared.settings import get_settings

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="ragline: a RAG backend on Celery and pgvector"
)


# ------------------------------------------------------------------------------------------ stack
@app.command()
def up(wait: bool = typer.Option(True, help="wait until every worker pool answers a ping")) -> None:
    """Start embedded Postgres and Redis (unless external URLs are set), migrate, start pools, beat, Flower."""
    from ragline.shared import processes, services
    from ragline.shared.migrate import apply_migrations

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
        f"[green]flower[/] http://{settings.flower_host}:{settings.flower_port} (user {settings.flower_user})"
    )


def _wait_workers(timeout: float) -> None:
    from ragline.shared.celery_app import POOLS
    from ragline.shared.celery_app import app as celery

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
    from ragline.shared import processes, services

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
    from ragline.shared import processes, services

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
    from ragline.ingest.lifecycle_cli import lifecycle_rows, lifecycle_status

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
    from ragline.shared.migrate import apply_migrations

    applied = apply_migrations()
    console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or '-'}")


#: modules that add their commands to the one `ragline` app (each owns its commands)
COMMAND_MODULES = [
    "ragline.ingest.cli",
    "ragline.query.cli",
    "ragline.shared.ops_cli",
    "ragline.ingest.lifecycle_cli",
    "ragline.shared.config_cli",
]


def _register_all() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register_all()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


if __name__ == "__main__":
    main()
