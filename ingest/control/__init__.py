"""The control pool: permission sync, document events, the scheduled reindex, stuck jobs and retention
(the ``acl`` and ``maintenance`` queues). It never embeds: a changed document is sent to the ingest
pool as a task, and an import contract keeps the embedding stages and providers out of this package."""
