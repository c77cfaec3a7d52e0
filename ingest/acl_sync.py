"""Permission changes: new ACLs written onto documents and their chunks in place, no embedding.

Permissions change far more often than content, so a sync is two batched SQL statements per
batch (documents, then their chunks), whatever the batch size.

One clock orders every permission change: the Postgres sequence ``acl_change_seq``. A change takes
its next value when it is applied (an ACL sync, an acl event, the ``acl`` of an upsert event), or
when ragline accepted the request that carries it (an ingest: its job's clock, or the event's), and
the document's ``acl_seq`` records the clock of the change that set ``acl``. A producer's own
``version`` (or ``ts`` in microseconds) is never compared with another producer's: it is kept per
document and producer in ``documents.acl_versions`` and only drops a change that is not newer
than that producer's last applied one (a replay, a redelivery, an out-of-order older change),
counted as stale (``ignored_stale``, ``rag_acl_changes{outcome="stale"}``).

Who the producer is, is decided here alone (:func:`producer_key`), for every path (``acl set`` and
``acl sync``, the client's ``sync_acl``, acl and upsert events): the sender the worker verified
(``shared/sdk/sender.py``: the role whose key signed the message, or ``unsigned``), then the payload's
``producer`` as a name within it. A payload can therefore never reach another sender's versions:
a relay calling itself ``operator`` with a time in 2100 keeps only its own changes stale, and the
contract refuses such a time anyway (``RAGLINE_LIFECYCLE_MAX_CLOCK_SKEW_S``). A request with ``force``
(``ragline acl set --force``, the operator's way past its own stale versions) applies whatever the
versions say; only :data:`MAY_FORCE` senders may send one, and every forced change is logged and
counted (``rag_acl_changes{outcome="forced"}``) and kept in the job's record.

The ACL an ingest asks for (``ragline ingest --acl``, a source's ``acl`` in ``RAGLINE_LIFECYCLE_SOURCES``, an
upsert event's) is remembered as ``documents.ingest_acl``; it replaces the stored permissions when
it differs from what the last ingest asked for and no permission change was applied after the
request was accepted (:func:`ingest_acl_decision`). So a narrower ``--acl`` on an unchanged
document takes effect (through :func:`apply_ingest_acls`, no embedding), while re-running the same
ingest or reindex never undoes a later ``acl sync``.

A document that does not exist yet gets a ``pending`` row holding the permission when the request
says ``missing='pending'`` (connectors and events: the permission may arrive before the first
ingest, which keeps it); ``missing='report'`` (``ragline acl set`` / ``acl sync``) changes nothing and
reports it as not found.

This module must stay free of embedder imports: the control pool never loads a model.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import DictRow, tuple_row
from psycopg.types.json import Jsonb

from ragline.shared.sdk.contracts import AclSyncItem
from ragline.shared.sdk.sender import UNSIGNED, WORKER
from ragline.shared.worker import db
from ragline.shared.worker.metrics import ACL_CHANGES

log = logging.getLogger(__name__)

#: the senders that may force a change past their versions: the operator, the workers, and anyone
#: on an unsigned stack (where the Redis password already lets its holder send anything)
MAY_FORCE = frozenset({"operator", WORKER, UNSIGNED})
#: how many stale documents a result lists with their versions
STALE_SHOWN = 100


class ChangeRefused(ValueError):
    """A permission change its sender may not make (a ``force`` from a relay)."""


def producer_key(sender: str, item: AclSyncItem, default: str = "sync") -> str:
    """The key a change's version is kept and compared under (pure): the verified ``sender``, the
    payload's producer name within it (``default`` without one), and ``:ts`` when the version is
    the change's time, so explicit versions and times never meet."""
    key = f"{sender}/{item.producer or default}"
    return key if item.version is not None else f"{key}:ts"


