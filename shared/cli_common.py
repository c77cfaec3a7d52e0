"""Plumbing shared by the CLI modules."""

from __future__ import annotations

from rich.console import Console

from ragline.shared.settings import get_settings

console = Console(stderr=True)


def split_csv(value: str | None) -> list[str]:
    return [g.strip() for g in (value or "").split(",") if g.strip()]


def reload_app() -> None:
    """Point the Celery app at the broker that ``ragline up`` started (or REDIS_URL)."""
    from ragline.shared.celery_app import use_broker

    use_broker(get_settings().effective_redis_url())
