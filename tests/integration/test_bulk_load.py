"""Bulk loads: the HNSW index is dropped before the rows and built once after them
(`ragline ingest --bulk`, `ragline reembed --bulk`, `ragline index defer|build`).

While the window is open the rows are written without graph maintenance and every vector search is
exact; the window is closed (the index built) even when the load's command stops early; a window
somebody else opened is joined and left to its opener.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from bench.synthetic import EmbeddingSpace, load_chunks
from ragline.cli import app as cli
from ragline.query.retrieval import search
from ragline.query.retrieval.vector_index import INDEX_NAMES, hnsw_indexes
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db
from tests.integration.test_ingest import section
from tests.loopback import loopback_voyage

OTHER, N, K = "t-bulk-other", 600, 10
GROUPS = ["staff"]


@pytest.fixture()
def voyage(use_settings):
    with loopback_voyage(use_settings, vector_exact_search_max_rows=0) as srv:
        yield srv


@pytest.fixture(scope="module")
def other_tenant(stack):
    """Another tenant's vectors, searched while a bulk load runs (in load order: ``doc-{i // 10}``)."""
    rng = np.random.default_rng(11)
    space = EmbeddingSpace(seed=11)
    vectors = space.sample(N, rng)
    with db.connection() as conn:
        load_chunks(conn, OTHER, vectors, GROUPS)
    return vectors, space.sample(4, rng)


@pytest.fixture(autouse=True)
def index_restored(stack):
    """No test leaves the shared database without its index, whatever it asserted."""
    yield
    from ragline.operations.index import build_deferred
    from ragline.shared.config.settings import get_settings

    settings = get_settings()
    with db.connection() as conn:
        conn.commit()
        conn.autocommit = True
        try:
            build_deferred(conn, settings.vector.index, settings.embed.dim)
        finally:
            conn.autocommit = False


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})


def folder_of(tmp_path, n: int, tag: str):
    folder = tmp_path / tag
    folder.mkdir()
    for i in range(n):
        (folder / f"d{i:02d}.md").write_text(f"# {tag} {i}\n\n" + section(f"{tag}{i}", 12), encoding="utf-8")
    return folder


def index_names() -> list[str]:
    with db.connection() as conn:
        return [i["name"] for i in hnsw_indexes(conn) if i["valid"]]


def exact_top(vectors: np.ndarray, q: np.ndarray) -> list[tuple[str, int]]:
    order = np.argsort(-(vectors @ q), kind="stable")[:K]
    return [(f"doc-{i // 10}", int(i % 10)) for i in order]


def vector_search(q: np.ndarray) -> list[tuple[str, int]]:
    from ragline.shared.config.settings import get_settings

    req = SearchRequest(query="", tenant=OTHER, groups=GROUPS, k=K, mode="vector", query_vector=q.tolist())
    with db.query_connection() as conn:
        hits = search.search(conn, req, q, get_settings()).hits
    return [(h.doc_id, h.chunk_no) for h in hits]