# Doc items go in rounds of one item per document (several producers changing one document in one
# batch: one round each, in batch order, so the later change wins unless it is stale). A round first
# updates the existing documents whose producer's last applied version is older (checked again on
# the locked row); the rest is either inserted as pending rows (checked again on conflict, so a
# document created meanwhile is updated under the same rule) or looked up to report it as missing.
SYNC_DOCS_SQL = """
WITH items AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb)
        AS x(tenant text, doc_id text, producer text, acl text[], version bigint)
),
clock AS (SELECT nextval('acl_change_seq') AS seq)
UPDATE documents d SET acl = i.acl, acl_seq = c.seq,
    acl_versions = d.acl_versions || jsonb_build_object(i.producer, i.version), updated_at = now()
FROM items i CROSS JOIN clock c
WHERE d.tenant = i.tenant AND d.doc_id = i.doc_id
  AND (%(pending)s OR d.status <> 'deleted')
  AND (%(force)s OR coalesce((d.acl_versions ->> i.producer)::bigint, -1) < i.version)
RETURNING d.tenant, d.doc_id, d.acl
"""

SYNC_PENDING_SQL = """
WITH items AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb)
        AS x(tenant text, doc_id text, producer text, acl text[], version bigint)
),
clock AS (SELECT nextval('acl_change_seq') AS seq)
INSERT INTO documents AS d (tenant, doc_id, acl, acl_seq, acl_versions, status)
SELECT i.tenant, i.doc_id, i.acl, c.seq, jsonb_build_object(i.producer, i.version), 'pending'
FROM items i CROSS JOIN clock c
ORDER BY i.tenant, i.doc_id
ON CONFLICT (tenant, doc_id) DO UPDATE SET acl = EXCLUDED.acl, acl_seq = EXCLUDED.acl_seq,
    acl_versions = d.acl_versions || EXCLUDED.acl_versions, updated_at = now()
WHERE %(force)s OR (SELECT bool_and(coalesce((d.acl_versions ->> e.key)::bigint, -1) < e.value::bigint)
       FROM jsonb_each_text(EXCLUDED.acl_versions) AS e)
RETURNING d.tenant, d.doc_id, d.acl, d.xmax = 0 AS created
"""

MISSING_SQL = """
SELECT u.tenant, u.doc_id
FROM unnest(%(tenants)s::text[], %(docs)s::text[]) AS u(tenant, doc_id)
LEFT JOIN documents d ON d.tenant = u.tenant AND d.doc_id = u.doc_id
WHERE d.doc_id IS NULL OR d.status = 'deleted'
"""

# prefix items: every document (not a tombstone) whose path starts with the prefix (LIKE, escaped);
# the outer SELECT also returns every matched document (for the stale count) and prefixes matching none
SYNC_BY_PREFIX_SQL = """
WITH items AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb)
        AS x(tenant text, path_prefix text, producer text, acl text[], version bigint, ord int)
),
matched AS (
    SELECT i.tenant, i.path_prefix, i.producer, i.acl, i.version, i.ord, d.doc_id,
           %(force)s OR coalesce((d.acl_versions ->> i.producer)::bigint, -1) < i.version AS fresh
    FROM items i JOIN documents d
      ON d.tenant = i.tenant AND d.status <> 'deleted'
     AND d.path LIKE replace(replace(replace(i.path_prefix, '\\', '\\\\'), '%%', '\\%%'), '_', '\\_') || '%%'
),
winners AS (
    SELECT DISTINCT ON (tenant, doc_id) tenant, doc_id, producer, acl, version, path_prefix
    FROM matched WHERE fresh
    ORDER BY tenant, doc_id, ord DESC
),
clock AS (SELECT nextval('acl_change_seq') AS seq),
applied AS (
    UPDATE documents d SET acl = w.acl, acl_seq = c.seq,
        acl_versions = d.acl_versions || jsonb_build_object(w.producer, w.version), updated_at = now()
    FROM winners w CROSS JOIN clock c
    WHERE d.tenant = w.tenant AND d.doc_id = w.doc_id
      AND (%(force)s OR coalesce((d.acl_versions ->> w.producer)::bigint, -1) < w.version)
    RETURNING d.tenant, d.doc_id, w.path_prefix, d.acl
)
SELECT 'applied' AS kind, tenant, doc_id, path_prefix, acl FROM applied
UNION ALL
SELECT DISTINCT 'matched' AS kind, tenant, doc_id, NULL, NULL::text[] FROM matched
UNION ALL
SELECT DISTINCT 'missing' AS kind, i.tenant, NULL, i.path_prefix, NULL::text[] FROM items i
WHERE NOT EXISTS (SELECT 1 FROM matched m WHERE m.tenant = i.tenant AND m.path_prefix = i.path_prefix)
"""

