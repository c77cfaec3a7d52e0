"""The decode gate on a real query worker, signed and unsigned (the full matrix over every pool is
``make chaos``: tests/chaos/test_attacks_decode_gate.py): pickle, YAML and msgpack bodies, a signed
body whose inner content type is pickle, garbage and non-message JSON pushed onto the queue, a body
that is no task body; each dropped, logged and counted, no pickle run, the worker up and answering."""

from __future__ import annotations

import pytest

from tests.chaos.test_attacks_decode_gate import drops_every_bad_message

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_the_query_pool_drops_what_is_not_json_and_keeps_consuming(stack, tmp_path, signed):
    row = drops_every_bad_message(stack, tmp_path, "query", signed)
    assert row.recovered == row.tasks_affected
