"""The time limit that stops CPU-bound Python code (shared/worker/time_limit.py): in the thread that
set it, any thread, never after its block, and through a library's ``except Exception``."""

from __future__ import annotations

import threading
import time

import pytest

from ragline.shared.worker.time_limit import TimeLimitExceeded, time_limit


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _swallowing(seconds: float) -> None:
    """A library loop that turns every Exception into a fallback and goes on."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            _spin(0.01)
        except Exception:  # noqa: BLE001, S110
            pass


@pytest.mark.parametrize("body", [_spin, _swallowing])
def test_a_cpu_bound_block_is_stopped_in_any_thread(body):
    outcome: dict[str, float | str] = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            with time_limit(0.2):
                body(30)
        except TimeLimitExceeded:
            outcome["stopped_after"] = time.monotonic() - t0

    thread = threading.Thread(target=run)  # not the main thread: no signal could reach it
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    assert outcome["stopped_after"] < 20  # the body would spin for 30 s


def test_no_exception_after_the_block_and_none_without_a_limit():
    with time_limit(0.05):
        _spin(0.01)
    _spin(0.3)  # the timer is cancelled: nothing is raised here
    with time_limit(0):
        _spin(0.1)
    with time_limit(None):
        _spin(0.01)


def test_an_outer_limit_stops_an_inner_block():
    with pytest.raises(TimeLimitExceeded), time_limit(0.1), time_limit(30):
        _spin(30)
    _spin(0.3)


def test_the_question_deadline_stops_a_cpu_bound_stage():
    """A stage that never reaches a cooperative check (a loop of pure Python) ends with the
    question's typed error shortly after the deadline, instead of running on."""
    from ragline.query.deadline import QuestionDeadlineExceeded, question_deadline

    t0 = time.monotonic()
    with pytest.raises(QuestionDeadlineExceeded), question_deadline(0.2):
        _spin(30)
    assert time.monotonic() - t0 < 20
