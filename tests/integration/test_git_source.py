"""Git sources through real workers: a repository built in the test, ingested, changed across two
commits and pushed; the voyage embedder points at the loopback server, which records every text it
embeds. Also ``ragline ingest`` of the requests bundle and ``ragline search --mode lexical``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragline.ingest.chunk import code as code_chunker
from ragline.shared.sdk.names import TASK_INGEST_EVENT
from ragline.shared.worker import db
from tests.conftest import DATASETS
from tests.gitrepo import commit, git, git_sources
from tests.integration.lifecycle_helpers import wait_job
from tests.loopback import LoopbackServer

MODELS_V1 = '''"""Users."""

import json


class User:
    """A user of the site."""

    def __init__(self, first, last):
        self.first = first
        self.last = last

    def getUserName(self):
        """The name shown on the profile page."""
        return f"{self.first} {self.last}"

    def save(self, store):
        store.put(self.first, json.dumps({"first": self.first, "last": self.last}))
        store.flush()
        return True


def register_hook(event, hook):
    """Remember a callback for an event."""
    HOOKS.setdefault(event, []).append(hook)
'''

UTIL = "".join(
    f'def helper_{i}(value):\n    """Helper number {i} of the toolbox."""\n'
    f"    total = value * {i} + {i}\n    return total - {i} * 2 + len(str(value))\n\n\n"
    for i in range(12)
)

FILES_V1 = {
    "app/models.py": MODELS_V1,
    "app/util.py": UTIL,
    "app/old.py": "def obsolete():\n    return 'gone soon'\n",
    "tests/test_models.py": "from app.models import User\n\n\ndef test_name():\n    assert User('a', 'b').getUserName() == 'a b'\n",
    "docs/guide.md": "---\nid: guide\nrelated_code:\n  - app/models.py\n---\n# Guide\n\nHow users are saved.\n",
    "vendor/dep.py": "def vendored():\n    return 1\n",
}


@pytest.fixture()
def loopback():
    with LoopbackServer(keep_bodies=1000) as srv:
        yield srv


@pytest.fixture()
def voyage(use_settings, loopback, tenant, monkeypatch):
    """Settings for the test, and the code chunker's sizes (``max_chars``, ``min_chars``: constants
    of ingest/chunk/code.py, set for the test)."""
    base = {
        "embed_provider": "voyage",
        "providers_voyage_base_url": loopback.url + "/v1",
        "providers_voyage_api_key": "test-key",
        "embed_model": f"voyage-git-{tenant}"[:60],  # its own embedding cache
    }
    # small chunks: each definition of these small files is a chunk of its own
    sizes = {"max_chars": 400, "min_chars": 100}

    def apply(**more):
        sizes.update({k: more.pop(k) for k in ("max_chars", "min_chars") if k in more})
        monkeypatch.setattr(code_chunker, "MAX_CHARS", sizes["max_chars"])
        monkeypatch.setattr(code_chunker, "MIN_CHARS", sizes["min_chars"])
        use_settings(**{**base, **more})

    apply()
    return apply


def embedded_texts(loopback) -> list[str]:
    return [t for body in loopback.stats.bodies if "input" in body for t in body["input"]]


def push(tenant: str, source: str, before: str | None, after: str, version: int) -> dict:
    from ragline.shared.worker.celery_app import app

    ev = {"type": "push", "tenant": tenant, "source": source, "after": after, "version": version}
    if before:
        ev["before"] = before
    return app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=60)


def documents(tenant: str) -> dict[str, dict]:
    with db.connection() as c:
        rows = c.execute(
            "SELECT doc_id, status, layer, title, metadata, chunk_count FROM documents WHERE tenant = %s",
            (tenant,),
        ).fetchall()
    return {r["doc_id"]: r for r in rows}


def chunks(tenant: str, doc_id: str) -> list[dict]:
    with db.connection() as c:
        return c.execute(
            "SELECT chunk_no, heading_path, context, content, layer, metadata, code_tsv IS NOT NULL AS terms"
            " FROM chunks WHERE tenant = %s AND doc_id = %s ORDER BY chunk_no",
            (tenant, doc_id),
        ).fetchall()


def test_push_ingests_exactly_what_changed(celery_worker, voyage, loopback, tenant, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    c1 = commit(repo, FILES_V1, 1_700_000_000)
    name = "app-repo"
    voyage(lifecycle_sources=git_sources(tenant, name, repo, ["dev"]))

    # the first push (a new branch): every tracked file but the vendored one
    first = push(tenant, name, "0" * 40, "main", 1)
    assert first["outcome"] == "synced" and first["push"]["commit"] == c1
    assert (first["push"]["base"], first["push"]["enqueued"], first["push"]["skipped"]) == (None, 5, 1)
    summary = wait_job(first["job_id"])
    assert summary["state"] == "succeeded", summary
    docs = documents(tenant)
    assert set(docs) == {f"{name}/{p}" for p in FILES_V1 if not p.startswith("vendor/")}
    layers = {d: r["layer"] for d, r in docs.items()}
    assert layers[f"{name}/app/models.py"] == "C0_SOURCE_CHUNKS"
    assert layers[f"{name}/tests/test_models.py"] == "C0_TEST_CHUNKS"
    assert layers[f"{name}/docs/guide.md"] == "docs"
    assert docs[f"{name}/docs/guide.md"]["metadata"]["front_matter"]["related_code"] == ["app/models.py"]
    assert docs[f"{name}/app/models.py"]["metadata"]["commit"] == c1
    models = chunks(tenant, f"{name}/app/models.py")
    assert all(c["terms"] for c in models)  # identifier terms written for code chunks
    by_symbol = {s: c for c in models for s in c["metadata"]["symbols"]}
    hook = by_symbol["register_hook"]["metadata"]
    assert (hook["span_start"], hook["span_end"]) == (hook["start_line"], hook["end_line"])
    lines = MODELS_V1.split("\n")
    assert lines[hook["span_start"] - 1 : hook["span_end"]][-1].strip().startswith("HOOKS.setdefault")
    assert by_symbol["User.getUserName"]["heading_path"].startswith("app/models.py › User")
    # code is embedded with its symbol path, not its file path (a rename costs nothing)
    assert all("app/models.py" not in c["context"] for c in models)
    with db.connection() as c:
        rec = c.execute(
            "SELECT commit_id, job_id FROM source_commits WHERE tenant = %s AND source = %s", (tenant, name)
        ).fetchone()
    assert rec["commit_id"] == c1 and str(rec["job_id"]) == first["job_id"]
    first_texts = len(embedded_texts(loopback))
    util_chunks = len(chunks(tenant, f"{name}/app/util.py"))
    # every row reached the embedder but the symbol records and the test file's, which the embedding
    # budget keeps lexical
    with db.connection() as c:
        lexical = {
            r["layer"]: r["n"]
            for r in c.execute(
                "SELECT layer, count(*) AS n FROM chunks WHERE tenant = %s AND embedding IS NULL GROUP BY layer",
                (tenant,),
            ).fetchall()
        }
    assert set(lexical) == {"C1_SYMBOLS", "C0_TEST_CHUNKS"} and util_chunks >= 2
    assert lexical["C0_TEST_CHUNKS"] == docs[f"{name}/tests/test_models.py"]["chunk_count"]
    assert first_texts == sum(r["chunk_count"] for r in docs.values()) - sum(lexical.values())

    # the second commit: one method modified, util.py renamed unchanged, old.py deleted, a file added
    loopback.reset_stats()
    models_v2 = MODELS_V1.replace("store.flush()", "store.flush(durable=True)")
    (repo / "lib").mkdir()
    git(repo, "mv", "app/util.py", "lib/toolbox.py")
    c2 = commit(
        repo,
        {"app/models.py": models_v2, "app/old.py": None, "app/new.py": "def fresh():\n    return 42\n"},
        1_700_000_500,
    )
    second = push(tenant, name, c1, c2, 2)
    p = second["push"]
    assert (p["base"], p["commit"]) == (c1, c2)
    assert (p["added"], p["modified"], p["renamed"], p["deleted"]) == (1, 1, 1, 1)
    assert (p["enqueued"], p["pruned"]) == (3, 2)
    summary = wait_job(second["job_id"])
    assert summary["state"] == "succeeded", summary
    with db.connection() as c:
        rows = c.execute(
            "SELECT doc_id, state, embedded FROM job_documents WHERE job_id = %s", (second["job_id"],)
        ).fetchall()
    embedded = {r["doc_id"]: r["embedded"] for r in rows}
    # exactly the changed files went through the pipeline; only changed chunks reached the embedder:
    # the modified method and the new function (their symbol records are lexical-only: never sent)
    assert embedded == {f"{name}/app/models.py": 1, f"{name}/lib/toolbox.py": 0, f"{name}/app/new.py": 1}
    texts = embedded_texts(loopback)
    assert len(texts) == 2
    assert any("store.flush(durable=True)" in t for t in texts) and any("return 42" in t for t in texts)
    assert "fresh\n\ndef fresh():" not in texts
    docs = documents(tenant)
    assert (
        docs[f"{name}/app/old.py"]["status"] == "deleted"
        and docs[f"{name}/app/util.py"]["status"] == "deleted"
    )
    assert not chunks(tenant, f"{name}/app/old.py") and not chunks(tenant, f"{name}/app/util.py")
    assert len(chunks(tenant, f"{name}/lib/toolbox.py")) == util_chunks
    assert docs[f"{name}/lib/toolbox.py"]["metadata"]["commit"] == c2

    # a replayed push changes nothing; an older one (a lower version) neither
    loopback.reset_stats()
    assert push(tenant, name, c1, c2, 2)["outcome"] == "ignored_duplicate"
    assert push(tenant, name, None, c1, 1)["outcome"] == "ignored_stale"
    assert loopback.stats.requests == 0
    assert documents(tenant)[f"{name}/app/new.py"]["status"] == "ready"


NET = """class HTTPAdapter:
    def send(self, request):
        return self.pool.urlopen(request)


