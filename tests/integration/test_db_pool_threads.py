"""A threads worker's pool sizes its database pools for its tasks: every task thread may hold two
owner connections at once (an ingest batch's transaction while it embeds, and the job's
bookkeeping), and the process's own threads (a caller polling a job) still get one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from ragline.shared.config.settings import get_settings
from ragline.shared.worker import db
from ragline.shared.worker.celery_app import _size_pools_for_threads


@pytest.fixture()
def small_pools(stack):
    """Pools as a process starts them: no worker has sized them yet."""
    saved = db._task_threads
    db.reset()
    db._task_threads = 1
    yield
    db.reset()
    db._task_threads = saved


@contextmanager
def checkout(timeout: float) -> Iterator[db.DictConnection]:
    pool = db.get_pool()
    conn = pool.getconn(timeout=timeout)
    try:
        yield conn
    finally:
        conn.rollback()
        pool.putconn(conn)


def hold_two_while_others_do(threads: int, timeout: float) -> list[int]:
    """``threads`` tasks that each hold a connection, then check out a second one while every other
    task holds its first (a barrier), and a poller's own checkout meanwhile: the backend pids held."""
    first = threading.Barrier(threads + 1)
    both = threading.Barrier(threads)  # every task holds its two connections at the same time

    def pid(conn: db.DictConnection) -> int:
        return db.one(conn.execute("SELECT pg_backend_pid() AS p"))["p"]

    def task() -> list[int]:
        with checkout(timeout) as outer:
            first.wait(timeout=timeout)
            with checkout(timeout) as inner:
                both.wait(timeout=timeout)
                return [pid(outer), pid(inner)]

    with ThreadPoolExecutor(threads) as ex:
        futures = [ex.submit(task) for _ in range(threads)]
        first.wait(timeout=timeout)
        with checkout(timeout) as conn:  # the poller, while every task holds one
            conn.execute("SELECT 1")
        return [p for f in futures for p in f.result(timeout=timeout * 2)]


def test_the_threads_worker_sized_the_pools_for_its_threads(celery_worker):
    """The session's in-process worker (a threads pool of 4) sized them through ``worker_init``."""
    assert db._task_threads == 4
    assert db.get_pool().max_size >= 10


@pytest.mark.parametrize(("pool_kind", "threads"), [("threads", 4), ("solo", 1), ("prefork", 1)])
def test_only_a_threads_pool_runs_several_tasks_in_the_process(small_pools, pool_kind, threads):
    _size_pools_for_threads(sender=SimpleNamespace(pool_cls=pool_kind, concurrency=4))
    assert db._task_threads == threads
    assert db.pool_max_size(get_settings()) >= 2 * threads + 2


def test_four_task_threads_holding_two_connections_each_do_not_starve(small_pools):
    db.set_task_threads(4)
    held = hold_two_while_others_do(4, timeout=10)
    assert len(set(held)) == 8  # every task had two connections of its own at once


def test_an_open_pool_grows_when_the_worker_sizes_it(small_pools):
    with db.connection() as conn:  # opened at the one-task size
        conn.execute("SELECT 1")
    assert db.get_pool().max_size < 10
    db.set_task_threads(4)
    assert db.get_pool().max_size >= 10
    assert len(set(hold_two_while_others_do(4, timeout=10))) == 8


def test_at_the_one_task_size_the_same_load_times_out(small_pools):
    """The check above can fail: a pool sized for one task starves four."""
    from psycopg_pool import PoolTimeout

    with pytest.raises((PoolTimeout, threading.BrokenBarrierError)):
        hold_two_while_others_do(4, timeout=3)
