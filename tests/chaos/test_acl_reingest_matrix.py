"""The re-ingest ACL matrix of ``tests/integration/test_reingest_acl_matrix.py`` in ``make chaos``:
every entry point (file, folder, URL source, ``ragline ingest REPO``, git source at reindex, push
event, upsert events with ``git:`` addresses) × content (unchanged, changed, broken) × a narrower or
a wider ACL, each cell asserted (every stored document and chunk on the new ACL; nothing embedded
but the changed text). Results: the ``acl_reingest_matrix`` section of ``bench/results/chaos.json``.
"""

from __future__ import annotations

import pytest

from tests.chaos import harness
from tests.integration import test_reingest_acl_matrix as matrix
from tests.integration.test_reingest_acl_matrix import ACLS, CONTENTS, ENTRIES, reingest_cell

site = matrix.site  # the fixtures of the integration matrix: a loopback site and embedder
voyage = matrix.voyage

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_every_entry_point_gives_a_reingest_its_acl(
    celery_worker, voyage, use_settings, conn, tmp_path, site
):
    rows = []
    for entry in ENTRIES:
        for content in CONTENTS:
            for direction in sorted(ACLS):
                base = tmp_path / f"{entry}-{content}-{direction}"
                base.mkdir()
                rows.append(reingest_cell(conn, voyage, use_settings, base, site, entry, content, direction))
    assert len(rows) == len(ENTRIES) * len(CONTENTS) * len(ACLS)
    assert all(r["on_new_acl"] == r["documents"] for r in rows)
    harness.record("acl_reingest_matrix", rows)
