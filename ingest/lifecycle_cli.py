"""`ragline acl set|sync`, `ragline reindex`, `ragline errors`, `ragline retry-failed`, `ragline cancel`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from shared.cli_common import console, reload_app, split_csv

acl_app = typer.Typer(no_args_is_help=True, help="permissions: set one document's ACL or sync a JSONL file")


def _print(data: dict | list, as_json: bool) -> None:
    if as_json:
        print(json.dumps(data, ensure_ascii=False, default=str))
    else:
        console.print(data)


def _send_acl(batches: list[list[dict]], timeout: float) -> dict:
    """Send batches to ``ragline.acl.sync`` on the acl queue and add up the results."""
    from shared.celery_app import app
    from shared.contracts import TASK_ACL_SYNC

    reload_app()
    pending = [app.send_task(TASK_ACL_SYNC, args=[{"items": b}]) for b in batches]
    total = {"items": 0, "documents_updated": 0, "chunks_updated": 0, "ignored_stale": 0, "lag_s_max": None,
             "batches": len(batches), "job_ids": []}
    for res in pending:
        out = res.get(timeout=timeout)
        if out.get("ok") is False:
            raise typer.BadParameter(f"rejected: {out.get('detail')}")
        for k in ("items", "documents_updated", "chunks_updated", "ignored_stale"):
            total[k] += out[k]
        if out.get("lag_s_max") is not None:
            total["lag_s_max"] = max(total["lag_s_max"] or 0.0, out["lag_s_max"])
        total["job_ids"].append(out.get("job_id"))
    return total


@acl_app.command("set")
def acl_set(
    doc_id: str = typer.Argument(...),
    tenant: str = typer.Option(..., "--tenant"),
    acl: str = typer.Option(..., "--acl", help="comma-separated groups; an empty string revokes every group"),
    version: int | None = typer.Option(None, help="source version; default: now in microseconds"),
    as_json: bool = typer.Option(False, "--json"),
    timeout: float = typer.Option(60.0),
) -> None:
    """Replace one document's ACL (documents and chunks, no re-embedding)."""
    from shared.contracts import AclSyncItem

    now = time.time()
    item = AclSyncItem(tenant=tenant, doc_id=doc_id, acl=split_csv(acl), version=version, ts=now)
    _print(_send_acl([[item.model_dump(exclude_none=True)]], timeout), as_json)


@acl_app.command("sync")
def acl_sync(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="JSONL: {tenant, doc_id|path_prefix, acl, version|ts}"),
    as_json: bool = typer.Option(False, "--json"),
    timeout: float = typer.Option(600.0),
) -> None:
    """Apply a file of permission changes in batches (last writer wins by version)."""
    from ingest.acl_sync import read_jsonl
    from shared.settings import get_settings

    with file.open(encoding="utf-8") as fh:
        try:
            items = read_jsonl(fh)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    now = time.time()
    rows = [it.model_dump(exclude_none=True) | ({} if it.ts else {"ts": now}) for it in items]
    size = get_settings().acl_sync_batch_size
    t0 = time.perf_counter()
    out = _send_acl([rows[i : i + size] for i in range(0, len(rows), size)], timeout)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    _print(out, as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(acl_app, name="acl")
