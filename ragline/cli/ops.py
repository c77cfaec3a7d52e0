"""`ragline metrics`: a snapshot of every pool's Prometheus metrics, read from its multiprocess files."""

from __future__ import annotations

import json

import typer

from ragline.cli.common import columns, console, echo
from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.sdk.names import POOLS

app = typer.Typer()


def summarize(settings: Settings) -> list[dict]:
    """One row per (pool, metric, labels): counters and gauges as values, histograms as count/sum/mean;
    per pool only the metrics it records (:func:`recorded`)."""
    from ragline.shared.stack.metrics_endpoint import collectors  # start-up: psutil
    from ragline.shared.worker.metrics_server import (  # start-up: loads prometheus_client
        queue_depths,
        snapshot_text,
    )

    rows: list[dict] = []
    for pool, text in snapshot_text(settings, extra=collectors).items():
        rows += pool_rows(pool, text.decode())
    try:  # live queue depth straight from the broker, whether or not a metrics server scraped it
        depths = queue_depths([q for qs in POOLS.values() for q in qs], settings.effective_redis_url())
        rows = [r for r in rows if r["metric"] != "rag_queue_depth"]
        rows += [
            {
                "pool": pool,
                "metric": "rag_queue_depth",
                "labels": {"queue": q},
                "type": "gauge",
                "value": float(depths[q]),
            }
            for pool, qs in POOLS.items()
            for q in qs
        ]
    except Exception:  # broker down: the snapshot still shows what the files hold
        pass
    return rows


def pool_rows(pool: str, text: str) -> list[dict]:
    """The rows of one pool's Prometheus text: its ``rag_`` families that :func:`recorded` keeps."""
    from prometheus_client.parser import text_string_to_metric_families  # start-up: loads prometheus_client

    rows: list[dict] = []
    for family in text_string_to_metric_families(text):
        if family.name.startswith("rag_"):
            family_rows = _family_rows(pool, family)
            rows += family_rows if recorded(family_rows) else []
    return rows


def recorded(family_rows: list[dict]) -> bool:
    """Whether a pool's processes recorded a metric. Every process that imports the metrics module
    declares every metric, and a series without labels exists from then on at zero: in a pool that
    never touches it (the query path's counters in the ingest pool) it stays an unlabelled zero. A
    labelled series exists only once code running in the pool recorded it."""
    return any(r["labels"] or (r["count"] if r["type"] == "histogram" else r["value"]) for r in family_rows)


def _family_rows(pool: str, family) -> list[dict]:
    if family.type != "histogram":
        return [
            {"pool": pool, "metric": s.name, "labels": dict(s.labels), "type": family.type, "value": s.value}
            for s in family.samples
            if not s.name.endswith("_created")
        ]
    by_labels: dict[tuple, dict] = {}
    for s in family.samples:
        labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        entry = by_labels.setdefault(labels, {})
        if s.name.endswith("_count"):
            entry["count"] = s.value
        elif s.name.endswith("_sum"):
            entry["sum"] = s.value
    rows = []
    for labels, e in by_labels.items():
        count = e.get("count", 0.0)
        rows.append(
            {
                "pool": pool,
                "metric": family.name,
                "labels": dict(labels),
                "type": "histogram",
                "count": count,
                "sum": e.get("sum", 0.0),
                "mean": (e.get("sum", 0.0) / count) if count else None,
            }
        )
    return rows


HISTOGRAM_NOTE = "histograms: value = observations, mean = sum / count"


def render_lines(rows: list[dict]) -> list[str]:
    """The snapshot as aligned lines, never wrapped or cut at the terminal's width: a metric name and
    each label (``provider=local-e5``) stay one word to paste into Prometheus. A series' labels go one
    per line under each other, which keeps the usual snapshot within 80 columns."""
    table: list[tuple[str, ...]] = []
    for r in rows:
        labels = [f"{k}={v}" for k, v in r["labels"].items()] or [""]
        if r["type"] == "histogram":
            value, mean = f"{r['count']:g}", "-" if r["mean"] is None else f"{r['mean']:.2f}"
        else:
            value, mean = f"{r['value']:g}", ""
        table.append((r["pool"], r["metric"], labels[0], value, mean))
        table += [("", "", label, "", "") for label in labels[1:]]
    return columns(("pool", "metric", "labels", "value", "mean"), table)


@app.command()
def metrics(
    as_json: bool = typer.Option(False, "--json", help="machine-readable rows"),
    raw: bool = typer.Option(False, "--raw", help="Prometheus text format per pool"),
) -> None:
    """Print a snapshot of the pools' metrics.

    Retrieval latency, tokens, chunks, 429s, queue depth, read from the metrics files.
    """
    from ragline.shared.stack.metrics_endpoint import collectors  # start-up: psutil
    from ragline.shared.worker.metrics_server import (  # start-up: loads prometheus_client
        metrics_port,
        snapshot_text,
    )

    settings = get_settings()
    if raw:
        for pool, text in snapshot_text(settings, extra=collectors).items():
            print(f"# pool {pool} (served on {settings.ops.metrics_host}:{metrics_port(settings, pool)})")
            print(text.decode())
        return
    rows = summarize(settings)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False))
        return
    if not rows:
        console.print("no metrics yet: is the stack up (`ragline up`)?")
        return
    for line in [*render_lines(rows), HISTOGRAM_NOTE]:
        echo(line)
