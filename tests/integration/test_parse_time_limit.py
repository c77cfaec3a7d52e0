"""A document whose parsing takes too long fails alone, named, with the limit in its error; the
other documents of its batch are stored by the same task (issue 49, finding 5)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ragline.ingest.roots import grant_roots
from ragline.shared.worker import db, jobs

#: unclosed link destinations: python-markdown's inline parser rescans the rest of the paragraph
#: from each one, so its time grows with the square of their number (seconds at a few thousand)
PATHOLOGICAL_MD = "# Slow\n\n" + "[](" * 6000 + "\n"


def _errors(tenant: str) -> dict[str, str]:
    from ragline.cli import app as cli

    out = CliRunner().invoke(cli, ["errors", "--tenant", tenant, "--json"])
    assert out.exit_code == 0, out.output
    return {e["doc_id"]: e["error"] for e in json.loads(out.stdout)}


def test_a_slow_document_fails_alone_and_its_batch_goes_on(
    celery_worker, voyage, use_settings, tenant, tmp_path
):
    from ragline.ingest.enqueue import collect_files, default_source_name, enqueue_files
    from ragline.ingest.parse import parse_bytes

    for fmt in ("md", "text"):  # the parsers loaded, as a pool's warm-up does before its first document
        parse_bytes(b"# Warm\n\nup\n", fmt)
    use_settings(ingest_parse_timeout_s=1.0, ingest_batch_docs=32)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.md").write_text("# Первый\n\nОбычный документ о погоде.\n", encoding="utf-8")
    (folder / "slow.md").write_text(PATHOLOGICAL_MD, encoding="utf-8")
    (folder / "b.md").write_text("# Second\n\nAn ordinary page about [links](https://example.org).\n")
    (folder / "c.txt").write_text("plain text after the slow one\n")
    grant_roots(tenant, [folder])
    files = collect_files([folder])
    job = enqueue_files(files, tenant=tenant, acl=["g"])
    summary = jobs.wait_for_job(job, 300, poll_s=0.2)
    assert (summary["documents"], summary["failed"]) == (4, 1), summary
    prefix = default_source_name(folder)
    errors = {k.removeprefix(f"{prefix}/"): v for k, v in _errors(tenant).items()}
    assert errors == {
        "slow.md": "parse: parse time limit: stopped after 1 s (RAGLINE_INGEST_PARSE_TIMEOUT_S)"
    }
    with db.connection() as c:
        ready = c.execute(
            "SELECT doc_id FROM documents WHERE tenant = %s AND status = 'ready' ORDER BY doc_id", (tenant,)
        ).fetchall()
    assert [r["doc_id"] for r in ready] == [f"{prefix}/a.md", f"{prefix}/b.md", f"{prefix}/c.txt"]


def test_the_task_time_limit_names_the_document_it_struck_on(voyage, monkeypatch, tenant):
    """A stage the parse limit cannot stop (one C call) is left to the task's soft time limit: the
    document being prepared when it strikes is recorded as the one it struck on, the others of the
    batch (prepared or not, none stored yet) as not stored in time."""
    from celery.exceptions import SoftTimeLimitExceeded

    from ragline.ingest import pipeline
    from ragline.shared.sdk.contracts import IngestRequest

    real = pipeline.prepare

    def prepare(req, *args):
        if req.doc_id == "stuck.md":
            raise SoftTimeLimitExceeded()
        return real(req, *args)

    monkeypatch.setattr(pipeline, "prepare", prepare)
    reqs = [
        IngestRequest(
            tenant=tenant, doc_id=d, content=f"# {d}\n\nText of {d}.\n", fmt="md", version=1, acl=["g"]
        )
        for d in ("first.md", "stuck.md", "last.md")
    ]
    results = pipeline.ingest_batch(reqs)
    errors = {r.doc_id: r.error for r in results if r.status == "failed"}
    assert errors.pop("stuck.md") == "timeout: the task's time limit struck while preparing this document"
    assert sorted(errors) == ["first.md", "last.md"]
    assert all(
        e.startswith("timeout: task time limit exceeded before this document was stored")
        for e in errors.values()
    )
