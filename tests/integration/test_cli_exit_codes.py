"""Exit codes and summaries a script (and a person) can trust: `ragline ingest` as a user runs it (a
subprocess) against the session's stack and in-process worker.

0 ok; 1 not found or documents failed; 2 usage; 3 --wait timed out (the job goes on); 4 the stack is
not reachable. Readable output is lines, never a Python repr; skipped files are listed with why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragline.ingest.enqueue import default_source_name
from ragline.shared.worker import db
from tests.conftest import REPO
from tests.integration.test_ingest import section
from tests.loopback import loopback_voyage


@pytest.fixture()
def voyage(use_settings):
    with loopback_voyage(use_settings) as srv:
        yield srv


def _cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragline.cli", *args],
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _no_repr(text: str) -> None:
    assert "{'" not in text and "': " not in text and "[{" not in text, text


def _folder(root: Path) -> Path:
    folder = root / "mixed"
    (folder / "img").mkdir(parents=True)
    (folder / "good.md").write_text("# Хороший\n\n" + section("А", 6), encoding="utf-8")
    (folder / "empty.md").write_bytes(b"")
    (folder / "img" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / "img" / "logo@2x.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / "notes.xyz").write_text("не формат", encoding="utf-8")
    (folder / "Makefile").write_text("all:\n", encoding="utf-8")
    return folder


def test_failed_documents_exit_1_and_skipped_files_are_listed(celery_worker, voyage, tenant, tmp_path):
    folder = _folder(tmp_path)
    src = default_source_name(folder)
    run = _cli("ingest", str(folder), "--tenant", tenant, "--acl", "staff", "--wait")
    assert run.returncode == 1, run.stderr[-2000:]
    _no_repr(run.stdout)
    lines = run.stdout.splitlines()
    assert lines[0].startswith("job ") and ": completed_with_errors: some documents failed" in lines[0]
    assert (
        lines[1].startswith("2 documents: 1 stored, 0 unchanged, 1 failed;") and "4 files skipped" in lines[1]
    )
    assert f"failed: {src}/empty.md: parse: empty document" in lines
    # one line per reason: the file, or how many (with one of them); --json lists every file
    assert (
        f"skipped: 2 files, unsupported file type .png, e.g. {(folder / 'img' / 'logo.png').resolve()}"
        in (run.stdout)
    )
    assert f"skipped: {(folder / 'notes.xyz').resolve()}: unsupported file type .xyz" in lines
    assert f"skipped: {(folder / 'Makefile').resolve()}: unsupported file type (no extension)" in lines

    as_json = _cli("ingest", str(folder), "--tenant", tenant, "--acl", "staff", "--wait", "--json")
    assert as_json.returncode == 1, as_json.stderr[-2000:]
    out = json.loads(as_json.stdout)
    assert (out["state"], out["failed"], out["skipped_unchanged"]) == ("completed_with_errors", 1, 1)
    assert sorted(s["path"] for s in out["skipped"]) == sorted(
        str((folder / p).resolve()) for p in ("img/logo.png", "img/logo@2x.png", "notes.xyz", "Makefile")
    )
    assert {s["reason"] for s in out["skipped"]} == {
        "unsupported file type .png",
        "unsupported file type .xyz",
        "unsupported file type (no extension)",
    }

    # the job says the same afterwards, with the same exit code
    job = _cli("job", out["job_id"])
    assert job.returncode == 1 and "completed_with_errors" in job.stdout
    assert f"failed: {src}/empty.md: parse: empty document" in job.stdout
    _no_repr(job.stdout)

    # readable summaries of the other commands: retry-failed (the empty file never stored: no ACL)
    from ragline.cli import app as cli

    retry = CliRunner().invoke(cli, ["retry-failed", "--tenant", tenant], env={"COLUMNS": "200"})
    assert retry.exit_code == 0, retry.output
    assert (
        "0 documents requeued, 1 skipped" in retry.stdout and f"{src}/empty.md: ACL unknown" in retry.stdout
    )
    _no_repr(retry.stdout)
    status = CliRunner().invoke(cli, ["status"], env={"COLUMNS": "200"})
    # the session's services run, ragline up's processes do not (the worker runs in this test): exit 1
    assert status.exit_code == 1 and "embedded, running pid" in status.stdout
    assert "the stack runs in part: supervisor, worker-ingest" in " ".join(status.stderr.split())
    assert "{'embedded'" not in status.stdout


def test_a_folder_without_a_supported_file_is_an_error_not_a_job(celery_worker, tenant, tmp_path):
    """Such an ingest used to create a job without documents, which never finished: --wait hung."""
    folder = tmp_path / "pictures"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"\x89PNG")
    run = _cli("ingest", str(folder), "--tenant", tenant, "--acl", "staff", "--wait", timeout=60)
    assert run.returncode == 1, run.stderr
    assert "nothing to ingest" in run.stderr and ".md" in run.stderr
    assert f"skipped: {(folder / 'a.png').resolve()}: unsupported file type .png" in run.stdout
    with db.connection() as c:
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE tenant = %s", (tenant,)).fetchone()["n"] == 0


def test_wait_timeout_exits_3_and_the_job_goes_on(celery_worker, voyage, tenant, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(12):
        (folder / f"d{i:02d}.md").write_text(f"# Документ {i}\n\n" + section(str(i), 20), encoding="utf-8")
    voyage.faults.latency_s = 0.3  # every embedding request takes a while: the job outlives --timeout 0
    run = _cli(
        "ingest", str(folder), "--tenant", tenant, "--acl", "staff", "--wait", "--timeout", "0", "--json"
    )
    assert run.returncode == 3, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out["state"] == "running"
    readable_hint = _cli("job", out["job_id"][:8])
    assert readable_hint.returncode in (0, 3) and out["job_id"] in readable_hint.stdout
    from tests.integration.lifecycle_helpers import wait_job

    assert wait_job(out["job_id"])["state"] == "succeeded"  # the job went on
    assert _cli("job", out["job_id"][:8]).returncode == 0


def test_without_a_stack_commands_say_so_and_exit_4(tmp_path):
    env = {"RAGLINE_SERVICES_HOME": str(tmp_path / "nothing-here")}
    for args in (["docs", "list", "--tenant", "t"], ["job", "abc"], ["errors"]):
        run = _cli(*args, env=env, timeout=120)
        assert run.returncode == 4, (args, run.stderr)
        said = " ".join(run.stderr.split())
        assert (
            f"error: no DATABASE_URL and the embedded Postgres is not up in {tmp_path / 'nothing-here'}"
            in said
        )
        assert (
            "run `ragline up`" in said and "RAGLINE_SERVICES_HOME" in said
        )  # where it looked, and what to set
        assert "Traceback" not in run.stderr
    (tmp_path / "a.md").write_text("# A\n\nтекст", encoding="utf-8")
    run = _cli("ingest", str(tmp_path / "a.md"), "--tenant", "t", "--acl", "g", env=env, timeout=120)
    assert run.returncode == 4 and "Traceback" not in run.stderr and "run `ragline up`" in run.stderr


def test_reindex_prints_a_summary_and_exits_1_when_a_document_failed(
    celery_worker, use_settings, tenant, tmp_path
):
    from ragline.cli import app as cli

    root = tmp_path / "wiki"
    root.mkdir()
    (root / "ok.md").write_text("# Хорошо\n\n" + section("Б", 4), encoding="utf-8")
    (root / "empty.md").write_bytes(b"")
    name = f"{tenant}-wiki"
    source = {
        "name": name,
        "kind": "folder",
        "tenant": tenant,
        "acl": ["staff"],
        "path": str(root),
        "glob": "**/*.md",
    }
    with loopback_voyage(use_settings, lifecycle_sources=json.dumps([source])):
        run = CliRunner().invoke(cli, ["reindex", "--source", name, "--wait"], env={"COLUMNS": "200"})
    assert run.exit_code == 1, run.output
    _no_repr(run.stdout)
    lines = run.stdout.splitlines()
    assert ": completed_with_errors: some documents failed" in lines[0]
    assert f"source {name}: 2 listed, 2 enqueued, 0 deleted" in lines
    assert "2 documents: 1 stored, 0 unchanged, 1 failed;" in run.stdout
    assert f"failed: {name}/empty.md: parse: empty document" in lines
