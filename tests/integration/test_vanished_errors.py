"""Errors of files that are gone: every path that lists a folder again settles them (entry point x
what the document was). A file that failed and was then removed leaves no open error, no ``failed``
row and nothing for ``retry-failed``; a broken file that is still there keeps its error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragline.ingest.enqueue import default_source_name
from tests.integration.lifecycle_helpers import wait_job


def _cli(*args: str):
    from ragline.cli import app as cli

    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})


def _json(run):
    return json.loads(run.stdout.strip().splitlines()[-1])


def _folder(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A folder with a good file and two that fail to load (links to a file outside the folder,
    which the ingest pool refuses to read): ``gone.md`` is removed later, ``stays.md`` is not."""
    root = tmp_path / "kb"
    root.mkdir()
    (root / "good.md").write_text("# Хорошо\n\nДокумент, который читается.\n", encoding="utf-8")
    outside = tmp_path / "outside.md"
    outside.write_text("# Снаружи\n\nФайл вне папки.\n", encoding="utf-8")
    (root / "gone.md").symlink_to(outside)
    (root / "stays.md").symlink_to(outside)
    return root, root / "gone.md", root / "stays.md"


def _open_errors(tenant: str) -> list[str]:
    run = _cli("errors", "--tenant", tenant, "--json")
    assert run.exit_code == 0, run.output
    return sorted(e["doc_id"] for e in json.loads(run.stdout))


def _failed_rows(tenant: str) -> list[str]:
    run = _cli("docs", "list", "--tenant", tenant, "--status", "failed", "--json")
    assert run.exit_code == 0, run.output
    return [d["doc_id"] for d in _json(run)["documents"]]


def _ingest_folder(root: Path, tenant: str, name: str) -> None:
    run = _cli("ingest", str(root), "--tenant", tenant, "--acl", "g", "--wait", "--json")
    assert run.exit_code in (0, 1), run.output  # 1: stays.md fails again


def _reindex_folder(root: Path, tenant: str, name: str) -> None:
    from ragline.ingest.control.tasks import run_reindex

    out = run_reindex([name])
    if out["job_id"]:
        wait_job(out["job_id"])


PATHS = {"ragline ingest FOLDER": _ingest_folder, "reindex of a folder source": _reindex_folder}


@pytest.mark.parametrize("path", list(PATHS), ids=["ingest", "reindex"])
def test_relisting_settles_errors_of_gone_files(celery_worker, voyage, tenant, tmp_path, path):
    root, gone, stays = _folder(tmp_path)
    name = f"{tenant[-40:]}-kb" if path.startswith("reindex") else default_source_name(root)
    voyage(
        embed_model="voyage-vanished",
        lifecycle_sources=json.dumps(
            [
                {
                    "name": name,
                    "kind": "folder",
                    "tenant": tenant,
                    "acl": ["g"],
                    "path": str(root),
                    "glob": "**/*.md",
                }
            ]
        ),
    )
    PATHS[path](root, tenant, name)
    ids = {p: f"{name}/{p.name}" for p in (gone, stays)}
    assert _open_errors(tenant) == sorted(ids.values())
    assert sorted(_failed_rows(tenant)) == sorted(ids.values())

    gone.unlink()
    PATHS[path](root, tenant, name)

    assert _open_errors(tenant) == [ids[stays]]  # the broken file that is still there keeps its error
    assert _failed_rows(tenant) == [ids[stays]]
    retry = _cli("retry-failed", "--tenant", tenant, "--json")
    assert retry.exit_code == 0, retry.output
    planned = _json(retry)
    assert ids[gone] not in [s["doc_id"] for s in planned["skipped"]]
    assert planned["requeued"] + len(planned["skipped"]) == 1
    good = _cli("docs", "show", f"{name}/good.md", "--tenant", tenant, "--json")
    assert good.exit_code == 0 and _json(good)["status"] == "ready"
