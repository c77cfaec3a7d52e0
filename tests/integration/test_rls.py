"""Row-level security (migrations 0007 and 0020): the query pool's role reads only the rows of the tenant and
groups its transaction names, even when a statement forgets its own filter, and writes nothing."""

from __future__ import annotations

import json
import stat

import psycopg
import pytest

from ragline.query import service
from ragline.query.retrieval import filters, row_security, search, sql, transaction
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.client import RaglineClient
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db
from tests.integration.query_corpus import store_docs, vec

WORD = "изоляция"
DOCS = [
    {"doc_id": "open.md", "content": f"{WORD} арендаторов открытая", "acl": ["g"]},
    {"doc_id": "hr.md", "content": f"{WORD} зарплаты отдела кадров", "acl": ["hr"]},
    {"doc_id": "both.md", "content": f"{WORD} общая", "acl": ["g", "hr"]},
]


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, DOCS)
    store_docs(
        conn, tenant + "-other", [{"doc_id": "x.md", "content": f"{WORD} чужого арендатора", "acl": ["g"]}]
    )
    return tenant


def scoped(conn: psycopg.Connection, tenant: str | None, groups: list[str] | None) -> None:
    """What every retrieval transaction sets first (``transaction.set_transaction_params``)."""
    if tenant is not None:
        conn.execute("SELECT set_config('ragline.tenant', %s, true)", (tenant,))
    if groups is not None:
        conn.execute("SELECT set_config('ragline.groups', %s::text[]::text, true)", (groups,))


def test_a_statement_without_its_filters_reads_only_the_scope(corpus):
    everything = "SELECT tenant, doc_id FROM chunks ORDER BY doc_id"
    with db.query_connection() as conn:
        with conn.transaction():
            scoped(conn, corpus, ["g"])
            rows = conn.execute(everything).fetchall()
            docs = conn.execute("SELECT doc_id FROM documents ORDER BY doc_id").fetchall()
        assert [(r["tenant"], r["doc_id"]) for r in rows] == [(corpus, "both.md"), (corpus, "open.md")]
        assert [r["doc_id"] for r in docs] == ["both.md", "open.md"]
        with conn.transaction():
            scoped(conn, corpus, ["hr", "other"])
            assert [r["doc_id"] for r in conn.execute(everything)] == ["both.md", "hr.md"]
        # the settings lasted one transaction: unset (or empty) settings admit nothing
        with conn.transaction():
            assert conn.execute(everything).fetchall() == []
        with conn.transaction():
            scoped(conn, corpus, [])
            assert conn.execute(everything).fetchall() == []
        with conn.transaction():
            scoped(conn, "", ["g"])
            assert conn.execute(everything).fetchall() == []
    with db.connection() as owner:  # the owner (ingestion) is not bound: the rows are really there
        n = owner.execute("SELECT count(*) AS n FROM chunks WHERE tenant LIKE %s", (corpus + "%",)).fetchone()
        assert n["n"] == 4


def test_a_retrieval_that_forgot_its_tenant_filter_does_not_leak(corpus, monkeypatch):
    """Simulate the bug RLS is for: the scope clause of every retrieval statement replaced by TRUE."""
    monkeypatch.setattr(sql, "SCOPE", "TRUE")
    settings = get_settings()
    for mode in ("lexical", "vector", "hybrid"):
        req = SearchRequest(query=WORD, tenant=corpus, groups=["g"], k=10, mode=mode)
        with db.connection() as owner:  # as the owner the bug is real: another tenant's and hr's rows
            leaked = {h.doc_id for h in search.search(owner, req, vec(WORD), settings).hits}
        # Rows the caller may not see come back (which ones depends on what else shares the database:
        # the whole suite's documents compete for the top k once the scope is gone).
        assert leaked - {"open.md", "both.md"}, mode
        with db.query_connection() as conn:  # the query pool's role: only what the caller may see
            hits = search.search(conn, req, vec(WORD), settings).hits
        assert {h.doc_id for h in hits} == {"open.md", "both.md"}, mode
    # and through the service the query pool uses
    resp = service.search(SearchRequest(query=WORD, tenant=corpus, groups=["hr"], k=10, mode="lexical"))
    assert {h.doc_id for h in resp.hits} == {"hr.md", "both.md"}


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO documents (tenant, doc_id) VALUES ('t', 'new.md')",
        "UPDATE chunks SET acl = '{everyone}'",
        "DELETE FROM chunks",
        "TRUNCATE chunks",
        "SELECT count(*) FROM jobs",
        "CREATE TABLE planted (x int)",
    ],
)
def test_the_query_role_cannot_write_or_read_other_tables(corpus, statement):
    with db.query_connection() as conn:
        conn.read_only = False  # refused by privilege, not only by a read-only transaction
        try:
            scoped(conn, corpus, ["g", "hr"])
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        finally:
            conn.rollback()  # were the role able to write, nothing would be kept


def test_query_tasks_run_as_the_query_role(celery_worker, corpus, stack, monkeypatch):
    seen: list[dict] = []
    original = service.sql_search

    def recording(conn, *args, **kwargs):
        seen.append(
            conn.execute(
                "SELECT current_user AS who, pg_has_role(current_user, 'ragline_query', 'MEMBER') AS member,"
                " (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user) AS bypass"
            ).fetchone()
        )
        conn.rollback()
        return original(conn, *args, **kwargs)

    monkeypatch.setattr(service, "sql_search", recording)  # the in-process worker runs this module
    client = RaglineClient(stack.effective_redis_url(), timeout=60)
    found = client.search(WORD, tenant=corpus, groups=["g"], mode="lexical")
    assert {h.doc_id for h in found.hits} == {"open.md", "both.md"}
    assert seen == [{"who": "ragline_query_login", "member": True, "bypass": False}]


