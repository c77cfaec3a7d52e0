"""``docs delete --exclude`` keeps a document out, whatever would bring it back: the matrix is every
ingest path (``ragline ingest FOLDER``, the reindex of a folder source, an upsert event, an ingest
task as a producer or ``retry-failed`` sends it) x (excluded, included again). A plain ``docs delete``
of a document whose file is still there warns that it comes back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragline.ingest.enqueue import default_source_name
from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT, TASK_INGEST_EVENT
from ragline.shared.worker import db
from tests.integration.lifecycle_helpers import wait_job

TEXT = "# Секрет\n\nВ этом файле утёк пароль от стенда: hunter2.\n"


def _cli(*args: str):
    from ragline.cli import app as cli

    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})


def _json(run):
    return json.loads(run.stdout.strip().splitlines()[-1])


def _state(tenant: str, doc_id: str) -> tuple[str | None, int]:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT status FROM documents WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
        ).fetchone()
        n = conn.execute(
            "SELECT count(*) AS n FROM chunks WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
        ).fetchone()["n"]
    return (row["status"] if row else None), n


# --- the ingest paths: each ingests the file at doc id ``doc_id`` and waits until it is done -----------
def _by_cli(root: Path, f: Path, tenant: str, doc_id: str, version: int) -> None:
    run = _cli("ingest", str(root), "--tenant", tenant, "--acl", "g", "--wait", "--json")
    assert run.exit_code == 0, run.output


def _by_reindex(root: Path, f: Path, tenant: str, doc_id: str, version: int) -> None:
    from ragline.ingest.control.tasks import run_reindex

    out = run_reindex([doc_id.split("/", 1)[0]])
    if out["job_id"]:
        wait_job(out["job_id"])


def _by_event(root: Path, f: Path, tenant: str, doc_id: str, version: int) -> None:
    from ragline.shared.worker.celery_app import app

    ev = {
        "type": "upsert",
        "tenant": tenant,
        "doc_id": doc_id,
        "uri": str(f),
        "version": version,
        "acl": ["g"],
    }
    res = app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=60)
    if res.get("task_id"):
        app.AsyncResult(res["task_id"]).get(timeout=120)


def _by_task(root: Path, f: Path, tenant: str, doc_id: str, version: int) -> None:
    from ragline.shared.worker.celery_app import app

    payload = {"tenant": tenant, "doc_id": doc_id, "uri": str(f), "acl": ["g"], "version": version}
    app.send_task(TASK_INGEST_DOCUMENT, args=[payload]).get(timeout=120)


PATHS = {"cli": _by_cli, "reindex": _by_reindex, "event": _by_event, "task": _by_task}


@pytest.mark.parametrize("path", list(PATHS))
def test_an_excluded_document_stays_out_until_included(celery_worker, voyage, tenant, tmp_path, path):
    root = tmp_path / "kb"
    root.mkdir()
    f = root / "secret.md"
    f.write_text(TEXT, encoding="utf-8")
    grant_roots(tenant, [root])
    source = f"{tenant[-30:]}-kb" if path == "reindex" else default_source_name(root)
    doc_id = f"{source}/secret.md"
    voyage(
        embed_model="voyage-exclusions",
        lifecycle_sources=json.dumps(
            [
                {
                    "name": source,
                    "kind": "folder",
                    "tenant": tenant,
                    "acl": ["g"],
                    "path": str(root),
                    "glob": "*.md",
                }
            ]
        ),
    )
    ingest = PATHS[path]
    ingest(root, f, tenant, doc_id, 10)
    assert _state(tenant, doc_id)[0] == "ready", "the path must ingest the document in the first place"

    gone = _cli("docs", "delete", doc_id, "--tenant", tenant, "--exclude", "--json")
    assert gone.exit_code == 0, gone.output
    assert _json(gone)["excluded"] == [doc_id] and "warning" not in gone.stderr
    f.write_text(TEXT + "\nИ ещё одна строка.\n", encoding="utf-8")  # changed: not a duplicate either
    ingest(root, f, tenant, doc_id, 20)
    assert _state(tenant, doc_id) == ("deleted", 0)
    listed = _json(_cli("docs", "excluded", "--tenant", tenant, "--json"))
    assert [r["doc_id"] for r in listed["excluded"]] == [doc_id]

    back = _cli("docs", "include", doc_id, "--tenant", tenant)
    assert back.exit_code == 0, back.output
    f.write_text(TEXT + "\nТретья версия.\n", encoding="utf-8")
    ingest(root, f, tenant, doc_id, 30)
    status, chunks = _state(tenant, doc_id)
    assert status == "ready" and chunks >= 1


def test_a_plain_delete_warns_when_the_document_comes_back(celery_worker, voyage, tenant, tmp_path):
    root = tmp_path / "kb"
    root.mkdir()
    (root / "secret.md").write_text(TEXT, encoding="utf-8")
    _by_cli(root, root / "secret.md", tenant, "", 0)
    doc_id = f"{default_source_name(root)}/secret.md"
    run = _cli("docs", "delete", doc_id, "--tenant", tenant, "--json")
    assert run.exit_code == 0, run.output
    out = _json(run)
    assert [c["doc_id"] for c in out["comes_back"]] == [doc_id] and out["excluded"] == []
    assert "--exclude" in run.stderr and str(root / "secret.md") in " ".join(run.stderr.split())
    _by_cli(root, root / "secret.md", tenant, doc_id, 0)  # what the warning says: it is back
    assert _state(tenant, doc_id)[0] == "ready"


def test_an_exclusion_recorded_while_the_document_embeds_still_holds(
    celery_worker, use_settings, tenant, tmp_path, monkeypatch
):
    """The batch asked before it embedded; the store asks again under the document's lock."""
    from ragline.shared.worker import jobs, providers
    from tests.integration.test_ingest_progress import GatedEmbedder, _until

    use_settings(embed_batch_size=1)
    gated = GatedEmbedder()
    monkeypatch.setitem(providers._cache, "embedder", gated)
    root = tmp_path / "kb"
    root.mkdir()
    (root / "secret.md").write_text(TEXT, encoding="utf-8")
    doc_id = f"{default_source_name(root)}/secret.md"
    try:
        run = _cli("ingest", str(root), "--tenant", tenant, "--acl", "g", "--json")
        assert run.exit_code == 0, run.output
        job_id = _json(run)["job_id"]
        _until(lambda: gated.waiting, "the batch to wait for the embedder")  # past the batch's own check
        gone = _cli("docs", "delete", doc_id, "--tenant", tenant, "--exclude", "--json")
        assert gone.exit_code == 1 and _json(gone)["excluded"] == [doc_id]  # not stored yet: not found
        gated.release(1000)
        with db.connection() as conn:
            _until(lambda: jobs.job_state(conn, job_id) == "succeeded", "the job to finish")
            summary = jobs.job_summary(conn, job_id)
    finally:
        gated.release(1000)
    assert (summary["done"], summary["skipped_unchanged"]) == (0, 1)
    assert _state(tenant, doc_id) in ((None, 0), ("deleted", 0))
