"""Cluster-wide admission for provider calls, shared by every worker process through Redis.

* :class:`InFlightLimiter` - at most N requests in flight across all processes (a Redis sorted
  set of leases; a lease expires, so a killed worker cannot hold a slot forever).
* :class:`RateLimits` - requests-per-minute and tokens-per-minute with the ``limits`` package
  (sliding window counters in Redis, so ``cost`` = tokens is cheap).

A per-process semaphore would let every worker process send N batches: the provider's quota
is per account, so the limit has to live where all processes see it.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import redis
from limits import RateLimitItemPerMinute
from limits.storage import RedisStorage
from limits.strategies import SlidingWindowCounterRateLimiter

from ragline.shared.worker.providers.batching import estimate_tokens

_clients: dict[tuple[int, str], redis.Redis] = {}
_clients_lock = threading.Lock()


def redis_client(url: str) -> redis.Redis:
    """One client per (process, url): connections are never shared across a fork."""
    key = (os.getpid(), url)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        return _clients[key]


class LimiterTimeout(TimeoutError):
    """No slot or rate budget became free in time."""


# KEYS[1] = zset of leases; ARGV = limit, lease_ms, token. Server time, so hosts need no clock sync.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
  return 1
end
return 0
"""


class InFlightLimiter:
    def __init__(self, client: redis.Redis, name: str, limit: int, lease_s: float) -> None:
        self.client = client
        self.key = f"ragline:inflight:{name}"
        self.limit = limit
        self.lease_ms = int(lease_s * 1000)
        self.wake_key = f"{self.key}:freed"
        self.poll_s = 0.5  # fallback re-check when no wake-up comes (between poll_s and 2 x poll_s)
        self._acquire = client.register_script(_ACQUIRE)

    def try_acquire(self) -> str | None:
        token = uuid.uuid4().hex
        ok = self._acquire(keys=[self.key], args=[self.limit, self.lease_ms, token])
        return token if ok else None

    def release(self, token: str) -> None:
        """Free the slot and wake one waiter (a list entry per release, at most ``limit`` kept)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self.key, token)
        pipe.lpush(self.wake_key, 1)
        pipe.ltrim(self.wake_key, 0, self.limit - 1)
        pipe.pexpire(self.wake_key, self.lease_ms)
        pipe.execute()

    @contextmanager
    def slot(self, wait_s: float) -> Iterator[None]:
        """Waiters block on the wake list (a freed slot is taken within milliseconds, where polling
        left it idle up to the poll interval); the BLPOP timeout bounds the wait when a slot frees by
        lease expiry instead (a killed worker), which pushes no wake-up."""
        deadline = time.monotonic() + wait_s
        while (token := self.try_acquire()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LimiterTimeout(f"no free slot for {self.key} within {wait_s:g}s (limit {self.limit})")
            self.client.blpop([self.wake_key], timeout=min(left, self.poll_s * (1 + random.random())))
        try:
            yield
        finally:
            self.release(token)

    def in_flight(self) -> int:
        now_ms = int(time.time() * 1000)
        return int(cast(int, self.client.zcount(self.key, now_ms, "+inf")))  # a sync client: an int


class RateLimits:
    """RPM and TPM budgets for one provider account, shared through Redis."""

    def __init__(self, url: str, name: str, rpm: int, tpm: int) -> None:
        self.name = name
        self._limiter = SlidingWindowCounterRateLimiter(RedisStorage(url, key_prefix="ragline-limits"))
        self._rpm = RateLimitItemPerMinute(rpm) if rpm > 0 else None
        self._tpm = RateLimitItemPerMinute(tpm) if tpm > 0 else None

    def wait(self, tokens: int, wait_s: float) -> None:
        """Block until one request of ``tokens`` fits both budgets (or raise after ``wait_s``)."""
        deadline = time.monotonic() + wait_s
        for item, cost, kind in ((self._rpm, 1, "rpm"), (self._tpm, tokens, "tpm")):
            if item is None:
                continue
            cost = min(cost, item.amount)  # a single oversized request may still pass alone
            while not self._limiter.hit(item, self.name, kind, cost=cost):
                stats = self._limiter.get_window_stats(item, self.name, kind)
                pause = max(0.05, min(stats.reset_time - time.time(), 5.0))
                if time.monotonic() + pause > deadline:
                    raise LimiterTimeout(f"{self.name} {kind} budget exhausted for {wait_s:g}s")
                time.sleep(pause * (0.5 + random.random() / 2))


class EmbedAdmission:
    """RPM/TPM budget, then an in-flight slot, for one embedding request of a provider.

    The in-flight cap is for document batches; a query (one short text) only takes RPM/TPM budget,
    so questions never queue behind ingestion batches for a slot.
    """

    def __init__(self, settings, provider: str) -> None:
        url = settings.effective_redis_url()
        name = f"embed:{provider}"
        self.wait_s = settings.embed.admission_wait_s
        self.slots = InFlightLimiter(
            redis_client(url), name, settings.embed.max_in_flight, lease_s=settings.embed.timeout_s + 10
        )
        self.rates = RateLimits(url, name, settings.embed.rpm, settings.embed.tpm)

    @contextmanager
    def admit(self, texts: list[str], batch: bool = True) -> Iterator[None]:
        self.rates.wait(sum(estimate_tokens(t) for t in texts), self.wait_s)
        if not batch:
            yield
            return
        with self.slots.slot(self.wait_s):
            yield