# a separate statement, so its snapshot sees every chunk an ingest committed while the documents
# statement waited for that ingest's row lock. Each document's ACL is the one the documents
# statements returned: this transaction holds the row until it commits, so that is the stored one,
# and the chunks need no second read of ``documents``. The documents travel as JSON (:func:`doc_acls`):
# text arrays of a thousand ids took psycopg several times longer to write than the C JSON encoder
SYNC_CHUNKS_SQL = """
UPDATE chunks c SET acl = u.acl, updated_at = now()
FROM jsonb_to_recordset(%(docs)s::jsonb) AS u(tenant text, doc_id text, acl text[])
WHERE c.tenant = u.tenant AND c.doc_id = u.doc_id AND c.acl IS DISTINCT FROM u.acl
"""

# the last applied version of each stale change's producer, which the change did not exceed
STALE_SQL = """
SELECT i.tenant, i.doc_id, i.producer, i.version, (d.acl_versions ->> i.producer)::bigint AS last_version
FROM jsonb_to_recordset(%(items)s::jsonb) AS i(tenant text, doc_id text, producer text, version bigint)
JOIN documents d ON d.tenant = i.tenant AND d.doc_id = i.doc_id
ORDER BY i.tenant, i.doc_id
"""

UNKNOWN_TENANTS_SQL = """
SELECT t AS tenant FROM unnest(%(tenants)s::text[]) AS t
WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.tenant = t)
"""

# the clock of a change: the one its request was accepted at, or now; a value the sequence has
# not reached yet (a forged payload) counts as now, so it cannot outrank every later change.


def clock_expr(asked: str) -> str:
    """The clock of a change accepted at the SQL expression ``asked`` (a bigint or NULL), as a
    scalar subquery: the one rule every statement that stamps a permission change embeds."""
    return (
        f"(SELECT CASE WHEN {asked} IS NOT NULL AND {asked} <= last_value THEN {asked}"
        " ELSE nextval('acl_change_seq') END FROM acl_change_seq)"
    )


CLOCK_SQL = f"SELECT {clock_expr('%(asked)s::bigint')} AS seq"

# ready documents whose ingest asks for another ACL than the last ingest did (set comparison), locked
INGEST_LOCK_SQL = """
SELECT d.tenant, d.doc_id, d.acl, d.acl_seq, d.ingest_acl
FROM jsonb_to_recordset(%(items)s::jsonb) AS i(tenant text, doc_id text, acl text[])
JOIN documents d ON d.tenant = i.tenant AND d.doc_id = i.doc_id
WHERE d.status = 'ready' AND (d.ingest_acl IS NULL OR NOT (d.ingest_acl @> i.acl AND d.ingest_acl <@ i.acl))
ORDER BY d.tenant, d.doc_id
FOR UPDATE OF d
"""

INGEST_WRITE_SQL = """
UPDATE documents d SET acl = u.acl, acl_seq = u.acl_seq, ingest_acl = u.ingest_acl, updated_at = now()
FROM jsonb_to_recordset(%(rows)s::jsonb)
    AS u(tenant text, doc_id text, acl text[], acl_seq bigint, ingest_acl text[])
WHERE d.tenant = u.tenant AND d.doc_id = u.doc_id
"""


@dataclass
class SyncOutcome:
    items: int
    documents_updated: int
    chunks_updated: int
    ignored_stale: int
    lags_s: list[float]
    pending: int = 0
    not_found: list[dict] = field(default_factory=list)
    unknown_tenants: list[str] = field(default_factory=list)
    stale: list[dict] = field(default_factory=list)
    forced: int = 0

    @property
    def lag_max(self) -> float | None:
        return round(max(self.lags_s), 4) if self.lags_s else None

    @property
    def lag_mean(self) -> float | None:
        return round(sum(self.lags_s) / len(self.lags_s), 4) if self.lags_s else None


