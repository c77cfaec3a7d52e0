"""Permission changes in batches have one implementation (``ragline/operations/acl.py``): every path
that sends them (the producer clients, the operations layer the CLI and the ACL benchmark call)
sends the same request, and the CLI's commands parse options and hand their items over."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from ragline.operations import acl as acl_ops
from ragline.shared.sdk.client import RaglineClient, RaglineError, sync_acl_call
from ragline.shared.sdk.contracts import AclSyncItem, AclSyncRequest
from ragline.shared.sdk.names import TASK_ACL_SYNC

ITEMS = [
    {"tenant": "t", "doc_id": "a.md", "acl": ["hr"], "version": 3, "producer": "operator"},
    {"tenant": "t", "path_prefix": "hr/", "acl": [], "ts": 1_700_000_000.5, "producer": "operator"},
    {"tenant": "u", "doc_id": "b.md", "acl": ["x", "y"], "version": 9, "producer": "operator"},
]

REPLY = {"items": 1, "documents_updated": 1, "chunks_updated": 2, "ignored_stale": 0, "job_id": "j"}


class FakeResult:
    def __init__(self, reply: dict) -> None:
        self.reply = reply

    def get(self, timeout: float) -> dict:
        return self.reply

    def forget(self) -> None:
        pass


class FakeApp:
    """Records what is sent; every task answers with the reply the test chose."""

    def __init__(self, replies: list[dict] | None = None) -> None:
        self.sent: list[tuple[str, dict]] = []
        self.replies = list(replies or [])

    def send_task(self, name: str, args: list, **_: object) -> FakeResult:
        self.sent.append((name, args[0]))
        n = len(args[0]["items"])
        return FakeResult(self.replies.pop(0) if self.replies else REPLY | {"items": n})


@pytest.fixture
def worker_app(monkeypatch):
    """The worker's Celery app the operations layer sends with, replaced by a recorder."""
    from ragline.shared.worker import celery_app

    fake = FakeApp()
    monkeypatch.setattr(celery_app, "app", fake)
    return fake


def _client_payload() -> dict:
    app = FakeApp()
    RaglineClient(app=app, timeout=1).sync_acl(ITEMS)
    ((name, payload),) = app.sent
    assert name == TASK_ACL_SYNC
    return payload


def _async_client_payload() -> dict:
    from ragline.shared.sdk.async_client import AsyncRaglineClient

    sent: list[tuple[str, dict]] = []

    async def run() -> None:
        client = AsyncRaglineClient.__new__(AsyncRaglineClient)

        async def fake_run(call, timeout):
            sent.append((call.task, call.payload))

        client._run = fake_run  # type: ignore[method-assign]
        await client.sync_acl(ITEMS)

    asyncio.run(run())
    ((name, payload),) = sent
    assert name == TASK_ACL_SYNC
    return payload


def _operations_payload(worker_app: FakeApp) -> dict:
    acl_ops.sync(ITEMS, timeout=1, missing="pending")
    ((name, payload),) = worker_app.sent
    assert name == TASK_ACL_SYNC
    return payload


@pytest.mark.parametrize("path", ["client", "async client", "operations"])
def test_every_path_sends_the_one_request_of_the_contract(path, worker_app):
    payload = {
        "client": _client_payload,
        "async client": _async_client_payload,
        "operations": lambda: _operations_payload(worker_app),
    }[path]()
    assert payload == sync_acl_call(ITEMS).payload
    assert AclSyncRequest.model_validate(payload).model_dump(mode="json", exclude_none=True) == payload


@pytest.mark.parametrize(("missing", "force"), [("report", False), ("report", True), ("pending", False)])
def test_the_operators_options_reach_every_batch(worker_app, missing, force):
    acl_ops.sync(ITEMS, timeout=1, missing=missing, force=force, batch_size=2)
    assert [len(p["items"]) for _, p in worker_app.sent] == [2, 1]
    for _, payload in worker_app.sent:
        assert payload["missing"] == missing and payload["force"] is force
    assert [i for _, p in worker_app.sent for i in p["items"]] == sync_acl_call(ITEMS).payload["items"]


def test_batches_follow_the_setting_and_keep_the_order(monkeypatch):
    from ragline.shared.config.settings import reset_settings

    items = [AclSyncItem(tenant="t", doc_id=f"d{i}", acl=[], version=1) for i in range(5)]
    monkeypatch.setenv("RAGLINE_LIFECYCLE_ACL_SYNC_BATCH_SIZE", "2")
    reset_settings()
    try:
        assert [[it.doc_id for it in b] for b in acl_ops.batches(items)] == [
            ["d0", "d1"],
            ["d2", "d3"],
            ["d4"],
        ]
    finally:
        monkeypatch.delenv("RAGLINE_LIFECYCLE_ACL_SYNC_BATCH_SIZE")
        reset_settings()
    assert acl_ops.batches(items, 5) == [items]
    assert acl_ops.batches([], 5) == []


