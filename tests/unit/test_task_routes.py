"""One route table (``shared/sdk/names.py``, ``TASK_QUEUES``): every task a worker registers is in it,
by its exact name, routed to a queue of the pool whose module defines it; the Celery routers of the
workers' app and of the producer clients send every task where the table says."""

from __future__ import annotations

import importlib

import pytest

from ragline.shared.sdk import names


def registered() -> dict[str, str]:
    """Every ragline task the task modules register -> the module that defines it."""
    from ragline.shared.worker.celery_app import app

    for module in names.TASK_MODULES:
        importlib.import_module(module)
    return {name: task.__module__ for name, task in app.tasks.items() if name.startswith("ragline.")}


def test_every_registered_task_is_in_the_table_and_nothing_else():
    tasks = registered()
    assert set(tasks.values()) == set(names.TASK_MODULES)  # every module defines tasks, none other does
    assert set(tasks) == set(names.TASK_QUEUES) == set(names.ALL_TASKS)


def test_the_celery_routes_are_the_table_without_patterns():
    """No glob and no exception: one exact entry per task, so a task is routed by its own line."""
    assert names.TASK_ROUTES == {t: {"queue": q, "routing_key": q} for t, q in names.TASK_QUEUES.items()}
    assert not [pattern for pattern in names.TASK_ROUTES if "*" in pattern]


@pytest.mark.parametrize("task", names.ALL_TASKS)
def test_a_task_goes_to_a_queue_of_the_pool_that_defines_it(task):
    module = registered()[task]
    pool = names.TASK_MODULE_POOLS[module]
    assert names.TASK_QUEUES[task] in names.POOLS[pool], (task, module, pool)


def test_the_control_packages_tasks_go_to_the_control_pool():
    control = [t for t, m in registered().items() if m.startswith("ragline.ingest.control.")]
    assert names.TASK_INGEST_EVENT in control  # the name says ingest; the task is the control pool's
    assert {names.TASK_QUEUES[t] for t in control} <= set(names.POOLS["control"])
    assert not {names.TASK_QUEUES[t] for t in control} & set(names.POOLS["ingest"])


def _routed(app, task: str) -> str:
    return app.amqp.router.route({}, task)["queue"].name


@pytest.mark.parametrize("task", names.ALL_TASKS)
def test_the_workers_app_routes_by_the_table(task):
    from ragline.shared.worker.celery_app import app

    assert _routed(app, task) == names.TASK_QUEUES[task]


def test_the_producer_clients_route_by_the_table():
    from types import SimpleNamespace

    from ragline.shared.sdk.client import PRODUCER_QUEUES, client_app

    app = client_app(
        "redis://127.0.0.1:1/0", None, SimpleNamespace(ops=SimpleNamespace(signing_key_file=None))
    )
    sent = [t for t, q in names.TASK_QUEUES.items() if q in PRODUCER_QUEUES]
    assert set(sent) >= set(names.PRODUCER_ROLES["chat"] | names.PRODUCER_ROLES["relay"])
    for task in sent:
        assert _routed(app, task) == names.TASK_QUEUES[task], task
