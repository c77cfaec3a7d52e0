"""Code searchable before it is embedded (``RAGLINE_INGEST_DEFER_VECTORS``), through the real
workers: a git push stores the source files with NULL vectors, the query pool's search finds them
lexically and says how many rows of the caller's scope it could not see by vector, ``ragline
status`` counts them per tenant, and the fill task embeds them afterwards. The fill is held back by
taking its lock, so "during the fill" is a state the test holds, not a race it hopes to win."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from ragline.ingest.chunk import code as code_chunker
from ragline.shared.worker import db
from tests.gitrepo import commit, git, git_sources
from tests.integration.lifecycle_helpers import wait_job
from tests.integration.test_code_structure import FILES
from tests.integration.test_git_source import push
from tests.integration.test_ingest_cli import _cli
from tests.loopback import LoopbackServer

QUERY = "register_hook remember a callback for an event"


@pytest.fixture()
def loopback():
    with LoopbackServer(keep_bodies=1000) as srv:
        yield srv


class FillLock:
    """Every slot of the fill's runners, held by the test: every fill task sent meanwhile skips."""

    SLOTS = 64  # the most RAGLINE_INGEST_FILL_RUNNERS allows

    def __init__(self, conn) -> None:
        self.conn = conn

    def hold(self) -> None:
        from ragline.ingest.reembed import FILL_LOCK_KEY

        self.conn.execute(
            "SELECT pg_advisory_lock(hashtext(%s), s) FROM generate_series(0, %s - 1) s",
            (FILL_LOCK_KEY, self.SLOTS),
        )
        self.conn.commit()

    def release(self) -> None:
        from ragline.ingest.reembed import FILL_LOCK_KEY

        self.conn.execute(
            "SELECT pg_advisory_unlock(hashtext(%s), s) FROM generate_series(0, %s - 1) s",
            (FILL_LOCK_KEY, self.SLOTS),
        )
        self.conn.commit()


@pytest.fixture()
def fill_lock(stack):
    with db.connection() as c:
        lock = FillLock(c)
        lock.hold()
        yield lock
        c.execute("SELECT pg_advisory_unlock_all()")
        c.commit()


@pytest.fixture()
def repo(celery_worker, use_settings, loopback, tenant, tmp_path, monkeypatch):
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit(path, FILES, 1_700_000_000)
    use_settings(
        ingest_defer_vectors="code",
        embed_provider="voyage",
        providers_voyage_base_url=loopback.url + "/v1",
        providers_voyage_api_key="test-key",
        embed_model=f"voyage-deferred-{tenant}"[:60],
        lifecycle_sources=git_sources(tenant, "r", path, ["dev"]),
    )
    monkeypatch.setattr(code_chunker, "MIN_CHARS", 0)
    return path


def search(tenant: str, groups: list[str], mode: str = "hybrid") -> dict:
    """Through the query pool (its read-only role under row-level security)."""
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    payload = {"query": QUERY, "tenant": tenant, "groups": groups, "mode": mode, "k": 20}
    return app.send_task(TASK_QUERY_RETRIEVE, args=[payload]).get(timeout=120)


def ask(tenant: str, groups: list[str]) -> dict:
    from ragline.shared.sdk.names import TASK_QUERY_ASK
    from ragline.shared.worker.celery_app import app

    payload = {"query": QUERY, "tenant": tenant, "groups": groups, "k": 5}
    return app.send_task(TASK_QUERY_ASK, args=[payload]).get(timeout=120)


def vectors_by_path(tenant: str) -> dict[str, list[bool]]:
    with db.connection() as c:
        rows = c.execute(
            "SELECT path, embedding IS NOT NULL AS has FROM chunks WHERE tenant = %s ORDER BY path, chunk_no",
            (tenant,),
        ).fetchall()
    out: dict[str, list[bool]] = {}
    for r in rows:
        out.setdefault(r["path"], []).append(r["has"])
    return out


def fill(tenant: str) -> None:
    from ragline.operations.snapshots import wait_for_vectors
    from ragline.shared.sdk.names import TASK_INGEST_FILL_VECTORS
    from ragline.shared.worker.celery_app import app

    out = app.send_task(TASK_INGEST_FILL_VECTORS, args=[{}]).get(timeout=300)
    assert out["state"] == "succeeded", out
    import time

    wait_for_vectors(tenant, time.monotonic() + 300)  # a fill sends itself again while rows remain


