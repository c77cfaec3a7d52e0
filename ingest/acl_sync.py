"""Permission sync: new ACLs written onto documents and their chunks in place, no embedding.

Permissions change far more often than content, so a sync is two batched SQL statements per
batch (documents, then their chunks), whatever the batch size. Last writer wins by version:
``documents.acl_version`` only moves forward, so a replayed or out-of-order older change is a
no-op. A document that does not exist yet gets a ``pending`` row holding the permission, and the
ingest that follows keeps it (``ingest/store.py`` keeps ``acl`` when ``acl_version > 0``).

This module must stay free of embedder imports: the control pool never loads a model.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from ragline.shared.contracts import AclSyncItem

# one row per (tenant, doc_id): the newest version in the batch wins before touching the table
SYNC_BY_DOC_SQL = """
WITH items AS (
    SELECT DISTINCT ON (tenant, doc_id) tenant, doc_id, acl, version
    FROM jsonb_to_recordset(%(items)s::jsonb) AS x(tenant text, doc_id text, acl text[], version bigint)
    ORDER BY tenant, doc_id, version DESC
)
INSERT INTO documents AS d (tenant, doc_id, acl, acl_version, status)
SELECT tenant, doc_id, acl, version, 'pending' FROM items
ON CONFLICT (tenant, doc_id) DO UPDATE SET acl = EXCLUDED.acl, acl_version = EXCLUDED.acl_version,
                                           updated_at = now()
WHERE d.acl_version < EXCLUDED.acl_version
RETURNING d.tenant, d.doc_id
"""

# prefix items: every existing document whose path starts with the prefix (LIKE, escaped)
SYNC_BY_PREFIX_SQL = """
WITH items AS (
    SELECT tenant, path_prefix, acl, version
    FROM jsonb_to_recordset(%(items)s::jsonb) AS x(tenant text, path_prefix text, acl text[], version bigint)
),
targets AS (
    SELECT DISTINCT ON (d.tenant, d.doc_id) d.tenant, d.doc_id, i.acl, i.version, i.path_prefix
    FROM items i JOIN documents d
      ON d.tenant = i.tenant
     AND d.path LIKE replace(replace(replace(i.path_prefix, '\\', '\\\\'), '%%', '\\%%'), '_', '\\_') || '%%'
    ORDER BY d.tenant, d.doc_id, i.version DESC
)
UPDATE documents d SET acl = t.acl, acl_version = t.version, updated_at = now()
FROM targets t
WHERE d.tenant = t.tenant AND d.doc_id = t.doc_id AND d.acl_version < t.version
RETURNING d.tenant, d.doc_id, t.path_prefix, (SELECT count(*) FROM targets) AS targets
"""

COUNT_PREFIX_TARGETS_SQL = """
SELECT count(DISTINCT (d.tenant, d.doc_id)) AS n
FROM jsonb_to_recordset(%(items)s::jsonb) AS i(tenant text, path_prefix text)
JOIN documents d ON d.tenant = i.tenant
 AND d.path LIKE replace(replace(replace(i.path_prefix, '\\', '\\\\'), '%%', '\\%%'), '_', '\\_') || '%%'
"""

# a separate statement, so its snapshot sees every chunk an ingest committed while the documents
# statement waited for that ingest's row lock; the ACL comes from the documents row itself
SYNC_CHUNKS_SQL = """
UPDATE chunks c SET acl = d.acl, updated_at = now()
FROM unnest(%(tenants)s::text[], %(docs)s::text[]) AS u(tenant, doc_id)
JOIN documents d ON d.tenant = u.tenant AND d.doc_id = u.doc_id
WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id AND c.acl IS DISTINCT FROM d.acl
"""


@dataclass
class SyncOutcome:
    items: int
    documents_updated: int
    chunks_updated: int
    ignored_stale: int
    lags_s: list[float]

    @property
    def lag_max(self) -> float | None:
        return round(max(self.lags_s), 4) if self.lags_s else None

    @property
    def lag_mean(self) -> float | None:
        return round(sum(self.lags_s) / len(self.lags_s), 4) if self.lags_s else None


def split_items(items: list[AclSyncItem]) -> tuple[list[dict], list[dict]]:
    """JSON rows for the doc_id statement and the path-prefix statement (pure)."""
    by_doc, by_prefix = [], []
    for it in items:
        row = {"tenant": it.tenant, "acl": sorted(set(it.acl)), "version": it.effective_version, "ts": it.ts}
        if it.doc_id is not None:
            by_doc.append({**row, "doc_id": it.doc_id})
        else:
            by_prefix.append({**row, "path_prefix": it.path_prefix})
    return by_doc, by_prefix


def apply_acl_sync(conn: psycopg.Connection, items: list[AclSyncItem]) -> SyncOutcome:
    """Apply a batch in one transaction; idempotent. Returns counts and per-item lag (event time -> commit)."""
    by_doc, by_prefix = split_items(items)
    changed: list[tuple[str, str]] = []
    lag_from: list[float] = []
    stale = 0
    with conn.transaction():
        if by_doc:
            rows = conn.execute(SYNC_BY_DOC_SQL, {"items": Jsonb(by_doc)}).fetchall()
            newest: dict[tuple[str, str], dict] = {}
            for r in by_doc:
                key = (r["tenant"], r["doc_id"])
                if key not in newest or r["version"] > newest[key]["version"]:
                    newest[key] = r
            applied = [(r["tenant"], r["doc_id"]) for r in rows]
            changed += applied
            stale += len(newest) - len(applied)
            lag_from += [newest[k]["ts"] for k in applied if newest[k]["ts"]]
        if by_prefix:
            rows = conn.execute(SYNC_BY_PREFIX_SQL, {"items": Jsonb(by_prefix)}).fetchall()
            targets = (
                rows[0]["targets"]
                if rows
                else conn.execute(COUNT_PREFIX_TARGETS_SQL, {"items": Jsonb(by_prefix)}).fetchone()["n"]
            )
            ts_by_prefix = {(r["tenant"], r["path_prefix"]): r["ts"] for r in by_prefix}
            changed += [(r["tenant"], r["doc_id"]) for r in rows]
            stale += targets - len(rows)
            lag_from += [
                ts_by_prefix.get((r["tenant"], r["path_prefix"]))
                for r in rows
                if ts_by_prefix.get((r["tenant"], r["path_prefix"]))
            ]
        chunks = 0
        changed = sorted(set(changed))  # a document hit by a doc item and a prefix item counts once
        if changed:
            chunks = conn.execute(
                SYNC_CHUNKS_SQL, {"tenants": [t for t, _ in changed], "docs": [d for _, d in changed]}
            ).rowcount
    now = time.time()
    return SyncOutcome(len(items), len(changed), chunks, stale, [max(0.0, now - ts) for ts in lag_from])


def read_jsonl(lines) -> list[AclSyncItem]:
    """Parse ``acl sync`` input: one JSON object per line; blank lines and ``#`` comments skipped."""
    out = []
    for n, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append(AclSyncItem.model_validate(json.loads(line)))
        except ValueError as exc:
            raise ValueError(f"line {n}: {exc}") from None
    return out
