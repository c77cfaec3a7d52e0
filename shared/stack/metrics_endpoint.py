"""A pool's metrics endpoint as ``ragline up`` runs it: the worker layer's endpoint
(``shared/worker/metrics_server.py``) plus the supervisor's restarts of the pool's processes, which
only the embedded stack knows. A container runs the worker layer's endpoint alone; its orchestrator
counts restarts.

Run: ``python -m ragline.shared.stack.metrics_endpoint <pool>``.
"""

from __future__ import annotations

from ragline.shared.config.settings import get_settings
from ragline.shared.stack.supervisor import restarts_collector
from ragline.shared.worker import metrics_server


def collectors(pool: str) -> list:
    return [restarts_collector(get_settings(), pool)]


def main(argv: list[str] | None = None) -> None:
    metrics_server.main(argv, extra=collectors)


if __name__ == "__main__":
    main()
