"""Test fixtures: a real embedded Postgres and Redis per test session, real Celery workers.

The ragline home points at a temporary folder before any ragline module reads settings, so
tests never touch a developer's ``.ragline/`` and parallel sessions never share servers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="rl-test-"))
os.environ["RAGLINE_SERVICES_HOME"] = str(_HOME)
for var in (
    "RAGLINE_HOME",  # renamed in 0.2: set, it would stop every settings load
    "DATABASE_URL",
    "REDIS_URL",
    "RAGLINE_DATABASE_URL",
    "RAGLINE_REDIS_URL",
    "RAGLINE_SERVICES_DATABASE_URL",
    "RAGLINE_SERVICES_REDIS_URL",
):
    os.environ.pop(var, None)
os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")
# tests that rank by vector right after an ingest job need the vectors stored with the rows; the
# deferred path (the default, RAGLINE_INGEST_DEFER_VECTORS=code) is what test_deferred_vectors.py tests
os.environ.setdefault("RAGLINE_INGEST_DEFER_VECTORS", "none")

REPO = Path(__file__).resolve().parents[1]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The home goes when the session ends, whether or not a test started the stack in it (a unit
    run never does) and whether the stack's teardown passed: test homes must not pile up in /tmp."""
    shutil.rmtree(_HOME, ignore_errors=True)


DATASETS = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def stack():
    """Embedded Postgres + Redis, migrated; yields the settings. Stopped at the end of the session."""
    from ragline.shared.config.settings import get_settings, reset_settings
    from ragline.shared.stack.services import embedded_stack

    reset_settings()
    with embedded_stack(get_settings()) as settings:
        yield settings


@pytest.fixture(scope="session")
def celery_worker(stack):
    """One in-process Celery worker (threads pool) consuming every queue, like all pools together."""
    from celery.contrib.testing.worker import start_worker

    from ragline.shared.sdk.names import QUEUES
    from ragline.shared.worker.celery_app import app

    app.loader.import_default_modules()
    for name in app.conf.include:
        __import__(name)
    with start_worker(
        app,
        pool="threads",
        concurrency=4,
        perform_ping_check=False,
        queues=list(QUEUES),
        loglevel="WARNING",
        shutdown_timeout=30,
    ) as worker:
        yield worker


@pytest.fixture()
def conn(stack):
    from ragline.shared.worker import db

    with db.connection() as c:
        yield c


@pytest.fixture()
def tenant(request) -> str:
    """A tenant name unique to the test, so tests do not see each other's documents: the test's name
    (readable in the database and the logs) cut to 50 characters, then a hash of its full node id, so
    two long parametrized names with a common start, or equal names in two files, never share one."""
    import hashlib

    name = request.node.name.replace("[", "-").replace("]", "")[:50]
    return f"t-{name}-{hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]}"


@pytest.fixture()
def use_settings(stack, monkeypatch):
    """Override settings for one test: ``use_settings(embed_provider="voyage", providers_voyage_base_url=...)``.

    Sets ``RAGLINE_*`` variables and drops cached settings and provider instances, so the
    in-process worker sees the same values. Everything is restored after the test.
    """
    from ragline.shared.config.settings import reset_settings
    from ragline.shared.worker import providers

    def apply(**overrides: object) -> None:
        for key, value in overrides.items():
            monkeypatch.setenv(f"RAGLINE_{key.upper()}", str(value))
        reset_settings()
        providers.reset()

    yield apply
    monkeypatch.undo()
    reset_settings()
    providers.reset()


@pytest.fixture()
def loopback():
    """A loopback HTTP server speaking the providers' formats (tests/loopback.py)."""
    from tests.loopback import LoopbackServer

    with LoopbackServer() as srv:
        yield srv


@pytest.fixture()
def voyage(use_settings, loopback):
    """Settings for the test: the voyage embedder at the loopback server; returns an apply(**more)
    helper that sets more settings on top."""
    base = {
        "embed_provider": "voyage",
        "providers_voyage_base_url": loopback.url + "/v1",
        "providers_voyage_api_key": "test-key",
    }

    def apply(**more):
        use_settings(**base, **more)

    apply()
    return apply