class Watcher:
    """Samples the HNSW indexes and searches the other tenant from a thread while a load runs."""

    def __init__(self, queries: np.ndarray) -> None:
        self.queries, self.samples, self.errors = queries, [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                names = index_names()
                q = self.queries[i % len(self.queries)]
                self.samples.append((names, i % len(self.queries), vector_search(q)))
            except Exception as exc:  # noqa: BLE001 - the assertions show it
                self.errors.append(repr(exc))
            i += 1
            time.sleep(0.02)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def deferral(reason: str) -> dict:
    with db.connection() as conn:
        return conn.execute(
            "SELECT * FROM index_deferrals WHERE reason = %s ORDER BY id DESC LIMIT 1", (reason,)
        ).fetchone()


def test_a_bulk_ingest_writes_the_rows_first_and_builds_the_index_once(
    celery_worker, voyage, tenant, tmp_path, other_tenant
):
    vectors, queries = other_tenant
    voyage.faults.latency_s = 0.2  # a load long enough to watch
    assert index_names() == [INDEX_NAMES["vector"]]
    with Watcher(queries) as watched:
        run = invoke(
            "ingest", str(folder_of(tmp_path, 12, "bulk")), "--tenant", tenant, "--acl", "staff",
            "--wait", "--bulk", "--json",
        )  # fmt: skip
    assert run.exit_code == 0, run.output
    out = json.loads(run.stdout)
    assert out["documents"] == 12 and out["failed"] == 0 and out["chunks"] >= 12
    assert "HNSW index deferred" in run.stderr and "index built" in run.stderr

    # the index was gone while the rows were written, and searches went on, exact
    assert not watched.errors, watched.errors[:3]
    during = [(qi, hits) for names, qi, hits in watched.samples if names == []]
    assert during, "the index was never seen missing during the load"
    assert all(hits == exact_top(vectors, queries[qi]) for qi, hits in during)

    # every chunk of the load was written inside the window; the index came after the last one
    window = deferral(f"ingest {tenant}")
    assert window["finished_at"] is not None and window["build_s"] is not None
    assert list(window["dropped"]) == [INDEX_NAMES["vector"]]
    with db.connection() as conn:
        first, last = (
            conn.execute(
                "SELECT min(updated_at) AS a, max(updated_at) AS b FROM chunks WHERE tenant = %s", (tenant,)
            )
            .fetchone()
            .values()
        )
    assert window["started_at"] < first and last < window["finished_at"]
    assert index_names() == [INDEX_NAMES["vector"]]
    assert invoke("index", "status").exit_code == 0


def test_the_index_is_built_even_when_the_bulk_command_stops_early(celery_worker, voyage, tenant, tmp_path):
    from tests.integration.lifecycle_helpers import wait_job

    voyage.faults.latency_s = 0.3  # the job outlives --timeout 0
    run = invoke(
        "ingest", str(folder_of(tmp_path, 8, "early")), "--tenant", tenant, "--acl", "staff",
        "--wait", "--timeout", "0", "--bulk", "--json",
    )  # fmt: skip
    assert run.exit_code == 3, run.output
    assert index_names() == [INDEX_NAMES["vector"]]
    assert deferral(f"ingest {tenant}")["finished_at"] is not None
    assert wait_job(json.loads(run.stdout)["job_id"])["state"] == "succeeded"  # the rest went on, indexed


def test_a_window_opened_by_the_operator_is_joined_and_left_open(
    celery_worker, voyage, tenant, tmp_path, other_tenant
):
    vectors, queries = other_tenant
    opened = invoke("index", "defer", "--reason", "nightly import", "--json")
    assert opened.exit_code == 0, opened.output
    window = json.loads(opened.stdout)
    assert window["opened"] and window["dropped"] == [INDEX_NAMES["vector"]]
    status = invoke("index", "status", "--json")
    assert (
        status.exit_code == 1
        and "deferred by a bulk load (nightly import" in json.loads(status.stdout)["problem"]
    )
    assert json.loads(invoke("index", "defer", "--json").stdout) == {**window, "opened": False, "dropped": []}
    shown = json.loads(invoke("status", "--json").stdout)["index_deferral"]  # what `ragline status` shows
    assert shown["id"] == window["id"] and shown["reason"] == "nightly import"

    run = invoke(
        "ingest",
        str(folder_of(tmp_path, 3, "joined")),
        "--tenant",
        tenant,
        "--acl",
        "staff",
        "--wait",
        "--bulk",
    )
    assert run.exit_code == 0, run.output
    assert f"joined the open deferral window {window['id']}" in run.stderr
    assert index_names() == []  # the joiner does not build: the window is its opener's
    assert vector_search(queries[0]) == exact_top(vectors, queries[0])

    built = invoke("index", "build", "--json")
    assert built.exit_code == 0, built.output
    res = json.loads(built.stdout)
    assert res["closed"] == window["id"] and res["built"] == INDEX_NAMES["vector"]
    assert index_names() == [INDEX_NAMES["vector"]]
    assert invoke("index", "status").exit_code == 0
    again = invoke("index", "build")
    assert again.exit_code == 0 and "no deferral window is open" in again.stdout


def test_bulk_needs_wait(celery_worker, tenant, tmp_path):
    run = invoke("ingest", str(folder_of(tmp_path, 1, "nowait")), "--tenant", tenant, "--acl", "x", "--bulk")
    assert run.exit_code == 2 and "--bulk needs --wait" in run.output
    assert invoke("reembed", "--bulk").exit_code == 2
    assert index_names() == [INDEX_NAMES["vector"]]


def test_a_bulk_reembed_updates_every_vector_without_the_index(celery_worker, voyage, tenant, tmp_path):
    assert (
        invoke(
            "ingest", str(folder_of(tmp_path, 4, "re")), "--tenant", tenant, "--acl", "s", "--wait"
        ).exit_code
        == 0
    )
    with db.connection() as conn:
        n = conn.execute(
            "UPDATE chunks SET embed_model = 'an-older-model' WHERE tenant = %s", (tenant,)
        ).rowcount
    assert n >= 4
    run = invoke("reembed", "--tenant", tenant, "--wait", "--bulk", "--json")
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["chunks"] == n
    with db.connection() as conn:
        models = conn.execute(
            "SELECT DISTINCT embed_model AS m FROM chunks WHERE tenant = %s", (tenant,)
        ).fetchall()
    assert [r["m"] for r in models] != ["an-older-model"] and len(models) == 1
    window = deferral(f"reembed {tenant}")
    assert window["finished_at"] is not None and list(window["dropped"]) == [INDEX_NAMES["vector"]]
    assert index_names() == [INDEX_NAMES["vector"]]
