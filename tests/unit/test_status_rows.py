"""`ragline status` rows (pure): an open deferral window is shown, with what it means for search."""

from __future__ import annotations

from datetime import UTC, datetime

from ragline.cli.lifecycle import lifecycle_rows


def test_an_open_deferral_window_is_a_status_row():
    window = {
        "id": 7,
        "reason": "ingest acme",
        "started_at": datetime(2026, 12, 1, 2, 0, tzinfo=UTC),
    }
    rows = dict(lifecycle_rows({"queues": {"ingest": 3}, "index_deferral": window}))
    assert rows["queue ingest"] == "3 waiting"
    assert rows["HNSW index"].startswith(
        "deferred by a bulk load (ingest acme, window 7, since 2026-12-01 02:00:00)"
    )
    assert "exact until `ragline index build`" in rows["HNSW index"]
    assert "HNSW index" not in dict(lifecycle_rows({"queues": {}, "index_deferral": None}))