def test_code_is_searchable_before_its_vectors_and_says_so(repo, tenant, fill_lock, loopback, use_settings):
    from ragline.cli.lifecycle import lifecycle_status
    from ragline.query.retrieval.fusion import FusionPolicy
    from ragline.shared.config.settings import get_settings

    use_settings(ingest_lexical_only_layers="[]")  # the fill of every layer (the budget: below)
    summary = wait_job(push(tenant, "r", None, "main", 1)["job_id"])
    assert summary["state"] == "succeeded" and summary["failed"] == 0, summary
    stored = vectors_by_path(tenant)
    # source and test files wait for their vectors; the Markdown document was embedded as before
    assert not any(stored["r/pkg/hooks.py"]) and not any(stored["r/tests/test_hooks.py"])
    assert all(stored["r/docs/hooks.md"])
    pending = sum(not v for vs in stored.values() for v in vs)
    assert pending > 0

    during = search(tenant, ["dev"])
    hooks = [h for h in during["hits"] if h["path"] == "r/pkg/hooks.py"]
    assert hooks, during["hits"]
    assert all(h["lexical_rank"] is not None and h["vector_rank"] is None for h in hooks)
    assert during["unembedded_rows"] == pending and during["vectors_complete"] is False
    # every search and answer over the scope says so (the answer's confidence reads the count)
    assert during["degraded"] and [r for r in during["degraded_reasons"] if r.startswith("vectors pending")]
    answer = ask(tenant, ["dev"])
    assert answer["degraded"] and any(r.startswith("vectors pending") for r in answer["degraded_reasons"])
    assert answer["unembedded_rows"] == pending and answer["trace"]["unembedded_rows"] == pending
    # the vector list saw only the embedded share (the Markdown document), and weighs that much: a
    # sample's best is not the scope's best (at full weight it would outrank every lexical hit)
    total = sum(len(vs) for vs in stored.values())
    share = during["vector_share"]
    assert share == pytest.approx(1 - pending / total, abs=1e-6) and 0 < share < 1
    policy = FusionPolicy.from_settings(get_settings(), code=True).covering(share)
    for h in during["hits"]:
        terms = [(policy.vector_rrf_weight, h["vector_rank"]), (policy.lexical_weight, h["lexical_rank"])]
        assert h["fused_score"] == pytest.approx(sum(policy.rank_term(w, r) for w, r in terms if r), abs=1e-7)
    assert any(h["vector_rank"] for h in during["hits"])
    # the code file only the lexical list finds keeps a place at the top of the file list (the
    # lexical list's vote and floor: query/retrieval/file_rank.py), the embedded document beside it
    top = [f["path"] for f in during["files"][:3]]
    assert "r/pkg/hooks.py" in top and during["hits"][0]["path"] in top, (top, during["hits"][0]["path"])
    # counted in the caller's scope: another group sees none of these rows, pending or not
    other = search(tenant, ["other"])
    assert other["hits"] == [] and other["unembedded_rows"] == 0
    assert lifecycle_status(get_settings())["awaiting_vectors"][tenant] == pending

    fill_lock.release()
    fill(tenant)
    assert all(v for vs in vectors_by_path(tenant).values() for v in vs)
    after = search(tenant, ["dev"])
    assert after["unembedded_rows"] == 0 and after["vectors_complete"] is True
    assert after["vector_share"] == 1.0
    assert not [r for r in after["degraded_reasons"] if r.startswith("vectors pending")]
    assert not [r for r in ask(tenant, ["dev"])["degraded_reasons"] if r.startswith("vectors pending")]
    assert any(h["path"] == "r/pkg/hooks.py" and h["vector_rank"] is not None for h in after["hits"])
    assert tenant not in lifecycle_status(get_settings())["awaiting_vectors"]

    # a push of unchanged content stores nothing and sends nothing to the embedder
    sent = loopback.stats.texts_embedded
    git(repo, "commit", "-q", "--allow-empty", "-m", "nothing", when=1_700_000_100)
    again = wait_job(push(tenant, "r", None, "main", 2)["job_id"])
    assert again["state"] == "succeeded" and again["embedded"] == 0, again
    assert all(v for vs in vectors_by_path(tenant).values() for v in vs)
    assert loopback.stats.texts_embedded == sent


def test_a_changed_file_keeps_the_vectors_the_cache_holds(repo, tenant, fill_lock):
    """A changed file is stored with NULL only for its new rows: its unchanged chunks take their
    vectors from the embedding cache at store time, so the fill embeds only what changed."""
    wait_job(push(tenant, "r", None, "main", 1)["job_id"])
    fill_lock.release()
    fill(tenant)
    fill_lock.hold()
    changed = FILES["pkg/queue.py"] + "\n\ndef flush(queue):\n    return list(queue)\n"
    commit(repo, {"pkg/queue.py": changed}, 1_700_000_200)
    summary = wait_job(push(tenant, "r", None, "main", 2)["job_id"])
    assert summary["state"] == "succeeded" and summary["failed"] == 0, summary
    with db.connection() as c:
        rows = c.execute(
            "SELECT content, embedding IS NOT NULL AS has FROM chunks"
            " WHERE tenant = %s AND path = 'r/pkg/queue.py' AND layer = 'C0_SOURCE_CHUNKS'",
            (tenant,),
        ).fetchall()
    drain = [r["has"] for r in rows if "def drain" in r["content"] and "def flush" not in r["content"]]
    flush = [r["has"] for r in rows if "def flush" in r["content"]]
    assert drain and all(drain), rows
    assert flush and not any(flush), rows


def rows_by_layer(tenant: str) -> dict[str, list[bool]]:
    """Per layer, whether each of its rows has a vector."""
    with db.connection() as c:
        rows = c.execute(
            "SELECT layer, embedding IS NOT NULL AS has FROM chunks WHERE tenant = %s ORDER BY layer, id",
            (tenant,),
        ).fetchall()
    out: dict[str, list[bool]] = {}
    for r in rows:
        out.setdefault(r["layer"], []).append(r["has"])
    return out


