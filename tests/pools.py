"""Real prefork worker pools for tests, started exactly like ``ragline up`` does (shared/stack/processes.py).

The argv and environment come from ``processes.specs``; only the queue is swapped for a queue unique
to the test, so the session's in-process ``celery_worker`` (which consumes the standard queues)
can never take the task the test means for this pool.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from ragline.shared.config.settings import Settings
from ragline.shared.stack import processes


@dataclass
class Pool:
    name: str
    queue: str
    proc: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait(10)


def start_pool(
    settings: Settings,
    pool: str,
    *,
    concurrency: int = 1,
    env: dict[str, str] | None = None,
    queue: str | None = None,
    spec_name: str | None = None,
    extra_args: list[str] | None = None,
) -> Pool:
    """Start ``worker-<pool>`` (or another spec, e.g. ``metrics-query``) as ``ragline up`` would."""
    name = spec_name or f"worker-{pool}"
    if name.startswith("worker-"):  # the command line `ragline worker POOL` runs
        spec = processes.worker_command(settings, pool)
    else:
        spec = next(s for s in processes.specs(settings) if s.name == name)
    argv = list(spec.argv)
    queue = queue or f"test-{pool}-{uuid.uuid4().hex[:8]}"
    if name.startswith("worker-"):
        argv[argv.index("-Q") + 1] = queue
        if "-c" in argv:  # a solo process runs one task at a time whatever the concurrency
            argv[argv.index("-c") + 1] = str(concurrency)
        argv[argv.index("-n") + 1] = f"{queue}@%h"
        argv[argv.index("--loglevel") + 1] = "INFO"
    argv += extra_args or []
    log = settings.home_dir / "logs" / f"{queue}-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**processes.child_env(settings), **spec.env, **(env or {})}
    if "PROMETHEUS_MULTIPROC_DIR" in spec.env:
        Path(spec.env["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    return Pool(name, queue, proc, log)


def wait_ready(app, pool: Pool, timeout: float = 90.0) -> None:
    """Until the worker answers a ping (its prefork children are up by then)."""
    deadline = time.monotonic() + timeout
    dest = None
    while time.monotonic() < deadline:
        if pool.proc.poll() is not None:
            raise AssertionError(f"{pool.name} exited {pool.proc.returncode}:\n{pool.log_text()[-3000:]}")
        try:
            replies = app.control.ping(timeout=1.0) or []
        except (
            Exception
        ):  # a pooled broker connection that died with a Redis restart: the next try reconnects
            replies = []
        names = {n for r in replies for n in r}
        dest = next((n for n in names if n.startswith(pool.queue + "@")), None)
        if dest:
            return
        time.sleep(0.3)
    raise AssertionError(f"{pool.name} did not answer a ping in {timeout}s:\n{pool.log_text()[-3000:]}")


def wait_port(host: str, port: int, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {host}:{port}")


def listen_addresses(pid: int) -> set[str]:
    """IP addresses the process group's processes listen on."""
    out = set()
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for p in procs:
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.add(c.laddr.ip)
        except psutil.NoSuchProcess:
            continue
    return out


def wait_log(pool: Pool, text: str, timeout: float = 90.0) -> None:
    """Until ``text`` appears in the pool's log (for workers that refuse unsigned control messages)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in pool.log_text():
            return
        if pool.proc.poll() is not None:
            raise AssertionError(f"{pool.name} exited {pool.proc.returncode}:\n{pool.log_text()[-3000:]}")
        time.sleep(0.3)
    raise AssertionError(
        f"{text!r} not in the log of {pool.name} after {timeout}s:\n{pool.log_text()[-3000:]}"
    )


def free_port_run(n: int) -> int:
    """A base port with ``n`` consecutive free ports: each pool's metrics endpoint is the base plus
    the pool's index, so a base from ``free_port()`` alone may name a neighbour another process holds."""
    import socket

    for _ in range(50):
        from ragline.shared.stack.services import free_port

        base = free_port()
        try:
            socks = []
            for i in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")
