"""The sender a task sees is the one the worker verified: the signer's role, whatever header the
producer sent; ``unsigned`` without signing; a worker's own retry keeps the first delivery's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ragline.shared.sdk.sender import HEADER, UNSIGNED, sender_of, stamp


@pytest.mark.parametrize(
    "claimed, signer, expected",
    [
        (None, None, UNSIGNED),
        ("operator", None, UNSIGNED),  # an unsigned stack: nobody's claim is checked, so none counts
        (None, "relay", "relay"),
        ("operator", "relay", "relay"),  # a relay's forged header is overwritten
        ("worker", "chat", "chat"),
        ("relay", "worker", "relay"),  # the worker's retry of a relay's message stays the relay's
        (None, "worker", "worker"),
        ("", "worker", "worker"),
        ("operator", "none", "none"),
    ],
)
def test_stamp_writes_the_verified_sender(claimed, signer, expected):
    headers = {} if claimed is None else {HEADER: claimed}
    stamp(headers, signer)
    assert headers[HEADER] == expected


def test_a_task_reads_the_stamped_sender():
    assert sender_of(SimpleNamespace(**{HEADER: "relay"}, headers=None)) == "relay"  # a worker's request
    assert sender_of(SimpleNamespace(headers={HEADER: "operator"})) == "operator"  # Task.apply(headers=)
    assert sender_of(SimpleNamespace(headers=None)) == UNSIGNED
    assert sender_of(SimpleNamespace(**{HEADER: 3}, headers=None)) == UNSIGNED
