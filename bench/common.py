"""Shared helpers of the benchmarks: a private embedded stack, an in-process worker, targets,
the machine's description, JSON results and PNG plots.

Every benchmark measures ragline and its baseline side by side in the same run, so the
ratio holds even on a busy machine; the absolute numbers depend on the load recorded in
:func:`machine`.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SHARED_CPU_NOTE = (
    "CPU shared with other engineers' test runs while this was measured (see load_average_start)"
)

QUIET_LOGGERS = ("celery.app.trace", "celery.worker.strategy", "ragline.query", "ragline.ingest")

#: set by the smoke tests: a worker consuming every queue already runs in this process
EXTERNAL_WORKER = False


def _variables(*settings: str) -> tuple[str, ...]:
    """Every environment name of the settings ``group.field``: derived and platform ones."""
    from ragline.shared.config.settings import Settings

    return tuple(name for setting in settings for name in Settings.env_names(*setting.split(".")))


# ------------------------------------------------------------------------------------ machine


def machine(conn=None) -> dict[str, Any]:
    """Where the numbers come from: CPU, memory, load at start, versions."""
    import psutil

    cpu_model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    desc: dict[str, Any] = {
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "note": SHARED_CPU_NOTE,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if conn is not None:
        row = conn.execute(
            "SELECT current_setting('server_version') AS pg,"
            " (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector"
        ).fetchone()
        desc["postgres"] = row["pg"]
        desc["pgvector"] = row["pgvector"]
    return desc


# ------------------------------------------------------------------------------------- corpus
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "tydi-ru-dev" / "corpus.jsonl"
_FALLBACK = (
    "Правовое государство — государство, в котором действует верховенство закона, а власть"
    " ограничена правами человека и независимым судом. "
) * 3


def passages(n: int, prefix: str = "", max_chars: int | None = None, min_chars: int = 200) -> list[str]:
    """``n`` real Russian passages (tydi-ru-dev, cycled), each ``prefix + i``-tagged when a prefix is
    given (new to the embedding cache), cut at ``max_chars``. Passages under ``min_chars`` (a few
    one-liners) are left out, so every benchmark document is at least a typical short chunk."""
    try:
        base = [json.loads(line)["text"] for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
        base = [t for t in base if len(t) >= min_chars] or [_FALLBACK]
    except FileNotFoundError:
        base = [_FALLBACK]
    out = [(f"{prefix}{i}. " if prefix else "") + base[i % len(base)] for i in range(n)]
    return [t[:max_chars] for t in out] if max_chars else out


# -------------------------------------------------------------------------------------- stack
@contextmanager
def embedded_stack() -> Iterator[Any]:
    """Embedded Postgres + Redis in a temporary ragline home, migrated; stopped and removed after.

    Must run before anything caches settings pointing elsewhere (``run_all`` calls it first).
    """
    home = Path(tempfile.mkdtemp(prefix="rl-bench-"))
    # whatever name the caller set them by: the home is this one, the services are embedded
    cleared = _variables("services.home", "services.database_url", "services.redis_url")
    saved = {k: os.environ.get(k) for k in cleared}
    for var in cleared:
        os.environ.pop(var, None)
    os.environ["RAGLINE_SERVICES_HOME"] = str(home)
    os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")
    from ragline.shared.config.settings import get_settings, reset_settings
    from ragline.shared.stack import services
    from ragline.shared.worker import db, providers

    reset_settings()
    providers.reset()
    db.reset()
    settings = get_settings()
    try:
        with services.embedded_stack(settings):
            yield settings
    finally:
        shutil.rmtree(home, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_settings()


@contextmanager
def worker(queues: tuple[str, ...], concurrency: int = 2) -> Iterator[None]:
    """An in-process Celery worker (threads pool) on ``queues``; a no-op under the smoke tests."""
    if EXTERNAL_WORKER:
        yield
        return
    from celery.contrib.testing.worker import start_worker

    from ragline.shared.worker.celery_app import app
    from ragline.shared.worker.kombu_redis import reuse_clients

    for name in QUIET_LOGGERS:  # per-task INFO lines would go to the benchmark's terminal
        logging.getLogger(name).setLevel(logging.WARNING)

    for name in app.conf.include:
        __import__(name)
    reuse_clients()  # an in-process worker is a worker process: what worker_init applies in `ragline worker`
    with start_worker(
        app,
        pool="threads",
        concurrency=concurrency,
        perform_ping_check=False,
        queues=list(queues),
        loglevel="WARNING",
        shutdown_timeout=60,
    ):
        yield


@contextmanager
def prefork_pools(ready: dict[str, tuple[str, dict]], timeout: float = 120.0) -> Iterator[None]:
    """The real ``ragline up`` workers of the pools named in ``ready`` (prefork, own process groups,
    the current ``RAGLINE_*`` environment), started in the benchmark's ragline home and stopped after.
    Each pool is ready once its ``(task, payload)`` round-trips. A no-op under the smoke tests (the
    session worker consumes every queue)."""
    if EXTERNAL_WORKER:
        yield
        return
    from ragline.shared.config.settings import get_settings
    from ragline.shared.stack import processes
    from ragline.shared.worker.celery_app import app

    settings = get_settings()
    names = {name for pool in ready for name in processes.pool_process_names(settings, pool)}
    processes.start_all(settings, only=names)
    try:
        for task, payload in ready.values():
            app.send_task(task, args=[payload]).get(timeout=timeout)
        yield
    finally:
        processes.stop_all(settings, only=names)


@contextmanager
def settings_env(**overrides: object) -> Iterator[None]:
    """Settings overrides by keyword (``rrf_k``, ``retrieval_rrf_k``) for the duration, set as their
    derived variables (same process: the in-process worker sees them)."""
    from ragline.shared.config.settings import reset_settings, variable
    from ragline.shared.worker import providers

    names = {k: variable(k) for k in overrides}
    saved = {k: os.environ.get(names[k]) for k in overrides}
    for k, v in overrides.items():
        os.environ[names[k]] = str(v)
    reset_settings()
    providers.reset()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(names[k], None)
            else:
                os.environ[names[k]] = v
        reset_settings()
        providers.reset()


def settle(*tables: str) -> None:
    """Vacuum and analyse ``tables``, then checkpoint: the timed queries after a load then run on
    the statistics and visibility a production table has, not under the autovacuum the load set off."""
    from ragline.shared.worker import db

    with db.connect() as conn:  # autocommit, outside the pool: VACUUM runs in no transaction
        for table in tables:
            conn.execute(f"VACUUM (ANALYZE) {table}")
    checkpoint()


def checkpoint() -> None:
    """Flush dirty pages, so a timed phase does not pay for the writes of the one before."""
    from ragline.shared.worker import db

    with db.connection() as conn:
        conn.execute("CHECKPOINT")


def wait_documents_ready(tenant: str, n: int, timeout: float, poll_s: float = 0.2) -> tuple[float, list[str]]:
    """Block until all ``n`` documents of ``tenant`` are ready or failed.

    Returns the monotonic time they were done and the error of each failed document (a
    benchmark reports them instead of hiding them).
    """
    from ragline.shared.worker import db

    deadline = time.monotonic() + timeout
    while True:
        with db.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'ready') AS ready,"
                " count(*) FILTER (WHERE status = 'failed') AS failed"
                " FROM documents WHERE tenant = %s",
                (tenant,),
            ).fetchone()
        if row["ready"] + row["failed"] >= n:
            done = time.monotonic()
            errors: list[str] = []
            if row["failed"]:
                with db.connection() as conn:
                    errors = [
                        r["error"]
                        for r in conn.execute(
                            "SELECT doc_id || ': ' || coalesce(error, '?') AS error FROM documents"
                            " WHERE tenant = %s AND status = 'failed' ORDER BY doc_id",
                            (tenant,),
                        ).fetchall()
                    ]
            return done, errors
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"only {row['ready']} ready and {row['failed']} failed of {n} documents in {tenant}"
            )
        time.sleep(poll_s)


# ------------------------------------------------------------------------------------ targets
_OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}


@dataclass
class Target:
    """One pass/fail line: ``measured <op> threshold``."""

    name: str
    measured: float
    op: str
    threshold: float
    unit: str = ""
    note: str = ""
    passed: bool = field(init=False)

    def __post_init__(self) -> None:
        self.measured = round(float(self.measured), 4)
        self.threshold = round(float(self.threshold), 4)
        self.passed = _OPS[self.op](self.measured, self.threshold)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured": self.measured,
            "op": self.op,
            "threshold": self.threshold,
            "unit": self.unit,
            "passed": self.passed,
            **({"note": self.note} if self.note else {}),
        }


#: the query queue's allowance: what ragline adds on top of SQL, against a bare Celery round trip
QUEUE_OVERHEAD_FACTOR = 1.25
QUEUE_OVERHEAD_RULE = f"p95 queue - p95 direct <= {QUEUE_OVERHEAD_FACTOR:g} x p95 bare Celery round trip"


def queue_overhead(label: str, queue_p95: float, direct_p95: float, bare_p95: float) -> tuple[dict, Target]:
    """The query queue judged by what ragline adds: ``queue p95 - direct p95`` (the task, its
    validation, pool and result on top of the same SQL) against ``QUEUE_OVERHEAD_FACTOR`` times the
    p95 of a no-op task on the same pool kind and broker (``bench.noop_worker``), measured in the
    same run. A fixed allowance in milliseconds would judge the VM's Celery, not ragline: a bare
    round trip alone took 7-12 ms on the shared two-core VM the results come from.
    Returns the three numbers with the flag, and the target."""
    overhead = queue_p95 - direct_p95
    target = Target(f"{label}: {QUEUE_OVERHEAD_RULE}", overhead, "<=", QUEUE_OVERHEAD_FACTOR * bare_p95, "ms")
    record = {
        "queue_p95_ms": round(float(queue_p95), 3),
        "direct_p95_ms": round(float(direct_p95), 3),
        "bare_celery_p95_ms": round(float(bare_p95), 3),
        "overhead_p95_ms": target.measured,
        "allowed_ms": target.threshold,
        "passed": target.passed,
    }
    return record, target


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of a non-empty list."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def latency_summary(ms: list[float]) -> dict[str, float]:
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "max_ms": round(max(ms), 3),
    }


# ------------------------------------------------------------------------------------ results
def result(
    name: str,
    title: str,
    params: dict,
    raw: dict,
    targets: list[Target],
    machine_desc: dict,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "benchmark": name,
        "title": title,
        "passed": all(t.passed for t in targets),
        "targets": [t.as_dict() for t in targets],
        "params": params,
        "raw": raw,
        "machine": {**machine_desc, "load_average_end": [round(x, 2) for x in os.getloadavg()]},
        "notes": notes or [],
    }


def write_json(data: dict, out_dir: Path = RESULTS) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{data['benchmark']}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=float) + "\n")
    return path


def bar_plot(
    path: Path,
    title: str,
    groups: dict[str, dict[str, float]],
    ylabel: str,
    targets: list[Target] | None = None,
    log: bool = False,
) -> Path:
    """Grouped bars: ``{group: {series: value}}`` (ragline next to its baseline), targets in the caption."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    series = list(dict.fromkeys(s for g in groups.values() for s in g))
    x = np.arange(len(groups))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    for i, s in enumerate(series):
        present = [
            (j, groups[g][s]) for j, g in enumerate(groups) if s in groups[g]
        ]  # a group may lack a series
        xs = [x[j] + (i - (len(series) - 1) / 2) * width for j, _ in present]
        vals = [v for _, v in present]
        bars = ax.bar(xs, vals, width, label=s)
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in vals], fontsize=8, padding=2)
    # long group names wrap instead of running into their neighbours
    ax.set_xticks(x, [textwrap.fill(g, 22) for g in groups])
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8)
    ax.margins(y=0.15)
    if targets:
        caption = "\n".join(
            f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.measured:g} {t.op} {t.threshold:g}"
            f"{(' ' + t.unit) if t.unit else ''}"
            for t in targets
        )
        fig.text(0.01, 0.01, caption, fontsize=7.5, family="monospace", va="bottom")
        fig.subplots_adjust(bottom=0.1 + 0.04 * len(targets))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
