"""A small per-process LRU for query embeddings.

Keys always hold the tenant and a hash of the caller's group set: a cache shared
across permission sets is how RAG systems leak answers between users, so even values that do
not depend on permissions (an embedding) are never looked up across them.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable


def groups_hash(groups: list[str]) -> str:
    return hashlib.sha256("\x1f".join(sorted(set(groups))).encode()).hexdigest()[:32]


def scoped_key(tenant: str, groups: list[str], *parts: Hashable) -> tuple:
    return (tenant, groups_hash(groups), *parts)


class LRU:
    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.hits = 0
        self.misses = 0

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # forked: start empty
            self._data.clear()
            self._pid = os.getpid()

    def get(self, key: tuple) -> object | None:
        with self._lock:
            self._check_pid()
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return None

    def put(self, key: tuple, value: object) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._check_pid()
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
