"""Permission sync: new ACLs written onto documents and their chunks in place, no embedding.

Permissions change far more often than content, so a sync is two batched SQL statements per
batch (documents, then their chunks), whatever the batch size. Last writer wins by version:
``documents.acl_version`` only moves forward, so a replayed or out-of-order older change is a
no-op. A document that does not exist yet gets a ``pending`` row holding the permission, and the
ingest that follows keeps it (``ingest/store.py`` keeps ``acl`` when ``acl_version > 0``).

This module must stay free of embedder imports: the control pool never loads a model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from shared.contracts import AclSyncItem

# one row per (tenant, doc_id): the newest version in the batch wins before touching the table
_DOC_ITEMS = """
SELECT DISTINCT ON (tenant, doc_id) tenant, doc_id, acl, version, ts
FROM jsonb_to_recordset(%(items)s::jsonb) AS x(tenant text, doc_id text, acl text[], version bigint, ts float8)
ORDER BY tenant, doc_id, version DESC
"""

SYNC_BY_DOC_SQL = f"""
WITH items AS ({_DOC_ITEMS}),
upserted AS (
    INSERT INTO documents AS d (tenant, doc_id, acl, acl_version, status)
    SELECT tenant, doc_id, acl, version, 'pending' FROM items
    ON CONFLICT (tenant, doc_id) DO UPDATE SET acl = EXCLUDED.acl, acl_version = EXCLUDED.acl_version,
                                               updated_at = now()
    WHERE d.acl_version < EXCLUDED.acl_version
    RETURNING d.tenant, d.doc_id, d.acl, d.status
),
chunk_rows AS (
    UPDATE chunks c SET acl = u.acl, updated_at = now()
    FROM upserted u
    WHERE c.tenant = u.tenant AND c.doc_id = u.doc_id AND c.acl IS DISTINCT FROM u.acl
    RETURNING 1
)
SELECT (SELECT count(*) FROM upserted) AS documents,
       (SELECT count(*) FROM upserted WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM chunk_rows) AS chunks,
       (SELECT coalesce(json_agg(json_build_array(i.doc_id, i.ts)), '[]') FROM items i
          JOIN upserted u USING (tenant, doc_id)) AS applied
"""

# prefix items: every existing document whose path starts with the prefix (LIKE, escaped)
SYNC_BY_PREFIX_SQL = """
WITH items AS (
    SELECT tenant, path_prefix, acl, version, ts
    FROM jsonb_to_recordset(%(items)s::jsonb)
         AS x(tenant text, path_prefix text, acl text[], version bigint, ts float8)
),
targets AS (
    SELECT DISTINCT ON (d.tenant, d.doc_id) d.tenant, d.doc_id, i.acl, i.version, i.ts
    FROM items i JOIN documents d
      ON d.tenant = i.tenant
     AND d.path LIKE replace(replace(replace(i.path_prefix, '\\', '\\\\'), '%%', '\\%%'), '_', '\\_') || '%%'
    ORDER BY d.tenant, d.doc_id, i.version DESC
),
updated AS (
    UPDATE documents d SET acl = t.acl, acl_version = t.version, updated_at = now()
    FROM targets t
    WHERE d.tenant = t.tenant AND d.doc_id = t.doc_id AND d.acl_version < t.version
    RETURNING d.tenant, d.doc_id, d.acl
),
chunk_rows AS (
    UPDATE chunks c SET acl = u.acl, updated_at = now()
    FROM updated u
    WHERE c.tenant = u.tenant AND c.doc_id = u.doc_id AND c.acl IS DISTINCT FROM u.acl
    RETURNING 1
)
SELECT (SELECT count(*) FROM updated) AS documents, 0 AS pending,
       (SELECT count(*) FROM chunk_rows) AS chunks,
       (SELECT count(*) FROM targets) AS targets,
       (SELECT coalesce(json_agg(json_build_array(t.doc_id, t.ts)), '[]') FROM targets t
          JOIN updated u USING (tenant, doc_id)) AS applied
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
    """Apply a batch in one transaction; idempotent. Returns counts and per-item lag (event time -> now)."""
    by_doc, by_prefix = split_items(items)
    documents = chunks = stale = 0
    applied: list = []
    with conn.transaction():
        if by_doc:
            row = conn.execute(SYNC_BY_DOC_SQL, {"items": Jsonb(by_doc)}).fetchone()
            documents += row["documents"]
            chunks += row["chunks"]
            distinct = len({(r["tenant"], r["doc_id"]) for r in by_doc})
            stale += distinct - row["documents"]
            applied += row["applied"]
        if by_prefix:
            row = conn.execute(SYNC_BY_PREFIX_SQL, {"items": Jsonb(by_prefix)}).fetchone()
            documents += row["documents"]
            chunks += row["chunks"]
            stale += row["targets"] - row["documents"]
            applied += row["applied"]
    now = time.time()
    lags = [max(0.0, now - ts) for _, ts in applied if ts]
    return SyncOutcome(len(items), documents, chunks, stale, lags)


def read_jsonl(lines) -> list[AclSyncItem]:
    """Parse ``acl sync`` input: one JSON object per line; blank lines and ``#`` comments skipped."""
    import json

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
