"""The query pool on a real streaming replica, and read-your-writes for permission changes.

The replica is made from the embedded server with its own binaries (``pg_basebackup -R``, then
``pg_ctl start`` on a private socket folder and port: ``bench.replicas.replica``, which the
benchmark uses too) and stopped at the end of the module.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from bench import replicas as bench_replicas
from ragline.shared.worker import db, replicas
from tests.integration.query_corpus import store_docs

WORD = "репликация"


# ----------------------------------------------------------------------------------- pure functions
def test_split_urls_keeps_libpq_multi_host_urls_whole():
    value = "postgresql://q:pw@h1,h2:5433/r?sslmode=require, postgres://q@h3/r,postgresql://q@/r?host=/s"
    assert replicas.split_urls(value) == [
        "postgresql://q:pw@h1,h2:5433/r?sslmode=require",
        "postgres://q@h3/r",
        "postgresql://q@/r?host=/s",
    ]
    assert replicas.split_urls("host=/tmp dbname=r user=q") == ["host=/tmp dbname=r user=q"]


def test_server_names_carry_no_credentials():
    assert (
        replicas.server_name("postgresql://q:s3cret@db-2.internal:5433/ragline")
        == "db-2.internal:5433/ragline"
    )
    assert replicas.server_name("postgresql://q@/ragline?host=/run/pg&passfile=/x") == "/run/pg:5432/ragline"
    assert "s3cret" not in replicas.server_name("not a url q:s3cret@x")
    with pytest.raises(ValueError, match="twice"):
        replicas.parse_servers("postgresql://a@h/r,postgresql://b:pw@h:5432/r")


def test_order_round_robin_exclusion_failure_and_primary_policy():
    names = ["p", "r1", "r2"]
    kinds = {"p": "primary", "r1": "replica"}  # r2 not connected yet: taken as a replica
    assert replicas.order(names, kinds, set(), set(), "fallback", 0) == ["r1", "r2", "p"]
    assert replicas.order(names, kinds, set(), set(), "fallback", 2) == ["r2", "r1", "p"]
    assert replicas.order(names, kinds, set(), set(), "rotation", 1) == ["r1", "r2", "p"]
    assert replicas.order(names, kinds, set(), set(), "never", 0) == ["r1", "r2"]
    # out of rotation is never tried; failing is tried last
    assert replicas.order(names, kinds, {"r1"}, {"r2"}, "fallback", 0) == ["p", "r2"]
    assert replicas.order(names, kinds, {"r1", "r2"}, set(), "never", 0) == []


# ------------------------------------------------------------------------------------- the replica
@pytest.fixture(scope="module")
def replica(stack):
    """A hot standby of the embedded server: ``(query URL, owner URL, data dir, name)``."""
    with bench_replicas.replica(stack) as r:
        yield r.query_url, r.owner_url, r.data, r.name


def _primary_query_url(stack) -> str:
    return bench_replicas.primary_query_url(stack)


@pytest.fixture()
def routed(stack, replica, use_settings):
    """The query pool over the primary and the replica (the primary as fallback only)."""
    query_url, owner_url, _, name = replica
    primary = _primary_query_url(stack)
    use_settings(
        services_query_database_url=f"{primary},{query_url}",
        services_replica_max_lag_s=0.5,
        services_replica_retry_s=0.1,
        services_query_primary_reads="fallback",
    )
    db.reset()
    replicas._redis(stack).delete(replicas.MARK_PREFIX + name)
    yield replica
    with psycopg.connect(owner_url, autocommit=True) as c:
        c.execute("SELECT pg_wal_replay_resume()")
    replicas._redis(stack).delete(replicas.MARK_PREFIX + name)
    db.reset()  # the next test's query pool is built from its own settings


def _wait_replayed(conn, owner_url: str) -> None:
    """Until the replica has replayed everything committed on ``conn`` so far (the test's own
    writes before it pauses replay)."""
    target = replicas.primary_lsn(conn)
    with psycopg.connect(owner_url, autocommit=True) as c:
        deadline = time.monotonic() + 30
        while c.execute(replicas.REPLAY_SQL).fetchone()[1] < target:
            assert time.monotonic() < deadline, "the replica did not catch up"
            time.sleep(0.01)


def _found(tenant: str, groups: list[str]) -> set[str]:
    from ragline.query import service
    from ragline.shared.sdk.contracts import SearchRequest

    req = SearchRequest(query=WORD, tenant=tenant, groups=groups, k=10, mode="lexical")
    return {h.doc_id for h in service.retrieve(req).hits}


def _served_by_replica() -> bool:
    with db.query_connection() as conn:
        return bool(conn.execute("SELECT pg_is_in_recovery() AS r").fetchone()["r"])


def test_questions_are_answered_from_the_replica(routed, conn, tenant):
    _, owner_url, _, _ = routed
    store_docs(conn, tenant, [{"doc_id": "old.md", "content": f"{WORD} старая", "acl": ["g"]}])
    _wait_replayed(conn, owner_url)
    assert all(_served_by_replica() for _ in range(4))  # the primary is only the fallback
    with psycopg.connect(owner_url, autocommit=True) as c:
        c.execute("SELECT pg_wal_replay_pause()")
    store_docs(conn, tenant, [{"doc_id": "new.md", "content": f"{WORD} новая", "acl": ["g"]}])
    # the primary has it, the questions do not: they read the paused replica
    n = conn.execute("SELECT count(*) AS n FROM documents WHERE tenant = %s", (tenant,)).fetchone()["n"]
    assert n == 2
    assert _found(tenant, ["g"]) == {"old.md"}


def test_a_revocation_waits_for_the_replica_and_takes_it_out_of_rotation(routed, conn, tenant, stack):
    from ragline.ingest.control.tasks import run_acl_sync
    from ragline.shared.sdk.contracts import AclSyncItem, AclSyncRequest

    _, owner_url, _, name = routed
    docs = [
        {"doc_id": "secret.md", "content": f"{WORD} секрет", "acl": ["g"]},
        {"doc_id": "open.md", "content": f"{WORD} открыто", "acl": ["g"]},
    ]
    store_docs(conn, tenant, docs)
    _wait_replayed(conn, owner_url)
    assert _found(tenant, ["g"]) == {"secret.md", "open.md"}
    with psycopg.connect(owner_url, autocommit=True) as c:
        c.execute("SELECT pg_wal_replay_pause()")

    t0 = time.monotonic()
    item = AclSyncItem(tenant=tenant, doc_id="secret.md", acl=["hr"], version=1)
    result = run_acl_sync(AclSyncRequest(items=[item]), record=False)
    took = time.monotonic() - t0
    assert result.documents_updated == 1
    # every question after the sync: the primary answers, never the revoked document
    for _ in range(5):
        assert _found(tenant, ["g"]) == {"open.md"}
        assert not _served_by_replica()
    # not reported done within the bound: the replica had not replayed it, so it is out of rotation
    assert took >= 0.5 and result.replicas["excluded"] == [name]
    assert result.replicas["caught_up"] == [replicas.server_name(_primary_query_url(stack))]
    assert name in replicas.marks([name])
    # the replica itself still serves the old permission: that is what the rotation kept away
    with psycopg.connect(owner_url, autocommit=True) as c:
        acl = c.execute(
            "SELECT acl FROM documents WHERE tenant = %s AND doc_id = 'secret.md'", (tenant,)
        ).fetchone()[0]
        assert acl == ["g"]
        c.execute("SELECT pg_wal_replay_resume()")
    # replay resumed: a question's check finds it caught up and puts it back
    deadline = time.monotonic() + 15
    while not _served_by_replica():
        assert time.monotonic() < deadline, "the replica did not come back into rotation"
        time.sleep(0.05)
    assert replicas.marks([name]) == {}
    assert _found(tenant, ["g"]) == {"open.md"}
    assert _found(tenant, ["hr"]) == {"secret.md"}


def test_a_sync_the_replica_replays_in_time_excludes_nothing(routed, conn, tenant):
    from ragline.ingest.control.tasks import run_acl_sync
    from ragline.shared.sdk.contracts import AclSyncItem, AclSyncRequest

    _, _, _, name = routed
    store_docs(conn, tenant, [{"doc_id": "a.md", "content": f"{WORD} а", "acl": ["g"]}])
    item = AclSyncItem(tenant=tenant, doc_id="a.md", acl=["hr"], version=1)
    result = run_acl_sync(AclSyncRequest(items=[item]), record=False)
    assert result.replicas["excluded"] == [] and name in result.replicas["caught_up"]
    assert result.replicas["waited_s"] < 0.5
    # read-your-writes: the very next question, from the replica, sees the revocation
    assert _served_by_replica()
    assert _found(tenant, ["g"]) == set()
    assert _found(tenant, ["hr"]) == {"a.md"}


def test_a_delete_event_waits_for_the_replica_too(routed, conn, tenant):
    from ragline.ingest.control.tasks import ingest_event_task

    _, owner_url, _, name = routed
    store_docs(conn, tenant, [{"doc_id": "gone.md", "content": f"{WORD} удалить", "acl": ["g"]}])
    _wait_replayed(conn, owner_url)
    with psycopg.connect(owner_url, autocommit=True) as c:
        c.execute("SELECT pg_wal_replay_pause()")
    out = ingest_event_task.run({"type": "delete", "tenant": tenant, "doc_id": "gone.md", "version": 9})
    assert out["outcome"] == "deleted"
    assert _found(tenant, ["g"]) == set()  # not from the paused replica, which still has it
    assert out["replicas"]["excluded"] == [name]


def test_the_query_role_and_row_level_security_bind_on_the_replica(routed, conn, tenant):
    _, owner_url, _, _ = routed
    store_docs(conn, tenant, [{"doc_id": "hr.md", "content": f"{WORD} кадры", "acl": ["hr"]}])
    _wait_replayed(conn, owner_url)
    everything = "SELECT doc_id FROM chunks WHERE tenant = %s"
    with db.query_connection() as q:
        who = q.execute("SELECT current_user AS u, pg_is_in_recovery() AS r").fetchone()
        assert who == {"u": "ragline_query_login", "r": True}
        with q.transaction():  # no scope set: no row
            assert q.execute(everything, (tenant,)).fetchall() == []
        with q.transaction():
            q.execute("SELECT set_config('ragline.tenant', %s, true)", (tenant,))
            q.execute("SELECT set_config('ragline.groups', %s::text[]::text, true)", (["g"],))
            assert q.execute(everything, (tenant,)).fetchall() == []
        with q.transaction():
            q.execute("SELECT set_config('ragline.tenant', %s, true)", (tenant,))
            q.execute("SELECT set_config('ragline.groups', %s::text[]::text, true)", (["hr"],))
            assert [r["doc_id"] for r in q.execute(everything, (tenant,))] == ["hr.md"]
        with pytest.raises(psycopg.errors.InsufficientPrivilege), q.transaction():
            q.execute("SELECT * FROM jobs LIMIT 1")
    with psycopg.connect(owner_url) as owner:  # the rows are on the replica: the policies hid them
        assert owner.execute(everything, (tenant,)).fetchall() == [("hr.md",)]
