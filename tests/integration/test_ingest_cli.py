"""`ragline ingest PATH... --tenant T --acl G1,G2 --wait --json` as a user runs it (a subprocess), with the
session's in-process worker consuming the tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ragline.shared import db
from tests.conftest import REPO
from tests.integration.test_ingest import section
from tests.loopback import LoopbackServer

KEYS = {"documents", "chunks", "embedded", "skipped_unchanged", "failed", "errors"}


def _ingest(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "ragline.cli", "ingest", *args, "--wait", "--json"],
        cwd=REPO,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_cli_json_summary_first_and_second_run(celery_worker, use_settings, tenant, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Первый\n\n" + section("А", 12), encoding="utf-8")
    (tmp_path / "docs" / "b.md").write_text("# Второй\n\n" + section("Б", 12), encoding="utf-8")
    (tmp_path / "docs" / "empty.md").write_bytes(b"")
    (tmp_path / "other").mkdir()
    extra = tmp_path / "other" / "extra.txt"
    extra.write_text("Отдельный файл, переданный путём. В нём два предложения.", encoding="utf-8")
    with LoopbackServer() as srv:
        use_settings(embedder="voyage", voyage_base_url=srv.url + "/v1", voyage_api_key="test-key")
        first = _ingest(
            str(tmp_path / "docs"), str(extra), str(extra), "--tenant", tenant, "--acl", "staff, auditors"
        )
        second = _ingest(
            str(tmp_path / "docs"), str(extra), str(extra), "--tenant", tenant, "--acl", "staff,auditors"
        )
    assert KEYS <= set(first)
    assert (first["documents"], first["failed"], first["skipped_unchanged"]) == (4, 1, 0)
    assert first["errors"] == [{"doc_id": "empty.md", "error": "parse: empty document"}]
    assert first["embedded"] == first["chunks"] == srv.stats.texts_embedded >= 3
    assert (second["documents"], second["skipped_unchanged"], second["embedded"], second["failed"]) == (
        4,
        3,
        0,
        1,
    ), second
    with db.connection() as c:
        acls = {
            tuple(r["acl"]) for r in c.execute("SELECT DISTINCT acl FROM chunks WHERE tenant = %s", (tenant,))
        }
    assert acls == {("staff", "auditors")}
