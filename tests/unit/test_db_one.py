"""``db.one``: the row of a statement that always returns one, or an error naming the broken
statement instead of a None passed on to the caller's ``row["n"]``."""

import pytest

from ragline.shared.worker import db


class Cursor:
    def __init__(self, row):
        self.row = row

    def fetchone(self):
        return self.row


def test_the_row_is_returned():
    assert db.one(Cursor({"n": 3}))["n"] == 3


def test_no_row_is_an_error_not_none():
    with pytest.raises(LookupError, match="no row"):
        db.one(Cursor(None))
