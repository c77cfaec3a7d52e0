"""The upgrade note's table of renamed variables is the settings' own table, row for row: an
operator reads there what the error at start-up will ask for."""

from __future__ import annotations

import re
from pathlib import Path

from ragline.shared.config.renamed import REMOVED, RENAMED

DOC = Path(__file__).resolve().parents[2] / "docs" / "upgrading.md"
ROW = re.compile(r"^\| `(RAGLINE_[A-Z0-9_]+)` \| `(RAGLINE_[A-Z0-9_]+)` \|$", re.M)


def test_the_upgrade_note_lists_every_renamed_variable_and_nothing_else():
    assert dict(ROW.findall(DOC.read_text(encoding="utf-8"))) == RENAMED


REMOVED_ROW = re.compile(r"^\| `(RAGLINE_[A-Z0-9_]+)` \| ([^`|]+) \|$", re.M)


def test_the_upgrade_note_lists_every_removed_variable_with_its_constant():
    assert dict(REMOVED_ROW.findall(DOC.read_text(encoding="utf-8"))) == REMOVED
