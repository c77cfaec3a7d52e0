"""The fill writes rows whose texts the embedding cache already holds.

Rows stored before their vectors can find their texts cached by the time the fill reaches them:
two snapshots of a repository stored before either is filled share most chunks, and the first
one's fill caches what the second one's rows need. A batch of such rows embeds nothing and must
still be written, through the real git push, the loopback embedder and the fill's own function."""

from __future__ import annotations

from ragline.shared.worker import db
from tests.integration.lifecycle_helpers import wait_job
from tests.integration.test_deferred_vectors import fill_lock, loopback, repo  # noqa: F401 (fixtures)
from tests.integration.test_git_source import push

AWAITING = "SELECT context, content FROM chunks WHERE tenant = %s AND layer = 'C0_SOURCE_CHUNKS' AND embedding IS NULL"


def test_a_batch_whose_texts_are_all_cached_is_written(repo, tenant, fill_lock):  # noqa: F811
    from ragline.ingest.contextualize import embedding_text
    from ragline.ingest.embed import embed_with_cache
    from ragline.ingest.reembed import FILL_LOCK_KEY, run_fill
    from ragline.shared.worker import providers

    summary = wait_job(push(tenant, "r", None, "main", 1)["job_id"])
    assert summary["state"] == "succeeded" and summary["failed"] == 0, summary
    with db.connection() as c:
        rows = c.execute(AWAITING, (tenant,)).fetchall()
        assert len(rows) > 2, rows  # more than one batch of two
        # what another snapshot's fill leaves behind: these texts embedded and cached, these rows not
        embed_with_cache(
            c, providers.get_embedder(), [embedding_text(r["context"], r["content"]) for r in rows]
        )
        c.commit()
    fill_lock.conn.execute("SELECT pg_advisory_unlock(hashtext(%s), 0)", (FILL_LOCK_KEY,))
    fill_lock.conn.commit()

    out = run_fill(max_batches=len(rows), batch_rows=2, max_seconds=1e6)

    assert out["state"] == "succeeded" and out["rows"] >= len(rows), out
    with db.connection() as c:
        assert c.execute(AWAITING, (tenant,)).fetchall() == []
