"""Progress of a long wait (``shared/worker/progress.py``): rows done, the rate over a window, the
time left, a UTC time on each line; the fill's own log gives the rate a single look reads."""

from __future__ import annotations

import re

from ragline.cli.progress import Reporter, awaiting_text, vector_rows
from ragline.shared.worker.progress import SECONDS_FIELD, Snapshot, Tracker, fill_rates

T0 = 1_800_000_000.0


def test_a_tracker_measures_the_rate_over_its_window_and_the_time_left():
    t = Tracker("vectors", 1000, window_s=600)
    first = t.sample(0, now=T0)
    assert first.rate is None and first.eta_s is None and "rate not measured yet" in first.line()
    snap = t.sample(120, now=T0 + 60)  # 2 rows/s
    assert snap.rate == 2.0 and snap.eta_s == 440.0
    line = snap.line()
    assert re.match(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ vectors: 120/1000 rows \(12%\), 2\.0 rows/s, about 7 min left$",
        line,
    )
    # samples older than the window no longer count: the rate follows the recent pace
    t.sample(150, now=T0 + 700)
    later = t.sample(160, now=T0 + 800)
    assert 0 < later.rate < 1 and "rows/min" in later.line()
    assert later.event() | {"at": None} == {
        "event": "progress",
        "phase": "vectors",
        "done": 160,
        "total": 1000,
        "rate_per_s": round(later.rate, 4),
        "eta_s": round(840 / later.rate),
        "at": None,
    }
    assert Snapshot("vectors", 5, 5).eta_s == 0.0


def test_the_fill_log_gives_each_tenant_its_rate_from_its_first_batch_to_now():
    def entry(t: float, seconds: float, **rows: int) -> tuple[bytes, dict]:
        fields = {k.encode(): str(v).encode() for k, v in rows.items()}
        return (f"{int(t * 1000)}-0".encode(), fields | {SECONDS_FIELD.encode(): str(seconds).encode()})

    entries = [
        entry(T0 - 2000, 10, a=500),  # outside the window
        entry(T0 - 100, 20, a=128, b=10),
        entry(T0 - 40, 20, a=128),
    ]
    rates = fill_rates(entries, T0, window_s=600)
    assert rates == {"a": 256 / 120, "b": 10 / 120}
    assert fill_rates([], T0) == {}
    # a stalled fill: its rate falls as time passes without a batch
    assert fill_rates(entries, T0 + 480, window_s=600)["a"] < rates["a"]


def test_status_rows_say_rate_and_time_left_or_that_none_is_measured():
    assert vector_rows({"t": 300}, {"t": 0.5}) == [
        (
            "vectors t",
            "300 rows awaiting vectors (searchable lexically until filled), 30.0 rows/min, about 10 min left",
        )
    ]
    assert awaiting_text(3, None).endswith("fill rate not measured yet")


def test_a_reporter_prints_each_change_and_a_heartbeat_while_nothing_changes(capsys):
    r = Reporter(as_json=True, heartbeat_s=30)
    for done, at in [(0, T0), (0, T0 + 10), (5, T0 + 12), (5, T0 + 20), (5, T0 + 45)]:
        r.show(Snapshot("vectors", done, 10, None, at))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(line.startswith('{"event": "progress"') for line in lines)
