"""Vendored files through the git source's sync (``sync_git_source``: ``ragline ingest REPO``,
push events and snapshots all run it) against the real database: every way of being vendored, on
the first listing and in a push's diff, with the default skip rules and with ``skip_defaults:
false``; and a push that changes only ``.gitattributes``, which re-selects every file."""

from __future__ import annotations

import pytest

from ragline.shared.worker import db
from tests.gitrepo import CLAIMED, VENDORED_WAYS, commit, git

OWN = {"pkg/core.py": "def core():\n    return 0\n", "pkg/util.py": "def util():\n    return 1\n"}


@pytest.fixture()
def sync(voyage, tenant):
    """``sync(repo, ref, skip_defaults)``: the sync's summary and the paths it sent to ingest, each
    batch run in this process as the ingest pool runs it."""
    from ragline.ingest import tasks  # noqa: F401  (registers the ingest pool's tasks)
    from ragline.ingest.events import sync_git_source
    from ragline.ingest.roots import grant_roots
    from ragline.ingest.sources import SourceSpec
    from ragline.shared.worker.celery_app import app

    def run(repo, ref: str, skip_defaults: bool = True) -> tuple[dict, set[str]]:
        grant_roots(tenant, [repo], granted_by="test")
        spec = SourceSpec(
            name="src", kind="git", tenant=tenant, acl=["dev"], path=repo, skip_defaults=skip_defaults
        )
        sent: set[str] = set()

        def send(name: str, payload: dict) -> None:
            sent.update(d["doc_id"].removeprefix("src/") for d in payload.get("documents", [payload]))
            app.tasks[name].apply(args=[payload])

        with db.connection() as conn:
            return sync_git_source(conn, spec, ref, send, kind="ingest"), sent

    return run


def stored(tenant: str) -> set[str]:
    with db.connection() as c:
        rows = c.execute(
            "SELECT doc_id FROM documents WHERE tenant = %s AND status = 'ready'", (tenant,)
        ).fetchall()
    return {r["doc_id"].removeprefix("src/") for r in rows}


@pytest.mark.parametrize("skip_defaults", [True, False])
@pytest.mark.parametrize("way", sorted(VENDORED_WAYS))
@pytest.mark.parametrize("entry", ["first-listing", "push-diff"])
def test_vendored_files_are_not_indexed(stack, sync, tenant, tmp_path, way, skip_defaults, entry):
    files, vendored = VENDORED_WAYS[way]
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    c1 = commit(repo, {**OWN, **CLAIMED[0]})
    if entry == "push-diff":
        sync(repo, c1, skip_defaults)
    c2 = commit(repo, files, when=1_700_000_100)
    summary, sent = sync(repo, c2, skip_defaults)
    assert summary["outcome"] == "synced" and summary["base"] == (c1 if entry == "push-diff" else None)
    assert (vendored in sent) is not skip_defaults
    assert (vendored in stored(tenant)) is not skip_defaults
    assert set(OWN) | {CLAIMED[1]} <= stored(tenant)  # the claimed file is the repository's own
    if skip_defaults:
        reasons = {f["path"]: f["reason"] for f in summary["skipped_files"]}
        assert reasons[vendored].startswith(("vendored", "generated"))


def test_a_push_that_changes_gitattributes_selects_every_file_again(stack, sync, tenant, tmp_path):
    """Declaring an indexed file vendored prunes it, and un-declaring it indexes it, though the push's
    diff names only ``.gitattributes``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    c1 = commit(repo, OWN)
    sync(repo, c1)
    assert stored(tenant) == set(OWN)
    c2 = commit(repo, {".gitattributes": "pkg/util.py linguist-vendored\n"}, when=1_700_000_100)
    summary, sent = sync(repo, c2)
    assert (summary["base"], summary["pruned"], sent) == (c1, 1, set())
    assert stored(tenant) == {"pkg/core.py"}
    c3 = commit(repo, {".gitattributes": None}, when=1_700_000_200)
    summary, sent = sync(repo, c3)
    assert (summary["base"], summary["pruned"], sent) == (c2, 0, {"pkg/util.py"})
    assert stored(tenant) == set(OWN)
