"""The embedded stack: Postgres, Redis and the worker processes that ``ragline up`` starts; only the CLI
imports it."""