def split_items(
    items: list[AclSyncItem], sender: str = UNSIGNED, default: str = "sync"
) -> tuple[list[dict], list[dict]]:
    """JSON rows for the doc_id statement and the path-prefix statement (pure).

    One row per target and producer (:func:`producer_key` of ``sender``): the highest version (on a
    tie, the later item). ``ord`` is the item's position in the batch; between producers, the later
    item wins.
    """
    best: dict[tuple, dict] = {}
    for ord_, it in enumerate(items):
        target = ("doc_id", it.doc_id) if it.doc_id is not None else ("path_prefix", it.path_prefix)
        producer = producer_key(sender, it, default)
        row = {
            "tenant": it.tenant,
            target[0]: target[1],
            "producer": producer,
            "acl": sorted(set(it.acl)),
            "version": it.effective_version,
            "ts": it.ts,
            "ord": ord_,
        }
        key = (it.tenant, *target, producer)
        if key not in best or row["version"] >= best[key]["version"]:
            best[key] = row
    rows = sorted(best.values(), key=lambda r: r["ord"])
    return [r for r in rows if "doc_id" in r], [r for r in rows if "path_prefix" in r]


def doc_acls(acls: dict[tuple[str, str], list[str]]) -> Jsonb:
    """Each ``(tenant, doc_id)``'s ACL as :data:`SYNC_CHUNKS_SQL` reads them, in key order, so
    concurrent batches lock chunks in one order (pure)."""
    return Jsonb([{"tenant": t, "doc_id": d, "acl": acls[t, d]} for t, d in sorted(acls)])


def _rounds(rows: list[dict]) -> list[list[dict]]:
    """Rows in rounds of one per document, in batch order (pure): almost always a single round."""
    out: list[list[dict]] = []
    seen: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["tenant"], r["doc_id"])
        n = seen[key] = seen.get(key, -1) + 1
        if n == len(out):
            out.append([])
        out[n].append(r)
    return out


