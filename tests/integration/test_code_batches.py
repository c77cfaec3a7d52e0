"""A git sync sends its files in batches sized for code (``RAGLINE_CODE_BATCH_BYTES``), not for
documents: code yields many texts per byte, and a batch of 32 files of a large repository ran past
the 600 s task limit on a loaded machine."""

from __future__ import annotations

from ragline.shared.sdk.names import TASK_INGEST_BATCH, TASK_INGEST_DOCUMENT
from ragline.shared.worker import db
from tests.gitrepo import commit, git, git_sources


def module(n: int) -> str:
    return "".join(f"def f{n}_{i}(x):\n    return x + {i}  # {'.' * 40}\n\n\n" for i in range(25))


def test_a_sync_fans_out_by_code_bytes(use_settings, tenant, tmp_path):
    from ragline.ingest.events import handle_event
    from ragline.shared.sdk.contracts import IngestEvent

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    files = {f"pkg/m{n}.py": module(n) for n in range(6)}
    commit(repo, files, 1_700_000_000)
    size = len(files["pkg/m0.py"].encode())
    use_settings(
        code_batch_bytes=int(size * 2.5),  # two files a task
        lifecycle_sources=git_sources(tenant, "r", repo, ["dev"]),
    )
    sent: list[tuple[str, dict]] = []
    ev = IngestEvent(type="push", tenant=tenant, source="r", after="main", version=1)
    with db.connection() as c:
        out = handle_event(c, ev, lambda name, payload: sent.append((name, payload)) or "id")
    assert out.push["enqueued"] == 6
    # the documents' own limit (32 a batch, 4 MiB) would send 2 tasks of 3 files (one per process)
    assert [name for name, _ in sent] == [TASK_INGEST_BATCH] * 3
    assert [len(p["documents"]) for _, p in sent] == [2, 2, 2]
    use_settings(code_batch_bytes=size)  # one file a task: each goes alone
    sent.clear()
    with db.connection() as c:
        c.execute("DELETE FROM source_commits WHERE tenant = %s", (tenant,))
        c.commit()
        handle_event(
            c,
            IngestEvent(type="push", tenant=tenant, source="r", after="main", version=2),
            lambda n, p: sent.append((n, p)),
        )
    assert [name for name, _ in sent] == [TASK_INGEST_DOCUMENT] * 6
