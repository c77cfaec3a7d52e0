"""The worker runtime both pools run on: the Celery app and task base, the database and migrations,
the providers, metrics, logging, redelivery and credentials."""