@pytest.mark.parametrize("defer", ["repositories", "code", "none"])
@pytest.mark.parametrize(
    "lexical_only", [["C1_SYMBOLS"], ["C1_SYMBOLS", "docs"], []], ids=["symbols", "symbols+docs", "none"]
)
def test_the_embedding_budget_decides_which_layers_get_vectors(
    repo, tenant, fill_lock, use_settings, loopback, defer, lexical_only
):
    """A layer the budget keeps lexical gets no vector from the ingest or the fill; search and
    ``ragline status`` count its rows as lexical-only, never as awaiting vectors, so a fully filled
    repository is complete (share 1) while its symbol records are still found lexically."""
    from ragline.cli.lifecycle import lifecycle_status
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.names import TASK_INGEST_FILL_VECTORS
    from ragline.shared.worker.celery_app import app

    use_settings(
        ingest_defer_vectors=defer,
        ingest_lexical_only_layers=json.dumps(lexical_only),
        embed_model=f"voyage-budget-{uuid.uuid4().hex}",  # an empty embedding cache for every case
    )
    summary = wait_job(push(tenant, "r", None, "main", 1)["job_id"])
    assert summary["state"] == "succeeded" and summary["failed"] == 0, summary
    stored = rows_by_layer(tenant)
    assert {"C0_SOURCE_CHUNKS", "C1_SYMBOLS", "C0_TEST_CHUNKS", "docs"} <= set(stored), stored
    kept = sum(len(stored[layer]) for layer in lexical_only)
    pending = sum(not v for layer, vs in stored.items() if layer not in lexical_only for v in vs)
    # a source file's rows, and under "repositories" the repository's docs too
    deferred = {
        "repositories": {"C0_SOURCE_CHUNKS", "C0_TEST_CHUNKS", "C1_SYMBOLS", "docs"},
        "code": {"C0_SOURCE_CHUNKS", "C0_TEST_CHUNKS", "C1_SYMBOLS"},
        "none": set(),
    }[defer] - set(lexical_only)
    assert pending == sum(len(stored[layer]) for layer in deferred)
    assert all(not any(stored[layer]) for layer in lexical_only)

    during = search(tenant, ["dev"])
    assert during["unembedded_rows"] == pending and during["vectors_complete"] is (pending == 0)
    # counted while rows await (the share leaves them out), not read by every search after the fill
    assert during["lexical_only_rows"] == (kept if pending else None)
    other = search(tenant, ["other"])  # counted in the caller's scope
    assert (other["unembedded_rows"], other["lexical_only_rows"]) == (0, None)
    total = sum(len(vs) for vs in stored.values())
    assert during["vector_share"] == pytest.approx(1 - pending / (total - kept), abs=1e-6)
    status = lifecycle_status(get_settings())
    assert status["awaiting_vectors"].get(tenant, 0) == pending
    assert status["lexical_only_rows"].get(tenant, 0) == kept

    fill_lock.release()
    out = app.send_task(TASK_INGEST_FILL_VECTORS, args=[{}]).get(timeout=300)
    assert out["state"] == "succeeded", out
    fill(tenant)
    after_fill = rows_by_layer(tenant)
    for layer, has in after_fill.items():
        assert (not any(has)) if layer in lexical_only else all(has), (layer, has)
    again = app.send_task(TASK_INGEST_FILL_VECTORS, args=[{}]).get(timeout=300)
    assert again["rows"] == 0 and again["more"] is False, again  # nothing left for any fill

    after = search(tenant, ["dev"])
    assert after["unembedded_rows"] == 0 and after["vectors_complete"] is True
    assert after["vector_share"] == 1.0 and after["lexical_only_rows"] is None
    records = [h for h in after["hits"] if h["layer"] == "C1_SYMBOLS"]
    assert records, after["hits"]  # the symbol records are still found
    if "C1_SYMBOLS" in lexical_only:  # by the lexical search alone
        assert all(h["lexical_rank"] is not None and h["vector_rank"] is None for h in records)
    else:
        assert any(h["vector_rank"] is not None for h in records)
    status = lifecycle_status(get_settings())
    assert tenant not in status["awaiting_vectors"]
    assert status["lexical_only_rows"].get(tenant, 0) == kept


