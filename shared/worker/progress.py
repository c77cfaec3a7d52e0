"""Progress of a long wait, the one way every command shows it: rows (or documents) done of a
total, the rate over the last minutes, the time left, and the moment each line was written.

The waits it serves: ``ragline ingest --wait`` (documents, then the vectors its rows still await),
``make run``'s demo, ``ragline job`` and ``ragline status`` (the vectors each tenant awaits), and
``--json``'s progress events on stderr. The rate of the vector fill is recorded by the fill itself
(:func:`record_fill`, one entry per batch in a capped Redis stream), so a command that looks once
(``status``, ``job``) reads the same rate as one that polls.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

log = logging.getLogger(__name__)

#: the rate is measured over this many seconds: long enough to span several fill batches of a CPU
#: embedder (a batch of 128 rows takes 1-4 minutes on a loaded laptop), short enough to follow a
#: change of pace
WINDOW_S = 600.0
#: the Redis stream of the fill's batches (``XADD`` with ``MAXLEN``): enough entries for the window
FILL_LOG_KEY = "ragline:vectors:filled"
FILL_LOG_MAXLEN = 1000


@dataclass(frozen=True)
class Snapshot:
    """Where one wait stands: ``done`` of ``total``, ``rate`` per second (None: not measured yet)."""

    phase: str
    done: int
    total: int
    rate: float | None = None
    at: float = field(default_factory=time.time)

    @property
    def left(self) -> int:
        return max(0, self.total - self.done)

    @property
    def eta_s(self) -> float | None:
        if not self.left:
            return 0.0
        return self.left / self.rate if self.rate else None

    def line(self, unit: str = "rows") -> str:
        """``2026-12-07T17:30:05Z vectors: 384/1162 rows (33%), 4.2 rows/min, about 3 min left``."""
        pct = f" ({100 * self.done // self.total}%)" if self.total else ""
        parts = [f"{stamp(self.at)} {self.phase}: {self.done}/{self.total} {unit}{pct}"]
        parts.append(f"{rate_text(self.rate, unit)}" if self.rate else "rate not measured yet")
        eta = self.eta_s
        parts.append(f"about {duration(eta)} left" if eta is not None else "time left unknown")
        return ", ".join(parts)

    def event(self) -> dict:
        """The ``--json`` progress event (one JSON line on stderr)."""
        eta = self.eta_s
        return {
            "event": "progress",
            "phase": self.phase,
            "done": self.done,
            "total": self.total,
            "rate_per_s": round(self.rate, 4) if self.rate else None,
            "eta_s": round(eta) if eta is not None else None,
            "at": stamp(self.at),
        }


class Tracker:
    """A polled wait: the samples of the last :data:`WINDOW_S` give the rate of ``done``."""

    def __init__(self, phase: str, total: int, window_s: float = WINDOW_S) -> None:
        self.phase = phase
        self.total = total
        self.window_s = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def sample(self, done: int, total: int | None = None, now: float | None = None) -> Snapshot:
        now = time.time() if now is None else now
        if total is not None:
            self.total = max(total, done)
        self.samples.append((now, done))
        while len(self.samples) > 2 and self.samples[1][0] < now - self.window_s:
            self.samples.popleft()
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        rate = (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else None
        return Snapshot(self.phase, done, self.total, rate, now)


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    return f"{s // 3600} h {round(s % 3600 / 60)} min"


def rate_text(rate: float, unit: str) -> str:
    return f"{rate:.1f} {unit}/s" if rate >= 1 else f"{rate * 60:.1f} {unit}/min"


# --- the fill's own record: the rate a single look reads -----------------------------------------
_clients: dict[tuple[int, str], object] = {}


def broker_client(url: str):
    """This process's Redis client of the broker (never one inherited across a fork)."""
    import redis  # start-up: only the commands and workers that read or write the log

    key = (os.getpid(), url)
    if key not in _clients:
        _clients[key] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return _clients[key]


#: the field of a fill log entry holding how long its batch took (no tenant name holds a colon)
SECONDS_FIELD = ":seconds"


def record_fill(url: str, tenants: list[str], seconds: float) -> None:
    """One fill batch (the tenant of each row it wrote, the time it took), appended to
    :data:`FILL_LOG_KEY` (capped). A broker that refuses only costs the rate shown; the vectors are
    written either way."""
    counts: dict[str, int | float] = {}
    for t in tenants:
        counts[t] = counts.get(t, 0) + 1
    if not counts:
        return
    counts[SECONDS_FIELD] = round(seconds, 3)
    try:
        broker_client(url).xadd(FILL_LOG_KEY, counts, maxlen=FILL_LOG_MAXLEN, approximate=True)
    except Exception as exc:  # a Redis error of any kind: the fill goes on
        log.warning("vector fill: its progress was not recorded: %s", type(exc).__name__)


def fill_rates(entries: list, now: float, window_s: float = WINDOW_S) -> dict[str, float]:
    """Rows per second that got their vectors, per tenant, over the last ``window_s`` (pure), from
    the entries of :data:`FILL_LOG_KEY` (``XRANGE``: ids ``<ms>-<n>``, fields tenant -> rows and
    the batch's seconds). The time runs from the start of the tenant's first batch in the window
    (logged when it ended, less its seconds) to ``now``: a fill that stalled slows its rate down
    instead of keeping the last one."""
    rows: dict[str, int] = {}
    start: dict[str, float] = {}
    for entry_id, raw in entries:
        t = int(_str(entry_id).split("-", 1)[0]) / 1000
        fields = {_str(k): _str(v) for k, v in raw.items()}
        took = float(fields.pop(SECONDS_FIELD, 0))
        if t - took < now - window_s:
            continue
        for tenant, n in fields.items():
            rows[tenant] = rows.get(tenant, 0) + int(n)
            start.setdefault(tenant, t - took)
    return {tenant: n / max(now - start[tenant], 1.0) for tenant, n in rows.items()}


def read_fill_rates(client, now: float | None = None, window_s: float = WINDOW_S) -> dict[str, float]:
    now = time.time() if now is None else now
    entries = client.xrange(FILL_LOG_KEY, min=f"{int((now - window_s) * 1000)}", max="+")
    return fill_rates(entries, now, window_s)


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
