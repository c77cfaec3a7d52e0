"""The wait for the fill task to embed the rows stored before their vectors is one function
(``ragline/operations/snapshots.py``, ``wait_for_vectors``): the code evaluation and ``ragline demo``
both call it; the demo only prints its progress."""

from __future__ import annotations

import inspect
import itertools
import re
import time
from contextlib import nullcontext

import pytest

from ragline.operations import snapshots


@pytest.fixture
def pending(monkeypatch):
    """``by_tenant`` answers with the next count of the list the test sets (the last one repeats)."""
    from ragline.shared.worker import db, pending_vectors

    counts: list[int] = []
    asked: list[int] = []

    def by_tenant(conn, budget=None, layers=None):
        n = counts.pop(0) if len(counts) > 1 else counts[0]
        asked.append(n)
        return {"t": n, "other": 99} if n else {"other": 99}

    monkeypatch.setattr(db, "connection", lambda: nullcontext(None))
    monkeypatch.setattr(pending_vectors, "by_tenant", by_tenant)
    return counts, asked


def test_it_returns_once_no_row_of_the_tenant_awaits_its_vector(pending):
    counts, asked = pending
    counts[:] = [5, 5, 3, 0]
    shown: list[int] = []
    snapshots.wait_for_vectors("t", time.monotonic() + 60, every_s=0, on_pending=shown.append)
    assert asked == [5, 5, 3, 0]
    assert shown == [5, 3]  # each change once; another tenant's rows never counted


def test_at_the_deadline_it_raises(pending):
    counts, _ = pending
    counts[:] = [4]
    with pytest.raises(TimeoutError, match="vectors of t"):
        snapshots.wait_for_vectors("t", time.monotonic() - 1, every_s=0)


def test_nothing_pending_returns_at_once(pending):
    counts, asked = pending
    counts[:] = [0]
    snapshots.wait_for_vectors("t", time.monotonic() - 1, every_s=0, on_pending=pytest.fail)
    assert asked == [0]


def test_the_demo_waits_through_it_and_prints_its_progress(monkeypatch, pending, capsys):
    from ragline.cli import demo, progress

    counts, asked = pending
    counts[:] = [7, 2]
    clock = itertools.count()  # one second per reading: the deadline passes on the third poll
    monkeypatch.setattr(time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(time, "sleep", lambda s: None)
    demo._wait_for_vectors("t", 2)
    assert asked == [7, 2, 2]
    captured = capsys.readouterr()
    assert "7 rows awaiting vectors" in captured.out
    assert "vectors still being filled after 2s" in captured.out
    # the progress lines: a time, rows given their vectors of those awaiting, a rate and time left
    lines = [line for line in captured.err.splitlines() if " vectors: " in line]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ vectors: 0/7 rows \(0%\)", lines[0]), lines
    assert any(" vectors: 5/7 rows (71%)" in line and "left" in line for line in lines[1:]), lines
    assert "pending_vectors" not in inspect.getsource(demo)  # no second copy of the wait
    assert "Tracker" in inspect.getsource(progress.wait_for_vectors)


def test_the_demo_answers_first_while_the_vectors_fill_then_with_them(monkeypatch, capsys, tmp_path):
    """``make run`` on a repository: the first answers come right after the ingest, from the lexical
    and structural search, before the wait for the fill; then each question again as soon as the
    layers it is asked of have their vectors: the questions about the design once the docs are
    embedded (the fill's prose-first order), while the code still waits, the code question last."""
    from ragline.cli import demo
    from ragline.ingest import git as git_mod
    from ragline.shared.config.settings import get_settings

    code = get_settings().code
    events: list[tuple] = []
    awaiting = {"docs": 30, code.source_layer: 10}

    def count(layers):
        return sum(n for layer, n in awaiting.items() if layers is None or layer in layers)

    summary = dict.fromkeys(("chunks", "embedded", "failed", "skipped_unchanged"), 0)
    monkeypatch.setattr(demo, "reload_app", lambda: None)
    monkeypatch.setattr("ragline.ingest.roots.grant_roots", lambda *a: None)
    monkeypatch.setattr(git_mod, "is_repository", lambda p: True)
    monkeypatch.setattr(demo, "_ingest_repository", lambda *a: summary | {"documents": 3, "errors": []})
    monkeypatch.setattr(demo, "tenant_awaiting", lambda t, layers=None: lambda: count(layers))

    def wait(tenant, timeout_s, layers=None):
        events.append(("wait", tuple(layers)))
        awaiting.update(dict.fromkeys(layers, 0))

    def ask(task, payload, timeout):
        q = demo.QUESTIONS.index(payload["query"])
        events.append((f"ask {q}", tuple(payload["layers"]), count(payload["layers"]), count(None)))
        return {"answer": "a [1]", "citations": [{"n": 1, "doc_id": "d", "start_line": 1}], "timings_ms": {}}

    monkeypatch.setattr(demo, "_wait_for_vectors", wait)
    monkeypatch.setattr(demo, "send_and_wait", ask)
    monkeypatch.setattr(demo, "print_answer", lambda q, res: None)
    assert demo._demo(tmp_path, "t") == 0
    docs, src = ("docs",), (code.source_layer, code.symbols_layer)
    assert events == [
        ("ask 0", docs, 30, 40),  # at once, lexically
        ("ask 1", docs, 30, 40),
        ("ask 2", src, 10, 40),
        ("wait", docs),
        ("ask 0", docs, 0, 10),  # with the docs' vectors, the code still awaiting
        ("ask 1", docs, 0, 10),
        ("wait", src),
        ("ask 2", src, 0, 0),
    ]
    out = capsys.readouterr().out
    assert "first answers" in out and "10 rows of other layers still await theirs" in out