def test_replies_add_up():
    replies = [
        {
            "items": 2,
            "documents_updated": 1,
            "chunks_updated": 4,
            "ignored_stale": 1,
            "stale": [{"doc_id": "s1"}],
            "not_found": [{"tenant": "t", "doc_id": "n1"}],
            "unknown_tenants": ["z", "q"],
            "lag_s_max": 0.5,
            "job_id": "j1",
        },
        {
            "items": 3,
            "documents_updated": 2,
            "chunks_updated": 1,
            "ignored_stale": 0,
            "forced": 2,
            "pending": 1,
            "not_found": [{"tenant": "t", "doc_id": "n2"}],
            "unknown_tenants": ["q"],
            "lag_s_max": None,
            "job_id": "j2",
        },
        {"items": 1, "documents_updated": 0, "chunks_updated": 0, "ignored_stale": 0, "lag_s_max": 0.7},
    ]
    assert acl_ops.add_up(replies) == {
        "items": 6,
        "documents_updated": 3,
        "chunks_updated": 5,
        "ignored_stale": 1,
        "forced": 2,
        "pending": 1,
        "stale": [{"doc_id": "s1"}],
        "not_found": [{"tenant": "t", "doc_id": "n1"}, {"tenant": "t", "doc_id": "n2"}],
        "unknown_tenants": ["q", "z"],
        "lag_s_max": 0.7,
        "batches": 3,
        "job_ids": ["j1", "j2", None],
    }
    assert acl_ops.add_up([])["lag_s_max"] is None


def test_a_refused_batch_raises_the_clients_error(worker_app):
    worker_app.replies = [REPLY, {"ok": False, "error": "refused", "detail": "version too far ahead"}]
    with pytest.raises(RaglineError, match="version too far ahead"):
        acl_ops.sync(ITEMS, timeout=1, batch_size=2)


def test_the_operators_items_get_a_time_and_the_operator_as_producer():
    item = AclSyncItem(tenant="t", doc_id="d", acl=["g"], version=4)
    assert acl_ops.operator_item(item, 1_700_000_000.0).model_dump(exclude_none=True) == {
        "tenant": "t",
        "doc_id": "d",
        "acl": ["g"],
        "version": 4,
        "ts": 1_700_000_000.0,
        "producer": "operator",
    }
    own = AclSyncItem(tenant="t", doc_id="d", acl=["g"], ts=1_600_000_000.0, producer="hr-connector")
    assert acl_ops.operator_item(own, 1_700_000_000.0) == own


@pytest.fixture
def handed_over(monkeypatch):
    """What the CLI's acl commands hand to the operations layer (nothing is sent)."""
    from ragline.cli import lifecycle

    calls: list[dict] = []

    def fake_sync(items, timeout, **options):
        calls.append({"items": list(items), "timeout": timeout, **options})
        return acl_ops.add_up([{"items": len(items), "documents_updated": len(items), "chunks_updated": 0}])

    monkeypatch.setattr(acl_ops, "sync", fake_sync)
    monkeypatch.setattr(lifecycle, "reload_app", lambda: None)
    return calls


@pytest.mark.parametrize(
    ("flags", "missing", "force"),
    [([], "report", False), (["--pending"], "pending", False), (["--force"], "report", True)],
)
def test_acl_sync_hands_the_files_items_to_the_operations_layer(handed_over, tmp_path, flags, missing, force):
    from ragline.cli import app as cli

    f = tmp_path / "acl.jsonl"
    f.write_text(
        "\n".join(
            [
                json.dumps({"tenant": "t", "doc_id": "a", "acl": ["x"]}),
                "# a comment",
                json.dumps({"tenant": "t", "doc_id": "a", "acl": ["y"]}),
                json.dumps({"tenant": "t", "doc_id": "b", "acl": [], "version": 5, "producer": "hr"}),
            ]
        )
    )
    run = CliRunner().invoke(cli, ["acl", "sync", str(f), "--json", "--timeout", "9", *flags])
    assert run.exit_code == 0, run.output
    (call,) = handed_over
    assert call["timeout"] == 9 and call["missing"] == missing and call["force"] is force
    first, second, third = call["items"]
    assert first.producer == second.producer == "operator" and third.producer == "hr"
    assert first.effective_version < second.effective_version  # the later line wins
    assert third.version == 5 and third.ts is not None  # its lag is measured from the send
    assert json.loads(run.stdout.strip().splitlines()[-1])["documents_updated"] == 3


def test_acl_set_hands_one_operator_item_to_the_operations_layer(handed_over):
    from ragline.cli import app as cli

    run = CliRunner().invoke(cli, ["acl", "set", "a.md", "--tenant", "t", "--acl", "hr,it", "--version", "7"])
    assert run.exit_code == 0, run.output
    (call,) = handed_over
    (item,) = call["items"]
    assert (item.tenant, item.doc_id, item.acl, item.version, item.producer) == (
        "t",
        "a.md",
        ["hr", "it"],
        7,
        "operator",
    )
    assert call["missing"] == "report" and call["force"] is False
