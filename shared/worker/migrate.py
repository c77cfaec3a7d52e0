"""Schema migrations with yoyo-migrations (files in ``shared/worker/migrations``)."""

from __future__ import annotations

from pathlib import Path

from yoyo import get_backend, read_migrations

from ragline.shared.config.settings import get_settings

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def _yoyo_url(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"postgresql+psycopg://{rest}" if scheme in ("postgresql", "postgres") else url


def apply_migrations(database_url: str | None = None) -> list[str]:
    """Apply pending migrations under yoyo's lock; return the ids applied."""
    url = database_url or get_settings().effective_database_url()
    backend = get_backend(_yoyo_url(url))
    migrations = read_migrations(str(MIGRATIONS_DIR))
    with backend.lock():
        pending = backend.to_apply(migrations)
        backend.apply_migrations(pending)
    return [m.id for m in pending]


def pending_migrations(database_url: str | None = None) -> list[str]:
    url = database_url or get_settings().effective_database_url()
    backend = get_backend(_yoyo_url(url))
    return [m.id for m in backend.to_apply(read_migrations(str(MIGRATIONS_DIR)))]
