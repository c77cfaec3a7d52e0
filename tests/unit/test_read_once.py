"""Every reader of a task result (client, CLI) deletes it from the backend once it has it."""

import pytest
from celery.exceptions import TimeoutError as CeleryTimeout

from ragline.shared.sdk.celery_base import read_once


class FakeResult:
    def __init__(self, outcome):
        self.outcome = outcome
        self.forgotten = False

    def get(self, timeout):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def forget(self):
        self.forgotten = True


def test_a_read_result_is_forgotten():
    res = FakeResult({"hits": []})
    assert read_once(res, 1) == {"hits": []}
    assert res.forgotten


def test_a_failed_task_is_forgotten_and_its_error_raised():
    res = FakeResult(ValueError("refused"))
    with pytest.raises(ValueError, match="refused"):
        read_once(res, 1)
    assert res.forgotten


def test_after_a_timeout_nothing_is_deleted_a_late_result_expires_on_its_own():
    res = FakeResult(CeleryTimeout("late"))
    with pytest.raises(CeleryTimeout):
        read_once(res, 1)
    assert not res.forgotten


def test_the_cli_reads_results_once():
    """The CLI's senders (and the operations layer's ACL batches) go through read_once, not AsyncResult.get."""
    import inspect

    from ragline.cli import common, lifecycle
    from ragline.operations import acl

    for fn in (common.send_and_wait, acl.sync, lifecycle._reembed):
        src = inspect.getsource(fn)
        assert "read_once(" in src and ".get(timeout" not in src, fn.__name__
