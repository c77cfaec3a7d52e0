"""What every command module shares: the consoles, exit codes, argument helpers, the broker, the
database and job summaries.

Output: a command's result goes to stdout, as readable lines or, with ``--json``, as one JSON
document; progress bars, warnings and errors go to stderr. Nothing prints a Python repr.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import NoReturn

import typer
from rich.console import Console

from ragline.shared.config.settings import get_settings

console = Console(stderr=True)  # progress, warnings, errors
out = Console(soft_wrap=True)  # results

# Exit codes, the same for every command (also in the README and `ragline --help`).
EXIT_OK = 0
#: something asked for was not found (a doc id, a tenant, a job), or documents failed
EXIT_FAILED = 1
#: a usage error: a missing or invalid option or argument (Click's own code)
EXIT_USAGE = 2
#: ``--wait`` gave up after ``--timeout``; the job goes on (``ragline job ID`` follows it)
EXIT_RUNNING = 3
#: the stack is not reachable: not started (``ragline up``), or Postgres / Redis down
EXIT_UNREACHABLE = 4

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 not found, or documents failed; 2 usage error; 3 --wait timed out, the job"
    " goes on; 4 the stack is not reachable (ragline up)."
)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """An error line on stderr and the exit code (never a traceback for an expected failure)."""
    console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def echo(line: str) -> None:
    """One result line on stdout, printed as is (doc ids and errors may hold brackets)."""
    out.print(line, markup=False, highlight=False)


def split_csv(value: str | None) -> list[str]:
    return [g.strip() for g in (value or "").split(",") if g.strip()]


def iso(value: datetime | None) -> str | None:
    """A time as ISO 8601 in UTC (``2026-11-30T12:00:05Z``), the one format every command prints."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def jsonable(value):
    """Times as ISO 8601 UTC, everything else as JSON has it."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def print_json(data) -> None:
    """One JSON document on stdout (``--json``)."""
    print(json.dumps(jsonable(data), ensure_ascii=False, default=str))


def print_result(data: dict | list, as_json: bool, lines: list[str]) -> None:
    """``data`` as JSON with ``--json``, else the readable ``lines``."""
    if as_json:
        print_json(data)
    else:
        for line in lines:
            echo(line)


def columns(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Aligned lines, never wrapped or cut at the terminal's width: a doc id stays one word to copy,
    and ``| grep`` sees one document per line."""
    widths = [max(len(str(v)) for v in col) for col in zip(headers, *rows, strict=True)]
    return [
        "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in (headers, *rows)
    ]


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def reload_app() -> None:
    """Point the Celery app at the broker that ``ragline up`` started (or REDIS_URL)."""
    from ragline.shared.worker.celery_app import (
        use_broker,  # start-up: Celery loads only for commands that send
    )

    try:
        url = get_settings().effective_redis_url()
    except RuntimeError as exc:  # the embedded stack is not up
        fail(str(exc), EXIT_UNREACHABLE)
    use_broker(url)


@contextmanager
def connect() -> Iterator:
    """A short-lived autocommit connection for the commands that read or change the catalog; a clear
    error (exit 4) instead of a traceback or a 30 s pool timeout when Postgres is not there."""
    import psycopg  # start-up: psycopg loads only for commands that use the database
    from psycopg.rows import dict_row  # start-up: as above

    try:
        url = get_settings().effective_database_url()
        conn = psycopg.connect(url, connect_timeout=5, autocommit=True, row_factory=dict_row)
    except RuntimeError as exc:  # the embedded stack is not up
        fail(str(exc), EXIT_UNREACHABLE)
    except psycopg.OperationalError as exc:
        fail(f"cannot reach PostgreSQL: {str(exc).strip().splitlines()[0]}", EXIT_UNREACHABLE)
    with conn:
        yield conn


def send_and_wait(task: str, payload: dict, timeout: float) -> dict:
    """Send one task to the workers and wait for its result (deleted from Redis once read)."""
    from ragline.shared.sdk.celery_base import read_once
    from ragline.shared.worker.celery_app import app  # start-up: Celery loads only for commands that send

    reload_app()
    return read_once(app.send_task(task, args=[payload]), timeout)


# --- job summaries ---------------------------------------------------------------------------------
#: job state -> exit code of a command that waited for it
JOB_EXIT = {
    "succeeded": EXIT_OK,
    "completed_with_errors": EXIT_FAILED,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_FAILED,
    "queued": EXIT_RUNNING,
    "running": EXIT_RUNNING,
}


def job_exit_code(state: str) -> int:
    return JOB_EXIT.get(state, EXIT_FAILED)


def summary_line(s: dict) -> str:
    """One line for a job's document counts: what a user reads after ``--wait``."""
    stored = s.get("done", 0)
    parts = [
        f"{plural(s['documents'], 'document')}: {stored} stored",
        f"{s['skipped_unchanged']} unchanged",
        f"{s['failed']} failed",
    ]
    if s.get("acl_updated"):
        parts.append(f"{s['acl_updated']} with new permissions only")
    if s.get("acl_ignored_stale"):
        parts.append(f"{s['acl_ignored_stale']} kept newer permissions")
    vectors = f"{plural(s['chunks'], 'chunk')}, {s['embedded']} embedded"
    if s.get("vectors_filled"):
        vectors += f", {s['vectors_filled']} given their vectors after"
    if s.get("awaiting_vectors"):
        vectors += f", {s['awaiting_vectors']} awaiting vectors (searchable lexically until filled)"
    return f"{', '.join(parts)}; {vectors}"


def summary_details(s: dict, limit: int = 20) -> list[str]:
    """The lines below the summary: every failed document with its error, documents no group sees."""
    lines = [f"failed: {e['doc_id']}: {e['error']}" for e in s.get("errors", [])[:limit]]
    if len(s.get("errors", [])) > limit:
        lines.append(f"... and {len(s['errors']) - limit} more failed (--json lists them all)")
    hidden = s.get("visible_to_no_group") or []
    if hidden:
        lines.append(
            f"visible to no group: {plural(len(hidden), 'document')} stored with an empty ACL"
            f" (e.g. {hidden[0]}); give them groups with `ragline acl set`"
        )
    return lines


def state_line(job_id: str, state: str) -> str:
    hint = {
        "completed_with_errors": "some documents failed (see below; `ragline retry-failed` retries them)",
        "running": "still running: follow it with `ragline job " + job_id[:8] + "`",
        "queued": "still queued: follow it with `ragline job " + job_id[:8] + "`",
    }.get(state)
    return f"job {job_id}: {state}" + (f": {hint}" if hint else "")
