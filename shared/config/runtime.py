"""``<home>/runtime.json``: what ``ragline up`` wrote about the embedded services it started.

Every process of the stack and every command reads it for the broker and database URLs, while
``ragline up`` and ``ragline down`` of another terminal may be changing it. Three rules keep a
reader from seeing a stack that is not there:

* a writer replaces the file atomically (``credentials.write_private``: a private temporary file
  renamed over it), so a reader sees the old content or the new, never half of it;
* writers update it under ``runtime.lock`` (``flock``), so two writers changing different keys
  (``ragline up`` of one terminal, a restart of another) never lose each other's keys;
* ``ragline up`` / ``down`` hold ``stack.lock`` while they start or stop the services, and a reader
  that finds no URL while it is held waits for them (:func:`wait_while_changing`) instead of
  reporting "not up" about a stack that is starting.

Standard library only: the producer client reads it too.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

RUNTIME_FILE = "runtime.json"
RUNTIME_LOCK = "runtime.lock"
STACK_LOCK = "stack.lock"


def read(path: Path) -> dict:
    """The runtime file's content; {} when there is none (or it is not JSON: an older writer's leftover)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


@contextmanager
def _flock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path`` (created 0600); yields whether it was taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def update(home: Path, write: Callable[[Path, str], None], **updates: str | None) -> dict:
    """Set (or, with None, drop) keys of the runtime file, keeping every other key; the new content.
    ``write(path, text)`` replaces the file atomically and privately (``credentials.write_private``)."""
    with _flock(home / RUNTIME_LOCK):
        data = read(home / RUNTIME_FILE)
        for key, value in updates.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        write(home / RUNTIME_FILE, json.dumps(data, indent=2))
    return data


#: the homes whose stack lock this thread holds: ``ragline up`` never waits for itself
_local = threading.local()


def _held() -> set[Path]:
    if not hasattr(_local, "homes"):
        _local.homes = set()
    return _local.homes


@contextmanager
def changing(home: Path) -> Iterator[None]:
    """Held by ``ragline up`` / ``ragline down`` while they start or stop the embedded services."""
    with _flock(home / STACK_LOCK):
        _held().add(home)
        try:
            yield
        finally:
            _held().discard(home)


def wait_while_changing(home: Path, timeout: float) -> bool:
    """Wait (at most ``timeout`` seconds) while another process starts or stops the stack; whether
    one was. Without a home there is nothing to wait for."""
    if home in _held() or not (home / STACK_LOCK).exists():
        return False
    deadline = time.monotonic() + timeout
    waited = False
    while True:
        with _flock(home / STACK_LOCK, blocking=False) as free:
            if free:
                return waited
        waited = True
        if time.monotonic() >= deadline:
            return waited
        time.sleep(0.1)
