"""What every command module shares: the console, argument helpers, the broker and job progress."""

from __future__ import annotations

import json

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ragline.shared.settings import get_settings

console = Console(stderr=True)


def split_csv(value: str | None) -> list[str]:
    return [g.strip() for g in (value or "").split(",") if g.strip()]


def print_result(data: dict | list, as_json: bool) -> None:
    """One JSON document on stdout with ``--json``; a readable rendering on stderr otherwise."""
    if as_json:
        print(json.dumps(data, ensure_ascii=False, default=str))
    else:
        console.print(data)


def reload_app() -> None:
    """Point the Celery app at the broker that ``ragline up`` started (or REDIS_URL)."""
    from ragline.shared.celery_app import use_broker  # start-up: Celery loads only for commands that send

    use_broker(get_settings().effective_redis_url())


def send_and_wait(task: str, payload: dict, timeout: float) -> dict:
    """Send one task to the workers and wait for its result."""
    from ragline.shared.celery_app import app  # start-up: Celery loads only for commands that send

    reload_app()
    return app.send_task(task, args=[payload]).get(timeout=timeout)


def wait_with_progress(job_id: str, total: int, timeout: float, quiet: bool = False) -> dict:
    """Wait for an ingestion job with a progress bar of its documents and chunks; its summary."""
    from ragline.shared import jobs  # start-up: psycopg loads only for commands that read jobs

    with Progress(
        TextColumn("[bold]ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[chunks]} chunks"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    ) as progress:
        bar = progress.add_task("docs", total=total, chunks=0)
        return jobs.wait_for_job(
            job_id,
            timeout,
            on_progress=lambda s: progress.update(
                bar, completed=jobs.finished_documents(s), chunks=s["chunks"]
            ),
        )