@pytest.mark.parametrize("ingesting", [False, True], ids=["idle", "a-job-running"])
@pytest.mark.parametrize("runners", [1, 2, 3])
def test_the_fill_embeds_on_every_runner_once_no_job_is_ingesting(
    repo, tenant, fill_lock, use_settings, loopback, runners, ingesting
):
    """Up to ``RAGLINE_INGEST_FILL_RUNNERS`` fill tasks embed at once, each its own rows: every row
    is embedded exactly once and the embedder sees that many requests in flight. While a job is
    ingesting, one runner only: the pool's other processes are the ingest batches'."""
    from ragline.ingest.contextualize import embedding_text
    from ragline.shared.worker import jobs

    use_settings(
        ingest_lexical_only_layers="[]",  # every layer: rows for several batches
        ingest_fill_batch_rows="2",
        ingest_fill_runners=str(runners),
        embed_model=f"voyage-runners-{uuid.uuid4().hex}",  # an empty embedding cache for every case
    )
    modules = {
        f"pkg/step_{i}.py": f'def step_{i}(value):\n    """Stage {i} of the pipeline."""\n    return value + {i}\n'
        for i in range(6 * runners)
    }
    commit(repo, modules, 1_700_000_100)
    summary = wait_job(push(tenant, "r", None, "main", 1)["job_id"])
    assert summary["state"] == "succeeded" and summary["failed"] == 0, summary
    with db.connection() as c:
        rows = c.execute(
            "SELECT context, content FROM chunks WHERE tenant = %s AND embedding IS NULL", (tenant,)
        ).fetchall()
        # the state the parallel fill is for: nothing ingesting anywhere (earlier tests' jobs included)
        c.execute(
            "UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE state IN ('queued', 'running')"
        )
        job = jobs.create_job(c, "ingest", tenant, ["still-coming"]) if ingesting else None
        c.commit()
    texts = Counter(embedding_text(r["context"], r["content"]) for r in rows)
    assert len(rows) >= 4 * runners * 2, len(rows)  # more batches than runners
    loopback.faults.latency_s = 0.3  # a batch outlasts the time a sibling task needs to start
    loopback.reset_stats()
    try:
        fill_lock.release()
        fill(tenant)
    finally:
        if job:
            with db.connection() as c:
                jobs.cancel_job(c, job)
                c.commit()
    assert all(v for vs in vectors_by_path(tenant).values() for v in vs)
    sent = Counter(t for body in loopback.stats.bodies for t in body["input"])
    assert set(sent) == set(texts) and not sent - texts, sent - texts  # no row embedded twice
    assert loopback.stats.max_in_flight == (1 if ingesting else runners)


#: a repository or folder of prose and code: the prose is written so that its rows are longer than
#: the code's, which a fill ordered by length alone would embed first
PROSE = {
    **{
        f"docs/guide_{i}.md": f"# Guide {i}\n\nThe guide's part {i} explains, in plain words and at"
        f" some length, what stage {i} of the pipeline does with each value it is given.\n"
        for i in range(4)
    },
    "README.rst": "Pipeline\n========\n\nThe project's readme says, at some length, which stages the"
    " pipeline runs and in which order they run.\n",
}
CODE = {
    **{f"pkg/step_{i}.py": f"def step_{i}(value):\n    return value + {i}\n" for i in range(4)},
    "tests/test_steps.py": "def test_step():\n    assert True\n",
}


@pytest.mark.parametrize("entry", ["git-push", "folder"])
def test_the_fill_embeds_prose_before_code(repo, tenant, fill_lock, use_settings, loopback, entry, tmp_path):
    """Rows stored before their vectors get them prose first (a repository's docs and readme, a
    folder's documents), then source chunks, symbol records and tests, whichever entry stored them:
    the order in which the embedder received their texts, one runner, batches of 2 rows."""
    from ragline.ingest.contextualize import embedding_text
    from ragline.ingest.enqueue import collect_files, enqueue_files
    from ragline.ingest.roots import grant_roots
    from ragline.shared.config.settings import get_settings

    use_settings(
        ingest_defer_vectors="repositories" if entry == "git-push" else "all",
        ingest_lexical_only_layers="[]",  # every layer is filled, the symbol records and tests too
        ingest_fill_batch_rows="2",
        ingest_fill_runners="1",
        embed_model=f"voyage-order-{uuid.uuid4().hex}",  # an empty embedding cache
    )
    if entry == "git-push":
        commit(repo, {**PROSE, **CODE}, 1_700_000_100)
        job_id = push(tenant, "r", None, "main", 1)["job_id"]
    else:
        folder = tmp_path / "folder"
        for name, text in {**PROSE, **CODE}.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        grant_roots(tenant, [folder])
        job_id = enqueue_files(collect_files([folder]), tenant=tenant, acl=["dev"])
    summary = wait_job(job_id)
    assert summary["state"] == "succeeded" and summary["failed"] == 0, summary
    with db.connection() as c:
        rows = c.execute(
            "SELECT layer, context, content FROM chunks WHERE tenant = %s AND embedding IS NULL", (tenant,)
        ).fetchall()
    code = get_settings().code
    rank = {code.source_layer: 1, code.symbols_layer: 2, code.tests_layer: 3}
    first: dict[str, int] = {}  # a text's place: its first row's (a class header and its record are alike)
    for r in rows:
        text = embedding_text(r["context"], r["content"])
        first[text] = min(first.get(text, 9), rank.get(r["layer"], 0))
    assert set(first.values()) >= {0, 1}, Counter(first.values())
    loopback.reset_stats()
    fill_lock.release()
    fill(tenant)
    order = [first[t] for body in loopback.stats.bodies for t in body["input"] if t in first]
    assert sorted(order) == order and len(order) == len(first), order


