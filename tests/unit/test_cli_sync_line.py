"""The line ``ragline ingest REPO`` prints for every outcome a git sync returns (a re-run at the
commit already indexed used to crash the text output: it carries no file counts)."""

from __future__ import annotations

import pytest

from ragline.cli.ingest import sync_line

COMMIT = "a" * 40


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        (
            {"outcome": "ignored_duplicate", "commit": COMMIT, "job_id": None, "acl_updated": 3},
            "source s at aaaaaaaaaaaa: already indexed at this commit, no file queued, 3 documents given"
            " the new --acl",
        ),
        (
            {"outcome": "ignored_stale", "commit": COMMIT, "job_id": None, "recorded_commit": "b" * 40},
            "source s at aaaaaaaaaaaa: ignored_stale (the commit indexed is bbbbbbbbbbbb)",
        ),
        (
            {
                "outcome": "synced",
                "commit": COMMIT,
                "job_id": "j1",
                "enqueued": 2,
                "unchanged": 5,
                "pruned": 1,
            },
            "job j1: source s at aaaaaaaaaaaa: 2 files queued, 5 unchanged, 1 pruned, 0 skipped,"
            " 0 documents given the new --acl",
        ),
    ],
)
def test_every_sync_outcome_has_a_line(out, expected):
    assert sync_line("s", out) == expected
