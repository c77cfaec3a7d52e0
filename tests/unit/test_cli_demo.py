"""What `make run` ingests when it is given ragline's folder: the repository through the git source,
or, for a copy without git history, its docs/ only (the folder walk would take in .venv/)."""

from __future__ import annotations

from pathlib import Path

from ragline.cli.demo import _what_to_ingest


def _ragline_copy(root: Path) -> Path:
    (root / "ragline" / "cli").mkdir(parents=True)
    (root / "ragline" / "cli" / "demo.py").write_text("")
    (root / "docs").mkdir()
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "LICENSE.md").write_text("not ours")
    return root


def test_a_checkout_is_ingested_as_a_repository(tmp_path):
    repo = _ragline_copy(tmp_path)
    (repo / ".git").mkdir()
    assert _what_to_ingest(repo) == repo


def test_a_copy_without_history_ingests_its_docs_only(tmp_path):
    copy = _ragline_copy(tmp_path)
    assert _what_to_ingest(copy) == copy / "docs"


def test_any_other_folder_is_ingested_as_given(tmp_path):
    (tmp_path / "notes.md").write_text("# notes")
    assert _what_to_ingest(tmp_path) == tmp_path