def test_the_demo_answers_the_design_questions_with_vectors_before_the_code_is_embedded(
    celery_worker, use_settings, loopback, tenant, tmp_path, fill_lock, monkeypatch
):
    """``make run`` on a repository (``ragline demo REPO``): first answers at once, lexically; then,
    the fill going prose first, the questions about the design again as soon as the docs have their
    vectors while the code's rows still await theirs, and the code question once they have them."""
    import os
    import subprocess
    import sys

    from ragline.cli.demo import QUESTIONS
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.names import TASK_INGEST_FILL_VECTORS
    from ragline.shared.worker.celery_app import app
    from tests.conftest import REPO

    use_settings(
        embed_provider="voyage",
        providers_voyage_base_url=loopback.url + "/v1",
        providers_voyage_api_key="test-key",
        embed_model=f"voyage-demo-order-{uuid.uuid4().hex}",
        ingest_defer_vectors="repositories",
        ingest_fill_batch_rows="2",
        ingest_fill_runners="1",
    )
    monkeypatch.setattr(code_chunker, "MIN_CHARS", 0)  # one source chunk per definition: many fill batches
    repo = tmp_path / "ragline"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    steps = "".join(f"def step_{i}(value):\n    return value + {i}\n\n\n" for i in range(40))
    commit(
        repo,
        {
            "docs/architecture.md": (REPO / "docs" / "architecture.md").read_text()[:3000],
            # a module of the demo's code folder in this synthetic repository, not of ragline's
            f"ingest/{'steps'}.py": steps,
        },
        1_700_000_000,
    )
    loopback.faults.latency_s = 0.3  # 20 batches of code rows outlast the demo's 2 s poll many times
    demo = subprocess.Popen(
        [sys.executable, "-m", "ragline.cli", "demo", str(repo), "--tenant", tenant],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # the progress lines too: what the test saw, if it fails
        text=True,
    )
    lines: list[str] = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:  # the first answers, then the wait for the docs' vectors
            lines.append(line.rstrip("\n"))
            if "awaiting vectors, filled in the background" in line:
                break
        fill_lock.release()
        app.send_task(TASK_INGEST_FILL_VECTORS, args=[{}])  # every fill sent meanwhile found the lock
        out, _ = demo.communicate(timeout=300)
    finally:
        if demo.poll() is None:
            demo.kill()
    lines += out.splitlines()
    assert demo.returncode in (0, 1), "\n".join(lines)  # 1: a question without a cited answer

    def at(text: str, after: int = 0) -> int:
        return next(i for i, line in enumerate(lines) if i >= after and text in line)

    code = get_settings().code
    assert [line for line in lines if "first answers" in line], "\n".join(lines)
    first = at("first answers")
    docs = at("the answers with every vector of docs in place", first)
    assert "still await" in lines[docs], lines[docs]  # the code's rows were still awaiting theirs
    still = int(lines[docs].split("; ", 1)[1].split(" ", 1)[0])
    assert still > 0, lines[docs]  # the code's rows were still awaiting theirs
    last = at(f"the answers with every vector of {code.source_layer}, {code.symbols_layer} in place", docs)
    assert "still await" not in lines[last]
    assert first < at(QUESTIONS[2], first) < docs < at(QUESTIONS[0], docs) < at(QUESTIONS[1], docs) < last
    assert at(QUESTIONS[2], last) > last
    assert not [line for line in lines[last:] if QUESTIONS[0] in line or QUESTIONS[1] in line]
    with db.connection() as c:
        assert not c.execute(
            "SELECT 1 FROM chunks WHERE tenant = %s AND embedding IS NULL AND layer = ANY(%s)",
            (tenant, ["docs", code.source_layer]),
        ).fetchall()


class DyingEmbedder:
    """An embedder that stops (as a task stopped by its soft time limit does) once it has embedded
    ``dies_after`` texts; it records what it was sent."""

    def __init__(self, dies_after: int | None = None) -> None:
        self.model = "dying-embedder"
        self.dies_after = dies_after
        self.sent: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.dies_after is not None and len(self.sent) + len(texts) > self.dies_after:
            raise TimeoutError("stopped part way through the batch")
        self.sent += texts
        return [[float(len(t) % 7 + 1)] + [0.0] * 383 for t in texts]


def test_a_fill_batch_stopped_part_way_keeps_what_it_embedded(conn, stack):
    """A batch of 40 rows stopped after its embedder returned 32 vectors: the next runner, taking
    the same rows, sends only the other 8 to the embedder (the cache kept each request's vectors)."""
    from ragline.ingest.reembed import REQUEST_ROWS, embed_rows

    conn.execute("DELETE FROM embedding_cache WHERE model = 'dying-embedder'")
    conn.commit()
    salt = uuid.uuid4().hex
    rows = [
        {
            "id": -1 - i,
            "tenant": "-",
            "doc_id": "-",
            "layer": "docs",
            "content": f"row {i} {salt}",
            "context": "",
            "content_hash": "-",
        }
        for i in range(40)
    ]
    assert 32 % REQUEST_ROWS == 0 and REQUEST_ROWS < 40
    with pytest.raises(TimeoutError):
        embed_rows(conn, DyingEmbedder(dies_after=32), rows)
    conn.rollback()
    again = DyingEmbedder()
    embed_rows(conn, again, rows)
    assert len(again.sent) == 8, len(again.sent)


