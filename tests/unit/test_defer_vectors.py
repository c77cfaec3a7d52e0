"""Which documents are stored before their vectors: the policy × document kind matrix, and the
fill's batch statement (rows without any vector first, then source, symbols, the rest)."""

import pytest

from ragline.ingest.pipeline import defers_vectors
from ragline.ingest.reembed import BATCH_SQL, FILL_ROWS, REEMBED_ROWS
from ragline.shared.worker import pending_vectors


@pytest.mark.parametrize(
    ("policy", "code", "deferred"),
    [
        ("code", True, True),
        ("code", False, False),
        ("all", True, True),
        ("all", False, True),
        ("none", True, False),
        ("none", False, False),
    ],
)
def test_the_policy_decides_per_document_kind(policy, code, deferred):
    assert defers_vectors(policy, code) is deferred


def test_the_fill_and_the_reembedding_share_one_batch_statement():
    fill, reembed = BATCH_SQL.format(rows=FILL_ROWS), BATCH_SQL.format(rows=REEMBED_ROWS)
    assert pending_vectors.PREDICATE in fill and pending_vectors.PREDICATE not in reembed
    assert "c.embedding IS NOT NULL" in REEMBED_ROWS  # disjoint: a row is the fill's or the re-embedding's
    order = fill[fill.index("ORDER BY") :]
    assert order.index("c.embedding IS NOT NULL") < order.index("%(source)s") < order.index("%(symbols)s")


@pytest.mark.parametrize(
    ("seconds_per_batch", "budget", "left", "batches"),
    [
        (1.0, 100.0, 10, 4),  # a quick machine: the batch count ends the task
        (160.0, 300.0, 10, 2),  # a loaded one: the second batch crosses the budget, no third starts
        (700.0, 300.0, 10, 1),  # one batch slower than the budget still runs (at least one)
        (1.0, 100.0, 2, 2),  # nothing left: the rows end it
        (1.0, 0.0, 10, 1),
    ],
)
def test_a_fill_starts_no_batch_after_its_time_budget(seconds_per_batch, budget, left, batches):
    from ragline.ingest.reembed import fill_batches

    now = [0.0]
    ran = []

    def batch():
        if len(ran) == left:
            return None
        ran.append(1)
        now[0] += seconds_per_batch
        return 128, 120

    written, sent = fill_batches(batch, 4, budget, 0.0, clock=lambda: now[0])
    assert len(ran) == batches and (written, sent) == (128 * batches, 120 * batches)
