"""One unit for versions and times: an integer as given, or an ISO 8601 time with its UTC offset,
which becomes Unix nanoseconds (the unit of the versions `ragline ingest` stores: file mtimes)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from ragline.ingest.acl_sync import producer_key
from ragline.shared.sdk.contracts import AclSyncItem, IngestEvent
from ragline.shared.sdk.sender import UNSIGNED


def _delete(version) -> IngestEvent:
    return IngestEvent(type="delete", tenant="t", doc_id="d", version=version)


def test_an_iso_time_is_a_version_in_unix_nanoseconds(tmp_path):
    assert _delete("2026-11-30T12:00:00Z").version == 1_796_040_000_000_000_000
    assert _delete("2026-11-30T15:00:00+03:00").version == 1_796_040_000_000_000_000
    assert _delete("2026-11-30T12:00:00.000001Z").version == 1_796_040_000_000_001_000
    assert _delete(7).version == 7 and _delete("7").version == 7  # integers as given
    # the same unit as a file's modification time, which `ragline ingest` stores as the version
    f = tmp_path / "a.md"
    f.write_text("x")
    os.utime(f, ns=(1_796_040_000_123_456_000, 1_796_040_000_123_456_000))
    when = datetime.fromtimestamp(f.stat().st_mtime_ns // 1000 / 1e6, UTC).isoformat()
    assert _delete(when).version == f.stat().st_mtime_ns


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2026-11-30T12:00:00", "needs its UTC offset"),  # which zone? refused, not guessed
        ("yesterday", "an integer or an ISO 8601 time"),
        (-1, "greater than or equal to 0"),
    ],
)
def test_a_version_that_is_neither_is_refused(value, message):
    with pytest.raises(ValidationError, match=message):
        _delete(value)


def test_acl_versions_and_times_take_iso_too():
    item = AclSyncItem(tenant="t", doc_id="d", acl=["g"], version="2026-11-30T12:00:00Z")
    assert item.version == 1_796_040_000_000_000_000 and producer_key(UNSIGNED, item) == "unsigned/sync"
    timed = AclSyncItem(tenant="t", doc_id="d", acl=["g"], ts="2026-11-30T12:00:00Z")
    assert timed.ts == 1_796_040_000.0 and producer_key(UNSIGNED, timed) == "unsigned/sync:ts"
    with pytest.raises(ValidationError, match="needs its UTC offset"):
        AclSyncItem(tenant="t", doc_id="d", acl=["g"], ts="2026-11-30 12:00")


def test_the_event_schema_says_what_a_version_may_be():
    prop = IngestEvent.model_json_schema()["properties"]["version"]
    assert {"type": "integer", "minimum": 0} in prop["anyOf"]
    assert {"type": "string", "format": "date-time"} in prop["anyOf"]
    assert "Unix nanoseconds" in prop["description"]