def apply_acl_sync(
    conn: psycopg.Connection[DictRow],
    items: list[AclSyncItem],
    pending: bool = True,
    path: str = "sync",
    *,
    sender: str = UNSIGNED,
    force: bool = False,
    default_producer: str = "sync",
) -> SyncOutcome:
    """Apply a batch in one transaction; idempotent. Returns counts and per-item lag (event time -> commit).

    ``pending`` False reports documents that do not exist (and tenants without any) instead of
    keeping the permission for a later first ingest. ``path`` labels the metric. ``sender`` is who
    sent the batch as the worker verified it, never a payload's word; ``force`` (only
    :data:`MAY_FORCE` senders: :class:`ChangeRefused` otherwise) applies changes whatever their
    producer's last version, which they then replace.
    """
    if force and sender not in MAY_FORCE:
        raise ChangeRefused(
            f"a {sender!r} sender may not force permission changes (only {sorted(MAY_FORCE)})"
        )
    by_doc, by_prefix = split_items(items, sender, default_producer)
    changed: dict[tuple[str, str], list[str]] = {}  # each changed document's ACL as stored
    targeted: set[tuple[str, str]] = set()
    ts_of: dict[tuple[str, str], float] = {}
    created = 0
    not_found: list[dict] = []
    unknown: list[str] = []
    with conn.transaction():
        if by_doc:
            docs = {(r["tenant"], r["doc_id"]) for r in by_doc}
            missing: set[tuple[str, str]] = set()
            for n, rows in enumerate(_rounds(by_doc)):
                with conn.cursor(row_factory=tuple_row) as cur:
                    cur.execute(SYNC_DOCS_SQL, {"items": Jsonb(rows), "pending": pending, "force": force})
                    applied = {(t, d): acl for t, d, acl in cur}
                rest = [r for r in rows if (r["tenant"], r["doc_id"]) not in applied]
                if rest and pending:  # new documents, tombstones, stale changes: decided on the row
                    for r in conn.execute(
                        SYNC_PENDING_SQL, {"items": Jsonb(rest), "force": force}
                    ).fetchall():
                        applied[r["tenant"], r["doc_id"]] = r["acl"]
                        created += bool(r["created"])
                elif rest and n == 0:  # a document missing here is missing in every round
                    missing = {
                        (r["tenant"], r["doc_id"])
                        for r in conn.execute(
                            MISSING_SQL,
                            {"tenants": [r["tenant"] for r in rest], "docs": [r["doc_id"] for r in rest]},
                        )
                    }
                changed |= applied  # a later round's ACL is the stored one
            not_found += [
                {"tenant": t, "doc_id": d, "reason": "no such document"} for t, d in sorted(missing)
            ]
            targeted |= docs - missing
            for r in by_doc:
                if r["ts"]:
                    key = (r["tenant"], r["doc_id"])
                    ts_of[key] = max(ts_of.get(key, 0.0), r["ts"])
        if by_prefix:
            rows = conn.execute(SYNC_BY_PREFIX_SQL, {"items": Jsonb(by_prefix), "force": force}).fetchall()
            ts_by_prefix = {(r["tenant"], r["path_prefix"]): r["ts"] for r in by_prefix}
            for r in rows:
                if r["kind"] == "missing":
                    not_found.append(
                        {
                            "tenant": r["tenant"],
                            "path_prefix": r["path_prefix"],
                            "reason": "no document under this prefix",
                        }
                    )
                    continue
                key = (r["tenant"], r["doc_id"])
                targeted.add(key)
                if r["kind"] == "applied":
                    changed[key] = r["acl"]  # after the doc items' statement: the stored ACL
                    if ts_by_prefix.get((r["tenant"], r["path_prefix"])):
                        ts_of[key] = ts_by_prefix[(r["tenant"], r["path_prefix"])]
        chunks = 0
        ordered = sorted(changed)  # a document hit by a doc item and a prefix item counts once
        if ordered:
            chunks = conn.execute(SYNC_CHUNKS_SQL, {"docs": doc_acls(changed)}).rowcount
        if not_found:
            tenants = sorted({nf["tenant"] for nf in not_found})
            unknown = [
                r["tenant"] for r in conn.execute(UNKNOWN_TENANTS_SQL, {"tenants": tenants}).fetchall()
            ]
            for nf in not_found:
                if nf["tenant"] in unknown:
                    nf["reason"] = "unknown tenant (it has no documents)"
        stale_docs = sorted(targeted - changed.keys())
        stale_rows = _stale_versions(conn, stale_docs[:STALE_SHOWN], by_doc, by_prefix) if stale_docs else []
    stale = len(stale_docs)
    now = time.time()
    forced = len(changed) - created if force else 0
    _count(
        path,
        applied=len(changed) - created - forced,
        pending=created,
        stale=stale,
        not_found=len(not_found),
        forced=forced,
    )
    if stale:
        log.info(
            "acl %s: %d change(s) ignored as stale (not newer than their producer's last applied change), e.g. %s",
            path,
            stale,
            stale_rows[:3],
        )
    if forced:
        log.warning(
            "acl %s: %d document(s) changed by a forced request from %r, whatever their versions, e.g. %s",
            path,
            forced,
            sender,
            ordered[:3],
        )
    return SyncOutcome(
        len(items),
        len(changed),
        chunks,
        stale,
        [max(0.0, now - ts_of[k]) for k in ordered if k in ts_of],
        created,
        not_found,
        unknown,
        stale_rows,
        forced,
    )


def _stale_versions(
    conn: psycopg.Connection[DictRow], docs: list[tuple[str, str]], by_doc: list[dict], by_prefix: list[dict]
) -> list[dict]:
    """For each stale document: the producer, the version it sent and the last one applied from it
    (a prefix item counts for every document under it; the later item when several target one)."""
    asked: dict[tuple[str, str], dict] = {}
    wanted = set(docs)
    for r in by_doc:
        if (r["tenant"], r["doc_id"]) in wanted:
            asked[(r["tenant"], r["doc_id"])] = r
    if by_prefix:
        for t, d in wanted - set(asked):
            path = conn.execute(
                "SELECT path FROM documents WHERE tenant = %s AND doc_id = %s", (t, d)
            ).fetchone()
            under = [
                r
                for r in by_prefix
                if r["tenant"] == t and path and (path["path"] or "").startswith(r["path_prefix"])
            ]
            if under:
                asked[(t, d)] = under[-1]
    items = [
        {"tenant": t, "doc_id": d, "producer": r["producer"], "version": r["version"]}
        for (t, d), r in sorted(asked.items())
    ]
    return [dict(r) for r in conn.execute(STALE_SQL, {"items": Jsonb(items)}).fetchall()] if items else []