@pytest.mark.parametrize("held_by_other", [0, 4])
def test_a_runner_claims_only_rows_no_other_runner_holds(stack, held_by_other):
    """Row claims are advisory locks of the runner's session: a row another runner holds is never
    claimed, the rest are taken in priority order, at most ``batch`` of them."""
    from ragline.ingest.reembed import claim, release

    rows = [{"id": 9_000_000 + i} for i in range(10)]
    with db.connection() as other, db.connection() as mine:
        taken = claim(other, rows[:held_by_other], held_by_other) if held_by_other else []
        other.commit()
        assert len(taken) == held_by_other
        for batch in (2, 8, 20):
            got = claim(mine, rows, batch)
            mine.commit()
            assert len(got) == min(batch, len(rows) - held_by_other), (batch, got)
            assert [r["id"] for r in got] == [r["id"] for r in rows if r not in taken][: len(got)]
            release(mine, [r["id"] for r in got])
            mine.commit()
        release(other, [r["id"] for r in taken])
        other.commit()
        assert len(claim(mine, rows, 20)) == 10  # released: every row free again
        mine.execute("SELECT pg_advisory_unlock_all()")
        mine.commit()


@pytest.mark.parametrize("job_arrives", [False, True], ids=["no-job", "a-job-arrives"])
def test_an_extra_runner_gives_way_to_an_ingest_job_after_its_current_batch(
    repo, tenant, fill_lock, use_settings, loopback, job_arrives
):
    """A runner beyond the first took its process while nothing was ingesting. When a job arrives
    during its batch (a push while the repository embeds), it finishes that batch and starts no
    other, so the push's batches get the process; without a job it runs its whole task."""
    from ragline.ingest.reembed import FILL_LOCK_KEY, run_fill
    from ragline.shared.sdk.names import TASK_INGEST_FILL_VECTORS
    from ragline.shared.worker import jobs, providers
    from ragline.shared.worker.celery_app import app

    use_settings(
        ingest_lexical_only_layers="[]",
        ingest_fill_runners="3",
        embed_model=f"voyage-give-way-{uuid.uuid4().hex}",  # an empty embedding cache
    )
    modules = {f"pkg/part_{i}.py": f"def part_{i}(value):\n    return value * {i}\n" for i in range(30)}
    commit(repo, modules, 1_700_000_200)
    summary = wait_job(push(tenant, "r", None, "main", 1)["job_id"])
    assert summary["state"] == "succeeded" and summary["failed"] == 0, summary
    with db.connection() as c:  # nothing ingesting anywhere: extra runners may start
        c.execute(
            "UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE state IN ('queued', 'running')"
        )
        c.commit()
    # the fill tasks the push's batches sent find every slot held and skip; one more, waited for,
    # is behind them in the queue
    skipped = app.send_task(TASK_INGEST_FILL_VECTORS, args=[{}]).get(timeout=120)
    assert skipped["state"] == "skipped", skipped
    # slot 1 alone is opened: the runner below is an extra one (slot 0 stays the test's)
    fill_lock.conn.execute("SELECT pg_advisory_unlock(hashtext(%s), 1)", (FILL_LOCK_KEY,))
    fill_lock.conn.commit()

    embedder = providers.get_embedder()
    embed_documents = embedder.embed_documents
    created: list[str] = []

    def embed_and_push(texts):  # the job arrives while the runner's first batch embeds
        if job_arrives and not created:
            with db.connection() as c:
                created.append(jobs.create_job(c, "ingest", tenant, ["a-push"]))
                c.commit()
        return embed_documents(texts)

    embedder.embed_documents = embed_and_push  # type: ignore[method-assign]
    try:
        out = run_fill(max_batches=4, batch_rows=2, max_seconds=1e6)
    finally:
        embedder.embed_documents = embed_documents  # type: ignore[method-assign]
        with db.connection() as c:
            for job in created:
                jobs.cancel_job(c, job)
            c.commit()
    assert out["state"] == "succeeded" and out["runner"] == 1, out
    assert out["rows"] == (2 if job_arrives else 8), out
    assert out["gave_way"] is job_arrives, out
    assert out["more"] is True, out  # the rest is left to the next fill task


