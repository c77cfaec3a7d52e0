"""`ragline metrics`: a snapshot of every pool's Prometheus metrics, read from its multiprocess files."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.sdk.names import POOLS

app = typer.Typer()


def summarize(settings: Settings) -> list[dict]:
    """One row per (pool, metric, labels): counters and gauges as values, histograms as count/sum/mean."""
    from prometheus_client.parser import text_string_to_metric_families  # start-up: loads prometheus_client

    from ragline.shared.worker.metrics_server import (  # start-up: loads prometheus_client
        queue_depths,
        snapshot_text,
    )

    rows: list[dict] = []
    for pool, text in snapshot_text(settings).items():
        for family in text_string_to_metric_families(text.decode()):
            if not family.name.startswith("rag_"):
                continue
            if family.type == "histogram":
                by_labels: dict[tuple, dict] = {}
                for s in family.samples:
                    labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                    entry = by_labels.setdefault(labels, {})
                    if s.name.endswith("_count"):
                        entry["count"] = s.value
                    elif s.name.endswith("_sum"):
                        entry["sum"] = s.value
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
            else:
                for s in family.samples:
                    if s.name.endswith("_created"):
                        continue
                    rows.append(
                        {
                            "pool": pool,
                            "metric": s.name,
                            "labels": dict(s.labels),
                            "type": family.type,
                            "value": s.value,
                        }
                    )
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


def render_table(rows: list[dict]) -> Table:
    """The snapshot as a rich table whose metric names are never cut short.

    Rich shrinks every wrappable column to fit the terminal (80 columns when piped) and ends cut
    cells with an ellipsis, which turned ``rag_retrieval_latency_ms`` into ``rag_retrieval_laten…``:
    a name an operator cannot paste into Prometheus. The name column is therefore as wide as the
    longest name and never wraps; the labels, one per line, fold instead.
    """
    longest = max((len(r["metric"]) for r in rows), default=len("metric"))
    table = Table(caption="histograms: value = observations, mean = sum / count")
    table.add_column("pool", no_wrap=True)
    table.add_column("metric", no_wrap=True, min_width=longest)
    table.add_column("labels", overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("mean", justify="right", no_wrap=True)
    for r in rows:
        labels = "\n".join(f"{k}={v}" for k, v in r["labels"].items())
        if r["type"] == "histogram":
            mean = "-" if r["mean"] is None else f"{r['mean']:.2f}"
            table.add_row(r["pool"], r["metric"], labels, f"{r['count']:g}", mean)
        else:
            table.add_row(r["pool"], r["metric"], labels, f"{r['value']:g}", "")
    return table


@app.command()
def metrics(
    as_json: bool = typer.Option(False, "--json", help="machine-readable rows"),
    raw: bool = typer.Option(False, "--raw", help="Prometheus text format per pool"),
) -> None:
    """Print a snapshot of the pools' metrics.

    Retrieval latency, tokens, chunks, 429s, queue depth, read from the metrics files.
    """
    from ragline.shared.worker.metrics_server import (  # start-up: loads prometheus_client
        metrics_port,
        snapshot_text,
    )

    settings = get_settings()
    if raw:
        for pool, text in snapshot_text(settings).items():
            print(f"# pool {pool} (served on {settings.ops.metrics_host}:{metrics_port(settings, pool)})")
            print(text.decode())
        return
    rows = summarize(settings)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False))
        return
    Console().print(render_table(rows))
    if not rows:
        Console(stderr=True).print("no metrics yet: is the stack up (`ragline up`)?")