def _count(path: str, **outcomes: int) -> None:
    for outcome, n in outcomes.items():
        if n:
            ACL_CHANGES.labels(path, outcome).inc(n)


def clock(conn: psycopg.Connection[DictRow], asked: int | None = None) -> int:
    """The permission clock for a change accepted at ``asked`` (None: now, a new tick)."""
    return int(db.one(conn.execute(CLOCK_SQL, {"asked": asked}))["seq"])


def ingest_acl_decision(state: dict | None, acl: list[str], seq: int | None) -> tuple[bool, str | None]:
    """Whether the ACL an ingest asks for replaces the stored permissions (pure).

    ``state``: the document's row (``acl``, ``acl_seq``, ``ingest_acl``) or None; ``seq``: the clock
    the ingest was accepted at (None: now). Returns ``(apply, outcome)``, outcome ``updated`` (the
    permissions change), ``ignored_stale`` (they would have, but a permission change holds) or None.

    * a document without permissions yet (new, or never stored) takes the ingest's;
    * a permission change that came before the first ingest stays (a connector's early sync);
    * an ingest asking for the same groups as the last ingest changes nothing, so re-running an
      ingest or a reindex never undoes a later ``acl sync``;
    * a different ACL replaces the stored one unless a change was applied after the ingest was
      accepted (a later revocation always stands).
    """
    if state is None or (state["ingest_acl"] is None and state["acl_seq"] == 0):
        return True, None
    asked, current = set(acl), set(state["acl"])
    lost = "ignored_stale" if asked != current else None
    if state["ingest_acl"] is None:
        return False, lost
    if set(state["ingest_acl"]) == asked:
        return False, None
    if seq is not None and seq <= state["acl_seq"]:
        return False, lost
    return True, ("updated" if asked != current else None)


def apply_ingest_acls(
    conn: psycopg.Connection[DictRow],
    requests: list[tuple[str, str, list[str], int | None]],
    path: str = "ingest",
) -> dict[tuple[str, str], str]:
    """The ACL-only path for ingested documents whose content did not change (and the reindex's
    unchanged ones): ``(tenant, doc_id, acl, seq)`` each, decided by :func:`ingest_acl_decision`
    under the row lock, written with the chunks in one transaction, no embedding. Returns the
    outcome of each document whose outcome is not None."""
    if not requests:
        return {}
    asked = {(t, d): (sorted(set(acl)), seq) for t, d, acl, seq in requests}
    items = [{"tenant": t, "doc_id": d, "acl": acl} for (t, d), (acl, _) in asked.items()]
    outcomes: dict[tuple[str, str], str] = {}
    clocks: dict[int | None, int] = {}
    with conn.transaction():
        rows = conn.execute(INGEST_LOCK_SQL, {"items": Jsonb(items)}).fetchall()
        writes: list[dict] = []
        changed: dict[tuple[str, str], list[str]] = {}
        for r in rows:
            key = (r["tenant"], r["doc_id"])
            acl, seq = asked[key]
            apply, outcome = ingest_acl_decision(r, acl, seq)
            if outcome:
                outcomes[key] = outcome
            if apply:
                if seq not in clocks:
                    clocks[seq] = clock(conn, seq)
                writes.append({"tenant": key[0], "doc_id": key[1], "acl": acl, "acl_seq": clocks[seq]})
                if set(acl) != set(r["acl"]):
                    changed[key] = acl
            else:
                writes.append({"tenant": key[0], "doc_id": key[1], "acl": r["acl"], "acl_seq": r["acl_seq"]})
            writes[-1]["ingest_acl"] = acl
        if writes:
            conn.execute(INGEST_WRITE_SQL, {"rows": Jsonb(writes)})
        if changed:
            conn.execute(SYNC_CHUNKS_SQL, {"docs": doc_acls(changed)})
    values = list(outcomes.values())
    _count(path, applied=values.count("updated"), stale=values.count("ignored_stale"))
    return outcomes
