"""Per-tenant admission on the query path: a flooding tenant's excess questions fail fast.

The query queue is one FIFO shared by every tenant, so a tenant sending more questions than the
pool answers would otherwise fill it and every other tenant's question would wait behind its
backlog. Each query task therefore asks first, before any other work, whether its tenant is
within its share, in Redis so that every query worker of the cluster counts the same questions:

* a rate with a burst (``RAGLINE_ADMISSION_TENANT_RATE`` questions per second, ``..._BURST``): the
  ``limits`` package's moving window, of whole seconds, admitting at most ``burst`` questions in
  any window of ``burst / rate`` seconds (:func:`rate_window`);
* questions in flight (``RAGLINE_ADMISSION_TENANT_MAX_IN_FLIGHT``): leases that expire, so a killed
  worker cannot hold a tenant's slot forever.

A question over either is answered at once with ``{"ok": false, "error": "rate limited"}`` and
at most how long to wait; the worker spends one or two Redis round trips on it instead of an
answer. This holds as long as the pool turns a tenant's excess away faster than the tenant sends
it (bench f measures both rates); a flood beyond that still fills the queue, and only admission
before the queue (at the chat backend) helps. When Redis does not answer, the question is
admitted (the broker is the same Redis, so this is rare and short) and the failure logged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from ragline.query.deadline import QueryLimitError
from ragline.shared.config.settings import Settings
from ragline.shared.worker import providers

log = logging.getLogger(__name__)

NAMESPACE = "query-tenant"


class RateLimited(QueryLimitError):
    """The tenant is over its question rate or its questions in flight."""

    error = "rate limited"


def rate_window(rate: float, burst: int) -> tuple[int, int]:
    """``(window_s, questions)`` of the moving window for ``rate`` questions per second and a
    ``burst`` (0: one second's worth): at most ``questions`` in any ``window_s`` seconds, so the
    sustained rate is ``rate`` and up to ``burst`` questions pass at once. ``limits`` counts whole
    seconds, so the window is rounded up and the burst with it. ``(0, 0)`` when ``rate`` is 0."""
    if rate <= 0:
        return 0, 0
    burst = burst or max(1, math.ceil(rate))
    window_s = max(1, math.ceil(burst / rate))
    return window_s, max(burst, math.ceil(rate * window_s))


class TenantAdmission:
    """The limits of one settings object; one per process (:func:`get_admission`)."""

    def __init__(self, settings: Settings) -> None:
        self.window_s, self.questions = rate_window(
            settings.admission.tenant_rate, settings.admission.tenant_burst
        )
        self.max_in_flight = settings.admission.tenant_max_in_flight
        self.enabled = bool(self.questions or self.max_in_flight)
        if not self.enabled:
            return
        # only with admission on: every pool imports the query tasks, limits is slow to import, and
        # the control pool loads no provider module
        from limits import RateLimitItemPerSecond
        from limits.storage import RedisStorage
        from limits.strategies import MovingWindowRateLimiter

        from ragline.shared.worker.providers.ratelimit import InFlightLimiter, redis_client

        self.in_flight_limiter = InFlightLimiter
        url = settings.effective_redis_url()
        self.item = RateLimitItemPerSecond(self.questions, self.window_s) if self.questions else None
        self.limiter = MovingWindowRateLimiter(RedisStorage(url, key_prefix="ragline-limits"))
        self.client = redis_client(url)
        # a lease outlives the question's deadline; without one, the longest a question is expected to take
        self.lease_s = (settings.deadlines.question_s or 300.0) + 30.0

    def _over_rate(self, tenant: str) -> bool:
        """Whether this question is over the tenant's rate (one Redis round trip: a refusal must
        cost the worker as little as possible, so the wait it reports is the window's length, an
        upper bound, not the exact time the oldest question leaves it)."""
        return self.item is not None and not self.limiter.hit(self.item, NAMESPACE, tenant)

    @contextmanager
    def admit(self, tenant: str) -> Iterator[None]:
        """Run the question inside, or raise :class:`RateLimited` before it starts."""
        if not self.enabled:
            yield
            return
        slots = token = None
        try:
            if self._over_rate(tenant):
                raise RateLimited(
                    f"tenant over {self.questions} questions per {self.window_s} s",
                    tenant=tenant,
                    retry_after_s=float(self.window_s),
                )
            if self.max_in_flight:
                slots = self.in_flight_limiter(
                    self.client, f"{NAMESPACE}:{tenant}", self.max_in_flight, self.lease_s
                )
                token = slots.try_acquire()
                if token is None:
                    raise RateLimited(
                        f"tenant has {self.max_in_flight} questions in flight",
                        tenant=tenant,
                        retry_after_s=0.1,
                    )
        except RateLimited as exc:
            log.info("question of tenant %s refused: %s", tenant, exc)
            raise
        except redis.RedisError as exc:  # admit rather than fail every question while Redis is away
            log.warning("tenant admission unavailable, question admitted: %s", type(exc).__name__)
            slots = token = None
        try:
            yield
        finally:
            if token is not None:
                try:
                    slots.release(token)  # type: ignore[union-attr]
                except redis.RedisError:  # the lease expires on its own
                    log.warning("could not release a question slot of tenant %s", tenant)


def get_admission() -> TenantAdmission:
    """This process's admission for the current settings (rebuilt when the settings change)."""
    return providers.cached("query_admission", TenantAdmission)
