"""The named-files lookup (a question names ``pkg/sessions.py``) reads the ``(tenant, file_name)``
index of migration 0010, not every chunk of the tenant, and matches paths whatever their case."""

from __future__ import annotations

import json

from ragline.query.retrieval.retrievers import named_rows
from ragline.query.retrieval.transaction import set_transaction_params
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db

QUESTION = 'Traceback:\n  File "/venv/lib/site-packages/pkg/sessions.py", line 335, in request'


class Explained:
    """A connection whose statements are explained instead of run (the plan the lookup gets)."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def execute(self, sql: str, params: dict):
        return self.conn.execute("EXPLAIN (FORMAT JSON) " + sql, params)


def test_the_lookup_reads_the_file_name_index(conn, tenant):
    from ragline.shared.config.settings import get_settings

    # enough files that reading the whole tenant costs more than the file-name index in any
    # database, also one the whole suite shares (whose statistics the planner reads)
    paths = [f"r/pkg/mod{i}.py" for i in range(3000)] + ["r/Pkg/Sessions.py", "r/other/sessions.py"]
    with conn.transaction():
        conn.execute(
            "INSERT INTO documents (tenant, doc_id, path, status, acl)"
            " SELECT %s, p, p, 'ready', '{dev}' FROM unnest(%s::text[]) AS p",
            (tenant, paths),
        )
        conn.execute(
            "INSERT INTO chunks (tenant, doc_id, chunk_no, path, content, content_hash, acl)"
            " SELECT %s, p, 0, p, 'def f' || n || '(): pass', n::text, '{dev}'"
            " FROM unnest(%s::text[]) WITH ORDINALITY AS t(p, n)",
            (tenant, paths),
        )
    req = SearchRequest(query=QUESTION, tenant=tenant, groups=["dev"])
    settings = get_settings()
    rows = named_rows(conn, req, None, settings)
    # the suffix is pkg/sessions.py: the other folder's sessions.py is not it; the case differs
    assert [r["path"] for r in rows] == ["r/Pkg/Sessions.py"]
    file_names = conn.execute(
        "SELECT DISTINCT file_name FROM chunks WHERE tenant = %s AND path LIKE %s", (tenant, "%essions.py")
    ).fetchall()
    assert {r["file_name"] for r in file_names} == {"sessions.py"}
    # statistics that know this tenant's size: in a database the whole suite shares, thousands of
    # tiny test tenants push it out of the default sample's most common values and the planner
    # takes it for one row, which any index serves as well (a production tenant of this size is
    # in them); the target is reset below, the richer statistics stay harmless
    conn.execute("ALTER TABLE chunks ALTER COLUMN tenant SET STATISTICS 10000")
    conn.execute("ANALYZE chunks")
    conn.commit()
    try:
        plan = json.dumps(named_rows(Explained(conn), req, None, settings))
        conn.rollback()
        assert "chunks_tenant_file_name" in plan, plan
        # the query pool's role, bound by row-level security: only leakproof conditions may use an
        # index there, and the file name's equality is one
        with db.query_connection() as q, q.transaction():
            set_transaction_params(q, req, settings)
            assert [r["path"] for r in named_rows(q, req, None, settings)] == ["r/Pkg/Sessions.py"]
            plan = json.dumps(named_rows(Explained(q), req, None, settings))
        assert "chunks_tenant_file_name" in plan, plan
    finally:
        conn.rollback()
        conn.execute("ALTER TABLE chunks ALTER COLUMN tenant SET STATISTICS -1")
        conn.commit()
