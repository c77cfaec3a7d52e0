"""Every long wait of the CLI shows its progress here, the same way: one line per change (and one
at least every :data:`HEARTBEAT_S` while nothing changes) with its time, rows done of the total,
the rate and the time left (:mod:`ragline.shared.worker.progress`); with ``--json`` the same
numbers as JSON progress events on stderr, so stdout stays one JSON document."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from ragline.cli.common import console
from ragline.shared.worker.progress import Snapshot, Tracker, duration, rate_text, read_fill_rates

#: a line at least this often while a wait shows no change (a CPU embedder's batch takes minutes)
HEARTBEAT_S = 30.0
#: how often a wait polls the database
POLL_S = 2.0


class Reporter:
    """Prints a wait's snapshots: when ``done`` changes, or after :data:`HEARTBEAT_S` without one."""

    def __init__(self, as_json: bool = False, unit: str = "rows", heartbeat_s: float = HEARTBEAT_S) -> None:
        self.as_json = as_json
        self.unit = unit
        self.heartbeat_s = heartbeat_s
        self.last: tuple[str, int] | None = None
        self.last_at = 0.0

    def show(self, snap: Snapshot) -> None:
        key = (snap.phase, snap.done)
        if key == self.last and snap.at - self.last_at < self.heartbeat_s:
            return
        self.last, self.last_at = key, snap.at
        if self.as_json:
            sys.stderr.write(json.dumps(snap.event(), ensure_ascii=False) + "\n")
            sys.stderr.flush()
        else:
            console.print(snap.line(self.unit), markup=False, highlight=False, soft_wrap=True)


def wait_for_documents(job_id: str, total: int, timeout: float, as_json: bool = False) -> dict:
    """Until the job's documents are all final (or ``timeout``); its summary."""
    from ragline.shared.worker import jobs  # start-up: psycopg loads only for commands that read jobs

    tracker, reporter = Tracker("documents", total), Reporter(as_json, "documents")
    return jobs.wait_for_job(
        job_id,
        timeout,
        poll_s=POLL_S,
        on_progress=lambda s: reporter.show(tracker.sample(jobs.finished_documents(s), s["documents"])),
    )


def wait_for_vectors(
    awaiting: Callable[[], int],
    deadline: float,
    as_json: bool = False,
    phase: str = "vectors",
    first: int | None = None,
) -> int:
    """Until ``awaiting()`` (rows still without their vectors) is 0 or the monotonic ``deadline``
    passes; the rows still awaiting then. Progress: rows given their vectors of those awaiting at
    the start (``first``, when the caller has just counted them)."""
    first = awaiting() if first is None else first
    tracker, reporter = Tracker(phase, first), Reporter(as_json)
    left = first
    while left:
        reporter.show(tracker.sample(first - left))
        if time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
        left = awaiting()
    if first and not left:
        reporter.show(tracker.sample(first))
    return left


def job_awaiting(job_id: str) -> Callable[[], int]:
    from ragline.shared.worker import db, jobs  # start-up: psycopg loads on use

    def count() -> int:
        with db.connection() as conn:
            return jobs.awaiting_vectors(conn, job_id)

    return count


def tenant_awaiting(tenant: str, layers: list[str] | None = None) -> Callable[[], int]:
    """The tenant's rows awaiting their vectors (of ``layers`` only, when given), counted anew at each call."""
    from ragline.shared.worker import db, pending_vectors  # start-up: psycopg loads on use

    def count() -> int:
        with db.connection() as conn:
            return pending_vectors.by_tenant(conn, layers=layers).get(tenant, 0)

    return count


def fill_rates(redis_url: str) -> dict[str, float]:
    """The fill's rate per tenant as it recorded it (rows/s); empty when the broker is not there."""
    from ragline.shared.worker.progress import broker_client

    try:
        return read_fill_rates(broker_client(redis_url))
    except Exception:  # the broker is down: status and job still answer, without a rate
        return {}


def awaiting_text(rows: int, rate: float | None) -> str:
    """``1162 rows awaiting vectors (searchable lexically until filled), 4.2 rows/min, about 4 h left``."""
    text = f"{rows} rows awaiting vectors (searchable lexically until filled)"
    if not rate:
        return text + ", fill rate not measured yet"
    return f"{text}, {rate_text(rate, 'rows')}, about {duration(rows / rate)} left"


def vector_rows(awaiting: dict[str, int], rates: dict[str, float]) -> list[tuple[str, str]]:
    """``ragline status``'s section: per tenant, the rows awaiting their vectors with the fill's
    rate (:func:`fill_rates`) and the time left (pure)."""
    return [(f"vectors {t}"[:60], awaiting_text(n, rates.get(t))) for t, n in awaiting.items()]