def _rows_without_vectors(conn, tenant: str, layers: dict[str, int], embedded: int = 0) -> None:
    """``layers``: rows without a vector per layer; ``embedded`` source rows with one. Left
    uncommitted (the test rolls back): the fill looks across tenants, and no other test's fill may
    find these rows."""
    rows = [(layer, i, None) for layer, n in layers.items() for i in range(n)]
    rows += [("C0_SOURCE_CHUNKS", 100_000 + i, "[" + ",".join(["0.1"] * 384) + "]") for i in range(embedded)]
    params = (tenant, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    conn.execute(
        "INSERT INTO documents (tenant, doc_id, path, status, acl)"
        " SELECT %s, 'd-' || l || '-' || n, 'd-' || l || '-' || n, 'ready', '{dev}'"
        " FROM unnest(%s::text[], %s::int[], %s::text[]) AS u(l, n, e)",
        params,
    )
    conn.execute(
        "INSERT INTO chunks (tenant, doc_id, chunk_no, layer, content, content_hash, acl, embedding)"
        " SELECT %s, 'd-' || l || '-' || n, 0, l, 'text ' || n, l || n, '{dev}', e::vector"
        " FROM unnest(%s::text[], %s::int[], %s::text[]) AS u(l, n, e)",
        params,
    )


@pytest.mark.parametrize(
    "lexical_only",
    ['["C1_SYMBOLS", "C0_TEST_CHUNKS"]', "[]", '["C1_SYMBOLS", "C0_TEST_CHUNKS", "docs", "notes"]'],
    ids=["default", "none", "everything"],
)
def test_the_fill_selects_exactly_the_rows_awaiting_their_vectors(conn, tenant, use_settings, lexical_only):
    """The fill and a wait for it read their rows by layer (pending_vectors.FILL_PREDICATE, an index
    can serve it); the rule is PREDICATE (every layer but the lexical-only ones), which searches and
    `ragline status` count by: all pick the same rows, whatever the budget, including a layer no
    setting names."""
    from ragline.ingest.reembed import next_fill_rows
    from ragline.query.retrieval import retrievers, sql
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import SearchRequest
    from ragline.shared.worker import pending_vectors

    use_settings(ingest_lexical_only_layers=lexical_only)
    # layers below, between and above the lexical-only ones in code-point order ("C0_X", "api" and
    # "zz" sort differently in a linguistic collation)
    layers = {
        "C0_SOURCE_CHUNKS": 5,
        "C1_SYMBOLS": 7,
        "C0_TEST_CHUNKS": 3,
        "C0_X": 1,
        "api": 2,
        "docs": 2,
        "notes": 4,
        "zz": 1,
    }
    _rows_without_vectors(conn, tenant, layers, embedded=3)
    budget = pending_vectors.VectorBudget.from_settings()
    rule = {
        r["id"]
        for r in conn.execute(
            f"SELECT c.id FROM chunks c WHERE {pending_vectors.PREDICATE} AND c.tenant = %(tenant)s",
            {"tenant": tenant, **budget.params()},
        )
    }
    picked = {r["id"] for r in next_fill_rows(conn, "any-model", 10_000_000) if r["tenant"] == tenant}
    assert picked == rule
    # the count a wait for the fill polls, and the one `ragline status` shows
    assert pending_vectors.by_tenant(conn).get(tenant, 0) == len(rule)
    counts = pending_vectors.counts_by_tenant(conn)
    assert counts["awaiting"].get(tenant, 0) == len(rule)
    assert len(rule) == sum(n for layer, n in layers.items() if budget.embeds(layer))
    kept = sum(n for layer, n in layers.items() if not budget.embeds(layer))
    assert counts["lexical_only"].get(tenant, 0) == kept
    # a search's counts, in the caller's scope (the owner's connection sees the uncommitted rows)
    settings = get_settings()
    for groups, awaiting, lexical_only in ((["dev"], len(rule), kept), (["other"], 0, 0)):
        req = SearchRequest(query="x", tenant=tenant, groups=groups)
        assert conn.execute(*retrievers.pending_statement(req, settings)).fetchone()["n"] == awaiting
        scope = conn.execute(*retrievers.count_statement(sql.SCOPE_ROWS_SQL, req, settings)).fetchone()
        assert scope["lexical_only"] == lexical_only
    conn.rollback()


def _plan_nodes(node: dict) -> list[dict]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


def test_a_search_counts_the_awaiting_rows_without_reading_the_lexical_only_ones(conn, tenant, use_settings):
    """Every vector or hybrid search counts the rows of its scope awaiting their vectors. A code
    snapshot's symbol records and tests are never embedded, so after the fill they are most of its rows
    without a vector; the count reads only the awaiting ones (the ranges of layers of
    ``VectorBudget.awaiting`` on the index of migration 0022), as the query role, under row-level
    security, where it used to visit each lexical-only row."""
    from ragline.query.retrieval import retrievers, transaction
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import SearchRequest

    use_settings(ingest_lexical_only_layers='["C1_SYMBOLS", "C0_TEST_CHUNKS"]')
    _rows_without_vectors(conn, tenant, {"C1_SYMBOLS": 6000, "C0_TEST_CHUNKS": 500, "C0_SOURCE_CHUNKS": 3})
    conn.execute("ANALYZE chunks")
    settings = get_settings()
    req = SearchRequest(query="x", tenant=tenant, groups=["dev"], mode="hybrid")
    conn.execute("SET LOCAL ROLE ragline_query_login")
    transaction.set_transaction_params(conn, req, settings)
    statement, params = retrievers.pending_statement(req, settings)
    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).fetchone()
    scans = [n for n in _plan_nodes(next(iter(plan.values()))[0]["Plan"]) if "Scan" in n["Node Type"]]
    assert scans and all(
        n.get("Index Name") == "chunks_without_vector" for n in scans if "Index" in n["Node Type"]
    )
    assert "Seq Scan" not in {n["Node Type"] for n in scans}, scans
    index_rows = sum(n["Actual Rows"] for n in scans if n.get("Index Name"))
    assert index_rows == 3, scans  # the awaiting rows alone, not the 6,500 lexical-only ones
    assert conn.execute(statement, params).fetchone()["n"] == 3
    conn.rollback()