def fetchRemoteConfig(url):
    return load(url)


def register_hook(event, hook):
    HOOKS.setdefault(event, []).append(hook)


def wire_everything(registry):
    # register the hook, then register the hook again: register hook, register hook
    hook = make_hook()
    registry.register(hook)
    registry.register(hook, again=True)
    return hook
"""


def test_identifier_queries_find_code_lexically(celery_worker, voyage, loopback, tenant, tmp_path):
    """Each query here defeats the Russian configuration alone: camelCase is one word to it, a dotted
    path one token, and ``register_hook`` two stems that the caller repeats more than the definition."""
    from ragline.query.retrieval.search import search
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import SearchRequest

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"app/models.py": MODELS_V1, "app/net.py": NET}, 1_700_000_000)
    voyage(
        min_chars=0,  # every definition a chunk of its own
        lifecycle_sources=git_sources(tenant, "r", repo, ["dev"]),
    )
    wait_job(push(tenant, "r", None, "main", 1)["job_id"])

    def top(query: str) -> dict:
        req = SearchRequest(
            query=query, tenant=tenant, groups=["dev"], k=3, mode="lexical", layers=["C0_SOURCE_CHUNKS"]
        )
        with db.connection() as conn:
            conn.commit()
            hits = search(conn, req, None, get_settings()).hits
        assert hits, f"no hit for {query!r}"
        return hits[0]

    for query, symbol in [
        ("fetch remote config", "fetchRemoteConfig"),  # camelCase split
        ("HTTPAdapter.send", "HTTPAdapter.send"),  # a dotted path
        ("register_hook", "register_hook"),  # whole, and a definition above its callers
        ("getUserName", "User.getUserName"),
    ]:
        hit = top(query)
        assert hit.metadata["symbols"] == [symbol], (query, hit.metadata)
        assert hit.metadata["span_start"] <= hit.metadata["span_end"]


def test_ragline_search_finds_register_hook_in_the_requests_bundle(
    celery_worker, voyage, loopback, tenant, tmp_path
):
    bundle = DATASETS / "swe-loc-dev" / "requests.bundle"
    if not bundle.exists():
        pytest.skip(f"dataset not present: {bundle}")
    from ragline.cli import app as cli

    voyage(max_chars=1500, min_chars=300)  # the defaults
    clone = tmp_path / "requests"
    subprocess.run(["git", "clone", "-q", str(bundle), str(clone)], check=True, capture_output=True)
    runner = CliRunner()
    # the package only (18 files): the whole tree (55 files) takes a minute on 2 cores
    args = ["ingest", str(clone), "--tenant", tenant, "--acl", "dev", "--source", "requests"]
    out = runner.invoke(cli, [*args, "--include", "requests/*", "--wait", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    assert result["state"] == "succeeded" and result["failed"] == 0 and result["enqueued"] == 18, result
    source = (clone / "requests" / "models.py").read_text().split("\n")
    # the name as an issue writes it, and as a dotted path (one token to the Russian configuration)
    for query, within in (("register_hook", 3), ("RequestHooksMixin.register_hook", 1)):
        found = runner.invoke(
            cli, ["search", query, "--mode", "lexical", "--tenant", tenant, "--groups", "dev", "--json"]
        )
        assert found.exit_code == 0, found.output
        hits = json.loads(found.stdout)["hits"]
        definition = next(
            h for h in hits[:within] if "RequestHooksMixin.register_hook" in h["metadata"].get("symbols", [])
        )
        assert definition["path"] == "requests/requests/models.py"
        start, end = definition["metadata"]["span_start"], definition["metadata"]["span_end"]
        assert any(line.strip().startswith("def register_hook(") for line in source[start - 1 : end])


def test_scheduled_reindex_of_a_git_source(celery_worker, voyage, loopback, tenant, tmp_path):
    """The full reindex lists a git source by blob id: unchanged files are not enqueued, a changed one
    is, a deleted one is pruned."""
    from ragline.ingest.control.tasks import run_reindex

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"app/models.py": MODELS_V1, "app/util.py": UTIL, "app/old.py": "OLD = 1\n"}, 1_700_000_000)
    name = f"{tenant}-src"[:60]
    voyage(lifecycle_sources=git_sources(tenant, name, repo, ["dev"]))
    first = run_reindex([name])
    assert (first["new"], first["enqueued"]) == (3, 3)
    assert wait_job(first["job_id"])["state"] == "succeeded"
    docs = documents(tenant)
    assert docs[f"{name}/app/models.py"]["layer"] == "C0_SOURCE_CHUNKS"
    assert all(c["metadata"]["span_start"] >= 1 for c in chunks(tenant, f"{name}/app/util.py"))
    commit(
        repo,
        {"app/models.py": MODELS_V1.replace("return True", "return False"), "app/old.py": None},
        1_700_000_900,
    )
    loopback.reset_stats()
    second = run_reindex([name])
    assert (second["changed"], second["unchanged"], second["enqueued"], second["pruned"]) == (1, 1, 1, 1)
    assert wait_job(second["job_id"])["state"] == "succeeded"
    assert len(embedded_texts(loopback)) == 1  # the one changed definition
    assert documents(tenant)[f"{name}/app/old.py"]["status"] == "deleted"


def _sync(entry: str, tenant: str, name: str, repo: Path, head: str, version: int) -> dict:
    """One sync of ``repo`` at ``head`` through ``ragline ingest REPO`` or a push event: its summary."""
    if entry == "push":
        result = push(tenant, name, None, head, version)
        return {**result["push"], "outcome": result["outcome"]}
    from ragline.cli import app as cli

    args = ["ingest", str(repo), "--tenant", tenant, "--acl", "dev", "--source", name, "--json"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


@pytest.mark.parametrize("entry", ["cli", "push"])
def test_a_commit_whose_job_ended_early_is_completed_by_the_next_sync(
    celery_worker, voyage, loopback, tenant, tmp_path, entry
):
    """A sync of the commit already recorded is a no-op only when every file of it is stored: after a
    cancelled (or failed) job, the next sync of the same commit, by ``ragline ingest`` or by a replayed
    push, ingests exactly the files that are missing. (A scheduled reindex lists a git source by blob
    id and never skipped them.)"""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    head = commit(repo, {"app/models.py": MODELS_V1, "app/util.py": UTIL}, 1_700_000_000)
    name = f"{tenant}-src"[:60]
    voyage(lifecycle_sources=git_sources(tenant, name, repo, ["dev"]))
    first = _sync(entry, tenant, name, repo, head, 10)
    assert wait_job(first["job_id"])["state"] == "succeeded"
    # what a job cancelled before its last batch leaves: the commit recorded, one file never stored
    with db.connection() as c:
        c.execute("DELETE FROM documents WHERE tenant = %s AND doc_id = %s", (tenant, f"{name}/app/util.py"))
        c.execute("UPDATE jobs SET state = 'cancelled' WHERE id = %s", (first["job_id"],))
    loopback.reset_stats()
    again = _sync(entry, tenant, name, repo, head, 10)  # a replayed push: the same version
    assert again.get("outcome") != "ignored_duplicate" and again["job_id"], again
    assert wait_job(again["job_id"])["state"] == "succeeded"
    docs = documents(tenant)
    assert docs[f"{name}/app/util.py"]["status"] == "ready"
    assert docs[f"{name}/app/models.py"]["status"] == "ready"
    with db.connection() as c:
        redone = c.execute(
            "SELECT doc_id FROM job_documents WHERE job_id = %s", (again["job_id"],)
        ).fetchall()
    assert [r["doc_id"] for r in redone] == [f"{name}/app/util.py"]  # only the missing file
    assert _sync(entry, tenant, name, repo, head, 11).get("outcome") == "ignored_duplicate"


def _sync_selecting(
    entry: str, tenant: str, name: str, repo: Path, head: str, version: int, exclude: list[str], voyage
) -> dict:
    """One sync like :func:`_sync` under the source's ``exclude`` globs: the configured source's for a
    push, ``--exclude`` for ``ragline ingest``."""
    if entry == "push":
        sources = json.loads(git_sources(tenant, name, repo, ["dev"]))
        sources[0]["exclude"] = exclude
        voyage(lifecycle_sources=json.dumps(sources))
        result = push(tenant, name, None, head, version)
        return {**result["push"], "outcome": result["outcome"], "job_id": result.get("job_id")}
    from ragline.cli import app as cli

    args = ["ingest", str(repo), "--tenant", tenant, "--acl", "dev", "--source", name, "--json"]
    args += [a for g in exclude for a in ("--exclude", g)]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


#: a selection change: the exclude globs of the first sync and of the next, the file that leaves
#: the index and the one that joins it
SELECTION_CHANGES = {
    "narrowed": ([], ["app/util.py"], "app/util.py", None),
    "widened": (["docs/*"], [], None, "docs/guide.md"),
}


@pytest.mark.parametrize("entry", ["cli", "push"])
@pytest.mark.parametrize("moves", [False, True], ids=["same-commit", "next-commit"])
@pytest.mark.parametrize("change", sorted(SELECTION_CHANGES))
def test_a_changed_selection_prunes_and_adds_files_the_diff_does_not_name(
    celery_worker, voyage, loopback, tenant, tmp_path, entry, moves, change
):
    """Another selection than the one the recorded commit was indexed with (the exclude globs, at the
    same commit or with a commit that touches neither file) is applied to every file: a file it now
    leaves out is pruned, one it now admits is ingested, the unchanged rest is not sent again. The
    recorded diff names neither (and at the same commit a narrowed selection has nothing missing)."""
    first_exclude, next_exclude, leaves, joins = SELECTION_CHANGES[change]
    files = {"app/models.py": MODELS_V1, "app/util.py": UTIL, "docs/guide.md": "# Guide\n\nSaving users.\n"}
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    head = commit(repo, files, 1_700_000_000)
    name = f"{tenant}-sel"[:60]
    first = _sync_selecting(entry, tenant, name, repo, head, 10, first_exclude, voyage)
    assert wait_job(first["job_id"])["state"] == "succeeded"
    ready = {d for d, r in documents(tenant).items() if r["status"] == "ready"}
    assert ready == {f"{name}/{p}" for p in files if p != joins}
    if moves:
        head = commit(repo, {"app/new.py": "def fresh():\n    return 42\n"}, 1_700_000_500)
    again = _sync_selecting(entry, tenant, name, repo, head, 11, next_exclude, voyage)
    assert again.get("outcome") == "synced", again
    if again["job_id"]:
        assert wait_job(again["job_id"])["state"] == "succeeded"
    docs = documents(tenant)
    for path in files:
        assert docs[f"{name}/{path}"]["status"] == ("deleted" if path == leaves else "ready"), path
    with db.connection() as c:
        sent = c.execute("SELECT doc_id FROM job_documents WHERE job_id = %s", (again["job_id"],)).fetchall()
    expected = {f"{name}/{p}" for p in (joins, "app/new.py" if moves else None) if p}
    assert {r["doc_id"] for r in sent} == expected  # the unchanged files are not sent again
    assert (again["pruned"], again["reselected"]) == (int(leaves is not None), True)
    # the same selection once more: nothing to do
    assert _sync_selecting(entry, tenant, name, repo, head, 12, next_exclude, voyage)["outcome"] == (
        "ignored_duplicate"
    )
