"""The runtime file under concurrent writers and readers (``shared/config/runtime.py``): a command started
while another terminal's ``ragline up`` is starting the services, or while two writers change it,
never sees a stack that is up as down."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from ragline.shared.config.settings import Settings
from ragline.shared.stack import services

WRITERS = 6
ROUNDS = 40


def _writer(home: str, index: int) -> None:
    settings = Settings(services_home=home)
    for round_no in range(ROUNDS):
        services._write_runtime(settings, **{f"key{index}": str(round_no)})


def test_concurrent_writers_keep_each_others_keys(tmp_path):
    """Each writer sets its own key over and over: a read-modify-write without the lock loses keys."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), i)) for i in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    data = Settings(services_home=str(tmp_path)).runtime()
    assert data == {f"key{i}": str(ROUNDS - 1) for i in range(WRITERS)}
    assert oct((tmp_path / "runtime.json").stat().st_mode & 0o777) == "0o600"


def test_a_reader_waits_for_a_stack_that_is_starting(tmp_path, monkeypatch):
    """`ragline up` writes the Postgres URL, then starts Redis (slow under load): a command reading
    the runtime file between the two gets the Redis URL once it is written, not "not up"."""
    settings = Settings(services_home=str(tmp_path), services_stack_change_wait_s=60)
    postgres_written, redis_may_start = threading.Event(), threading.Event()

    def start_postgres(s):
        services._write_runtime(s, database_url="postgresql://postgres@/ragline?host=/x")
        postgres_written.set()
        return "postgresql://postgres@/ragline?host=/x"

    def start_redis(s):
        redis_may_start.wait(30)
        time.sleep(0.5)  # the reader is waiting by now
        services._write_runtime(s, redis_url="redis://:pw@127.0.0.1:1/0")
        return "redis://:pw@127.0.0.1:1/0"

    monkeypatch.setattr(services, "start_postgres", start_postgres)
    monkeypatch.setattr(services, "start_redis", start_redis)
    up = threading.Thread(target=services.start_embedded, args=(settings,))
    up.start()
    try:
        assert postgres_written.wait(30)
        assert settings.runtime().get("redis_url") is None  # the moment the race was lost in
        redis_may_start.set()
        assert settings.effective_redis_url() == "redis://:pw@127.0.0.1:1/0"
    finally:
        redis_may_start.set()
        up.join(30)


def test_a_stack_that_is_not_starting_is_reported_at_once_with_where_it_looked(tmp_path):
    from ragline.shared.config import runtime
    from ragline.shared.config.settings import StackNotUp

    settings = Settings(services_home=str(tmp_path / "home"), services_stack_change_wait_s=3600)
    assert runtime.wait_while_changing(settings.home_dir, 3600) is False  # nobody holds the lock
    with pytest.raises(StackNotUp) as err:
        settings.effective_redis_url()
    assert err.value.runtime_file == (tmp_path / "home").resolve() / "runtime.json"
    assert str((tmp_path / "home").resolve()) in str(err.value) and "RAGLINE_SERVICES_HOME" in str(err.value)


def test_a_half_written_file_of_an_older_writer_reads_as_empty(tmp_path):
    (tmp_path / "runtime.json").write_text('{"redis_url": "redis://', encoding="utf-8")
    assert Settings(services_home=str(tmp_path)).runtime() == {}


def test_the_process_starting_the_stack_never_waits_for_itself(tmp_path):
    """`ragline up` reading the runtime file while it holds the stack lock gets its answer at once
    (a wait here would last the whole RAGLINE_SERVICES_STACK_CHANGE_WAIT_S, past the test's timeout)."""
    from ragline.shared.config import runtime
    from ragline.shared.config.settings import StackNotUp

    settings = Settings(services_home=str(tmp_path), services_stack_change_wait_s=3600)
    with runtime.changing(settings.home_dir):
        services._write_runtime(settings, database_url="postgresql://postgres@/ragline?host=/x")
        assert settings.effective_database_url() == "postgresql://postgres@/ragline?host=/x"
        with pytest.raises(StackNotUp):
            settings.effective_redis_url()