def test_the_fill_reads_the_rows_of_its_layers_not_the_table(conn, tenant, use_settings):
    """With whole layers kept lexical most rows without a vector are not the fill's: its statement
    finds its rows through the layer index of migration 0021 instead of reading every chunk (a
    parallel scan of the whole table, two or three times per fill task, before it)."""
    from ragline.ingest.reembed import FILL_ROWS, batch_statement
    from ragline.shared.worker import pending_vectors

    use_settings(ingest_lexical_only_layers='["C1_SYMBOLS", "C0_TEST_CHUNKS"]')
    # many rows the fill never takes, few it does: the shape of a code snapshot after its fill
    _rows_without_vectors(conn, tenant, {"C1_SYMBOLS": 6000, "C0_SOURCE_CHUNKS": 3})
    conn.execute("ANALYZE chunks")
    layers = pending_vectors.fill_layers(conn)
    assert "C0_SOURCE_CHUNKS" in layers and "C1_SYMBOLS" not in layers
    statement, params = batch_statement(FILL_ROWS, "m", 257, bound={"fill_layers": layers})
    plan = json.dumps(conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone())
    assert "chunks_awaiting_by_layer" in plan and "Seq Scan" not in plan, plan
    probe = json.dumps(
        conn.execute("EXPLAIN (FORMAT JSON) " + pending_vectors.LAYERS_WITHOUT_VECTORS_SQL).fetchone()
    )
    assert "chunks_awaiting_by_layer" in probe and "Seq Scan" not in probe, probe
    conn.rollback()


def _events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_ingest_wait_waits_for_the_vectors_of_a_git_source_with_progress(repo, tenant, fill_lock):
    """``ingest REPO --wait`` on a git source whose code is stored before its vectors: it waits for
    the job's rows to get them, with progress events on stderr (``--json``), and lists the files it
    skipped; ``--lexical-ok`` returns as soon as they are searchable; ``ragline job`` and ``ragline
    status`` show the rows still awaiting."""
    from ragline.cli.lifecycle import lifecycle_status
    from ragline.cli.progress import fill_rates, vector_rows
    from ragline.shared.config.settings import get_settings
    from ragline.shared.worker.metrics import ROWS_AWAITING_VECTORS
    from ragline.shared.worker.metrics_server import refresh_awaiting_vectors

    commit(repo, {"assets/logo.bin": b"\x00\x01binary"}, 1_700_000_050)
    # --lexical-ok: back once the documents are stored (searchable lexically), their vectors pending
    quick = _cli("ingest", str(repo), "--tenant", tenant, "--acl", "dev", "--wait", "--lexical-ok", "--json")
    assert quick.returncode == 0, quick.stderr[-2000:]
    first = json.loads(quick.stdout)
    awaiting = first["awaiting_vectors"]
    assert first["state"] == "succeeded" and awaiting > 0 and first["vectors_filled"] == 0, first
    assert {"path": "assets/logo.bin", "reason": "unsupported file type"} in first["skipped_files"]
    phases = [e["phase"] for e in _events(quick.stderr)]
    assert "documents" in phases and "vectors" not in phases, quick.stderr[-2000:]
    text = _cli("ingest", str(repo), "--tenant", tenant, "--acl", "dev")  # this commit is indexed
    assert "already indexed" in text.stdout, text.stdout

    job = _cli("job", first["job_id"][:8])
    assert f"{awaiting} awaiting vectors (searchable lexically until filled)" in job.stdout, job.stdout
    status = lifecycle_status(get_settings())
    [(_, row)] = vector_rows({tenant: awaiting}, status.get("vector_fill_rates", {}))
    assert status["awaiting_vectors"][tenant] == awaiting and row.startswith(
        f"{awaiting} rows awaiting vectors"
    )
    refresh_awaiting_vectors(get_settings())  # the gauge the ingest pool's endpoint serves
    assert ROWS_AWAITING_VECTORS.labels(tenant=tenant)._value.get() == awaiting

    # --wait: the documents, then the vectors of the job's rows; the fill is held, so it gives up (3)
    commit(repo, {"pkg/extra.py": "def extra_hook(event):\n    return event\n"}, 1_700_000_060)
    run = _cli("ingest", str(repo), "--tenant", tenant, "--acl", "dev", "--wait", "--json", "--timeout", "30")
    assert run.returncode == 3, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out["state"] == "succeeded" and out["awaiting_vectors"] > 0, out
    vectors = [e for e in _events(run.stderr) if e["phase"] == "vectors"]
    assert vectors, run.stderr[-2000:]
    assert all(
        e["total"] == out["awaiting_vectors"] and e["done"] == 0 and e["at"].endswith("Z") for e in vectors
    )
    assert {"rate_per_s", "eta_s"} <= set(vectors[0])

    fill_lock.release()
    fill(tenant)
    for job_id in (first["job_id"], out["job_id"]):
        assert json.loads(_cli("job", job_id, "--json").stdout)["awaiting_vectors"] == 0
    refresh_awaiting_vectors(get_settings())
    assert ROWS_AWAITING_VECTORS.labels(tenant=tenant)._value.get() == 0
    [(_, row)] = vector_rows({tenant: 1}, fill_rates(get_settings().effective_redis_url()))
    assert "rows/s" in row or "rows/min" in row, row  # the rate the fill recorded
