"""What both pools use: settings, database, Celery app, providers, CLI plumbing."""
