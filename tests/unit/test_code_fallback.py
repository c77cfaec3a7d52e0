"""The retrieval contract's lexical code fallback (mode ``lexical_code``): a question without a
single term runs no statement at all."""

from __future__ import annotations

import pytest

from ragline.query.retrieval.search import search
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import SearchRequest


class NoDatabase:
    """A connection every use of which fails the test: executing, opening a transaction, even
    reading its state."""

    def __getattr__(self, name: str):
        raise AssertionError(f"the fallback touched the connection: {name}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AssertionError(f"the fallback touched the connection: {name} = {value!r}")


@pytest.mark.parametrize("query", ["", "   ", "?!", "-- ** ()", "…"])
def test_a_question_without_terms_runs_no_statement(query):
    req = SearchRequest(query=query, tenant="t", groups=["dev"], mode="lexical_code")
    resp = search(NoDatabase(), req, None, Settings())
    assert resp.hits == [] and not resp.degraded


def test_the_plain_lexical_mode_does_open_a_transaction():
    """What the test above guards against: the other modes begin their read-only transaction
    before they know whether a statement is needed."""
    req = SearchRequest(query="?!", tenant="t", groups=["dev"], mode="lexical")
    with pytest.raises(AssertionError, match="touched the connection"):
        search(NoDatabase(), req, None, Settings())
