"""``source_commits.selection``: the fingerprint of what chose a git source's files at its recorded
commit (``ragline.ingest.sources.GitSource.selection``: globs, skip rules, formats). A sync under
another selection lists every file instead of the diff, so a changed ``--include`` (or an upgrade
with other skip rules) prunes and adds what the diff cannot name. Rows recorded before this column
hold the empty string: their next sync lists every file once.
"""

from yoyo import step

__depends__ = {"0018_documents_acl_index"}

steps = [
    step(
        "ALTER TABLE source_commits ADD COLUMN IF NOT EXISTS selection text NOT NULL DEFAULT ''",
        "ALTER TABLE source_commits DROP COLUMN IF EXISTS selection",
    ),
]
