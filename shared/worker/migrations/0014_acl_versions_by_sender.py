"""Producer versions are kept under the verified sender: the recorded ones, named by payloads, go.

``documents.acl_versions`` was keyed by the ``producer`` a payload named, so any sender could write
under another's name (a relay calling itself ``operator`` with a time in 2100 made every later
``acl set`` stale). The keys are now ``<sender>/<name>`` (``ingest/acl_sync.py``, ``producer_key``),
the sender being the role whose key signed the change (or ``unsigned``): the old keys would never
be read again, and a forged one must not survive the upgrade either. As in 0005, a change replayed
across the upgrade applies once more; the permissions themselves are untouched.
"""

from yoyo import step

__depends__ = {"0013_index_deferrals"}

steps = [
    step("UPDATE documents SET acl_versions = '{}'::jsonb WHERE acl_versions <> '{}'::jsonb"),
]