def test_the_embedded_login_role_keeps_its_password_out_of_urls(stack):
    runtime = json.loads(stack.runtime_file.read_text())
    url = runtime["query_database_url"]
    assert "ragline_query_login" in url and "password" not in url
    secrets = stack.home_dir / "secrets"
    password = (secrets / "query_db_password").read_text().strip()
    assert len(password) >= 32 and password not in stack.runtime_file.read_text()
    for name in ("query_db_password", "query_db.pgpass"):
        assert stat.S_IMODE((secrets / name).stat().st_mode) == 0o600
    assert db.query_database_url(get_settings()) == url
    with db.connection() as owner:  # stored as a SCRAM verifier, never as the password
        row = owner.execute(
            "SELECT rolpassword, rolcanlogin, rolsuper, rolcreaterole FROM pg_authid"
            " WHERE rolname = 'ragline_query_login'"
        ).fetchone()
    assert row["rolpassword"].startswith("SCRAM-SHA-256$") and password not in row["rolpassword"]
    assert row["rolcanlogin"] and not row["rolsuper"] and not row["rolcreaterole"]


def test_lexical_search_keeps_its_index_under_row_level_security(corpus):
    """``tsvector @@ tsquery`` must be leakproof, or Postgres does not use the GIN index for a role
    that row-level security binds (it reads every row of the tenant); the warm-up says so."""
    import numpy as np

    from bench.synthetic import EmbeddingSpace, load_chunks

    with db.connection() as owner:  # a tenant large enough that only the GIN index finds WORD cheaply
        load_chunks(owner, corpus, EmbeddingSpace().sample(3000, np.random.default_rng(0)), ["g"], start=10)
        owner.commit()
        owner.execute("ANALYZE chunks")
        owner.commit()
    settings = get_settings()
    req = SearchRequest(query=WORD, tenant=corpus, groups=["g"], k=10, mode="lexical")
    f = filters.compile_filters(req)
    statement = "EXPLAIN (COSTS OFF) " + sql.render(sql.LEXICAL_SQL, f.where_sql())
    params = {"tenant": corpus, "groups": ["g"], "n": 50, "query": WORD, "rank_norm": 1, **f.params}

    def plan_as_query_role(owner: psycopg.Connection, leakproof: bool) -> tuple[str, str | None]:
        """The lexical statement's plan for the query role, and what the warm-up would say."""
        try:
            if not leakproof:
                owner.execute("ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) NOT LEAKPROOF")
            owner.execute("SET LOCAL ROLE ragline_query_login")
            transaction.set_transaction_params(owner, req, settings)
            plan = "\n".join(r["QUERY PLAN"] for r in owner.execute(statement, params))
            return plan, row_security.row_security_problem(owner)  # last: it ends the transaction
        finally:
            owner.rollback()

    with db.connection() as owner:
        plan, problem = plan_as_query_role(owner, leakproof=True)
        assert "chunks_tsv_gin" in plan and problem is None, plan
        plan, problem = plan_as_query_role(owner, leakproof=False)  # rolled back afterwards
        assert "chunks_tsv_gin" not in plan and "LEAKPROOF" in problem, plan
    with db.query_connection() as conn:
        assert row_security.row_security_problem(conn) is None
    with db.connection() as owner:  # a query pool left on DATABASE_URL is told it is not bound
        assert "does not bind" in row_security.row_security_problem(owner)


@pytest.mark.parametrize("groups", [["wide"], ["narrow"], ["rare"], ["narrow", "rare"]])
def test_the_chunks_policy_reads_the_groups_once_and_leaves_the_estimate_to_the_where(corpus, groups):
    """The policy repeats the statement's own ACL filter, so it must neither multiply the planner's
    estimate of the caller's rows (a tenant that looks ten or a hundred times smaller is sorted in
    full instead of walked through HNSW, or read in full for a join) nor parse the groups setting
    again for every row (migration 0020): the query role's estimate of a scope is the owner's, and
    its plan reads the groups in an init plan."""
    import numpy as np

    from bench.synthetic import EmbeddingSpace, load_chunks

    def acl(d: int) -> list[str]:  # 300 documents of 10 chunks: 90 %, 10 % and 1 % of them
        return ["narrow"] if d % 10 == 0 and d % 100 else ["narrow", "rare"] if d % 100 == 0 else ["wide"]

    with db.connection() as owner:
        vectors = EmbeddingSpace().sample(3000, np.random.default_rng(1))
        load_chunks(owner, corpus, vectors, [], start=10, doc_acls=[acl(d) for d in range(300)])
        owner.commit()
        owner.execute("ANALYZE chunks")
        owner.commit()
    statement = "EXPLAIN (FORMAT JSON) SELECT c.id FROM chunks c WHERE c.tenant = %s AND c.acl && %s::text[]"

    def estimate(conn: psycopg.Connection) -> tuple[float, str]:
        plan = conn.execute(statement, (corpus, groups)).fetchone()["QUERY PLAN"][0]["Plan"]
        return plan["Plan Rows"], json.dumps(plan)

    with db.connection() as owner:
        owners, _ = estimate(owner)
        try:
            owner.execute("SET LOCAL ROLE ragline_query_login")
            scoped(owner, corpus, groups)
            role, plan = estimate(owner)
        finally:
            owner.rollback()
    assert 0.5 <= role / owners <= 2, (role, owners, plan)
    assert "InitPlan" in plan and "current_setting" in plan, plan
