"""Permission changes in batches: a list of changes split into tasks of the configured size, all sent
to the acl queue at once (the control pool's processes apply them in parallel), the replies read once
and added up. ``ragline acl set|sync``, the ACL benchmark and any other caller send through here;
each batch's payload is the producer client's own (``shared/sdk/client.py``, ``sync_acl_call``), so
an operator's batch and a connector's ``RaglineClient.sync_acl`` are the same request."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import AclSyncItem

#: the producer of `ragline acl set` / `acl sync` changes (their versions are compared only with its own)
OPERATOR = "operator"

#: the counters of one reply that add up over batches
COUNTS = ("items", "documents_updated", "chunks_updated", "ignored_stale", "forced", "pending")


def operator_item(item: AclSyncItem, now: float) -> AclSyncItem:
    """``item`` as the operator sends it: without a time, ``now`` (its lag is measured from here);
    without a producer, :data:`OPERATOR`."""
    update: dict[str, Any] = ({} if item.ts else {"ts": now}) | (
        {} if item.producer else {"producer": OPERATOR}
    )
    return item.model_copy(update=update) if update else item


def read_jsonl(lines: Iterable[str], now_us: int | None = None) -> list[AclSyncItem]:
    """Parse ``acl sync`` input: one JSON object per line; blank lines and ``#`` comments skipped.

    With ``now_us`` (epoch microseconds), a line without ``version`` or ``ts`` gets the time
    ``now_us`` plus its line number in microseconds: for one document, the later line wins.
    """
    out: list[AclSyncItem] = []
    for n, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            obj = json.loads(line)
            if (
                now_us is not None
                and isinstance(obj, dict)
                and obj.get("version") is None
                and not obj.get("ts")
            ):
                obj["ts"] = (now_us + n) / 1_000_000
            out.append(AclSyncItem.model_validate(obj))
        except ValueError as exc:
            raise ValueError(f"line {n}: {exc}") from None
    return out


def read_operator_file(lines: Iterable[str], now: float) -> list[AclSyncItem]:
    """The changes of an ``acl sync`` file (:func:`read_jsonl`), as the operator sends them. A line
    without a version or time gets ``now`` plus its line number in microseconds, so for one document
    the later line wins, also across batches applied in parallel. ``ValueError`` names the bad line."""
    return [operator_item(it, now) for it in read_jsonl(lines, now_us=round(now * 1_000_000))]


def batches(items: Sequence[AclSyncItem], size: int | None = None) -> list[list[AclSyncItem]]:
    """``items`` in tasks of ``size`` (default ``RAGLINE_LIFECYCLE_ACL_SYNC_BATCH_SIZE``), in order."""
    size = size or get_settings().lifecycle.acl_sync_batch_size
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def add_up(replies: Sequence[dict]) -> dict:
    """One result for the replies of a request's batches: counts summed, the stale and not-found
    items listed in batch order, the unknown tenants once each, the largest lag, every job id."""
    total: dict[str, Any] = dict.fromkeys(COUNTS, 0) | {
        "stale": [],
        "not_found": [],
        "unknown_tenants": [],
        "lag_s_max": None,
        "batches": len(replies),
        "job_ids": [],
    }
    unknown: set[str] = set()
    for out in replies:
        for k in COUNTS:
            total[k] += out.get(k, 0)
        total["not_found"] += out.get("not_found", [])
        total["stale"] += out.get("stale", [])
        unknown.update(out.get("unknown_tenants", []))
        if out.get("lag_s_max") is not None:
            total["lag_s_max"] = max(total["lag_s_max"] or 0.0, out["lag_s_max"])
        total["job_ids"].append(out.get("job_id"))
    total["unknown_tenants"] = sorted(unknown)
    return total


def sync(
    items: Sequence[AclSyncItem | dict],
    timeout: float,
    *,
    missing: Literal["pending", "report"] = "report",
    force: bool = False,
    batch_size: int | None = None,
) -> dict:
    """Send ``items`` in :func:`batches`, each as soon as it is built and none waiting for another's
    reply, and add up the replies (:func:`add_up`).
    ``missing='report'`` (the operator's commands) lists unknown documents, prefixes and tenants in
    ``not_found`` instead of keeping a pending row; ``force`` applies changes whatever their
    producer's last version. A batch the control pool refused raises its
    :class:`~ragline.shared.sdk.client.RaglineError`; ``timeout`` is each reply's wait."""
    from ragline.shared.sdk.celery_base import read_once  # start-up: Celery loads only for commands that send
    from ragline.shared.sdk.client import raise_for_reply, sync_acl_call  # start-up: as above
    from ragline.shared.worker.celery_app import app  # start-up: as above

    valid = [AclSyncItem.model_validate(it) for it in items]  # a bad item refuses the request before any send
    pending = [
        app.send_task(c.task, args=[c.payload])
        for c in (sync_acl_call(b, missing=missing, force=force) for b in batches(valid, batch_size))
    ]
    return add_up([raise_for_reply(read_once(res, timeout)) for res in pending])
