"""The supervisor ``ragline up`` leaves running: it starts every process of the stack
(``processes.specs``) as its own child and restarts one that dies, with backoff.

A death is logged (``logs/supervisor.log``: the process, its pid, how it ended, how long it ran,
when it comes back) and recorded in ``run/restarts.json`` (0600): per process the restarts, the
last restart's time and the last exit's reason, which ``ragline status`` shows and each pool's
metrics endpoint exports as ``rag_process_restarts_total``. ``ragline down`` stops the supervisor
first, so nothing it stops comes back; a killed supervisor leaves the stack running as it is (and
``ragline up`` starts a new one, which adopts the running processes).

Run: ``python -m ragline.shared.stack.supervisor`` (``ragline up`` does).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.stack import processes
from ragline.shared.worker import credentials

log = logging.getLogger("ragline.supervisor")

#: the first restart's delay and the cap: each death within STABLE_AFTER_S of its start doubles it
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 60.0
#: a process that ran this long was healthy: its next death restarts after the first delay again
STABLE_AFTER_S = 60.0
POLL_S = 0.5


def state_path(settings: Settings) -> Path:
    return settings.home_dir / "run" / "restarts.json"


def read_restarts(settings: Settings) -> dict[str, dict]:
    """Per process: ``restarts``, ``last_restart`` (ISO 8601 UTC), ``last_exit`` (the reason),
    ``exited_at`` and ``down`` (dead, waiting for its restart); {} before any death."""
    try:
        return json.loads(state_path(settings).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}


def restarts_collector(settings: Settings, pool: str):
    """The restarts of ``pool``'s processes (``processes.pool_of``) for its metrics endpoint."""
    from ragline.shared.worker.metrics import ProcessRestarts  # start-up: prometheus_client

    names = [processes.SUPERVISOR, *(s.name for s in processes.specs(settings))]
    path = state_path(settings)
    return ProcessRestarts(
        lambda: read_restarts(settings) if path.exists() else None,
        [n for n in names if processes.pool_of(n) == pool],
    )


def backoff_s(consecutive: int) -> float:
    """The delay before the restart after the ``consecutive``-th quick death in a row (1, 2, 4 ...)."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, consecutive - 1))


def exit_reason(returncode: int | None) -> str:
    if returncode is None:
        return "exit status unknown (it was not started by this supervisor)"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class Child:
    """One supervised process: a child of ours (``proc``) or one adopted by pid."""

    pid: int
    started: float
    proc: subprocess.Popen | None = None
    consecutive: int = 0  # quick deaths in a row
    due: float | None = None  # dead: when it restarts

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None  # and reaps it once it ended
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.children: dict[str, Child] = {}
        self.state: dict[str, dict] = {}
        self.stopping = False

    def _save(self) -> None:
        credentials.write_private(state_path(self.settings), json.dumps(self.state, indent=1))

    def _start(self, spec: processes.ProcSpec) -> Child:
        old = self.children.get(spec.name)
        if old is not None:  # what is left of the dead one's group (prefork children) goes with it
            try:
                os.killpg(old.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc = processes.spawn(self.settings, spec)
        child = Child(proc.pid, time.monotonic(), proc, old.consecutive if old else 0)
        self.children[spec.name] = child
        return child

    def tick(self) -> None:
        """One look at every process: start the missing, note the dead, restart the due."""
        now = time.monotonic()
        for spec in processes.specs(self.settings):
            child = self.children.get(spec.name)
            if child is None:
                pid = processes.pid_of(self.settings, spec.name)
                if pid is not None:  # running already (a supervisor before this one started it)
                    self.children[spec.name] = Child(pid, now)
                else:
                    self._start(spec)
                continue
            if child.due is None:
                if child.alive():
                    continue
                self._died(spec.name, child, child.proc.returncode if child.proc else None, now)
            if child.due is not None and now >= child.due and not self.stopping:
                new = self._start(spec)
                entry = self.state[spec.name]
                entry.update(restarts=entry["restarts"] + 1, last_restart=_now_iso(), down=False)
                self._save()
                log.warning("restarted %s as pid %d (restart %d)", spec.name, new.pid, entry["restarts"])

    def _died(self, name: str, child: Child, code: int | None, now: float) -> None:
        ran = now - child.started
        child.consecutive = child.consecutive + 1 if ran < STABLE_AFTER_S else 1
        delay = backoff_s(child.consecutive)
        child.due = now + delay
        reason = exit_reason(code)
        entry = self.state.setdefault(name, {"restarts": 0, "last_restart": None})
        entry.update(last_exit=reason, exited_at=_now_iso(), down=True)
        self._save()
        log.warning("%s (pid %d) %s after %.0f s; restarting in %.0f s", name, child.pid, reason, ran, delay)

    def run(self) -> None:
        def stop(signum, frame):  # noqa: ARG001
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.state = {}  # a new supervisor, a new count
        self._save()
        log.info("supervising %s", ", ".join(s.name for s in processes.specs(self.settings)))
        while not self.stopping:
            self.tick()
            time.sleep(POLL_S)
        log.info("stopped; the processes it supervised keep running until `ragline down` stops them")


def ensure_running(settings: Settings) -> int:
    """Start the supervisor unless it runs (it then starts what does not run); its pid."""
    pid = processes.pid_of(settings, processes.SUPERVISOR)
    if pid is not None:
        return pid
    processes.prepare_home(settings)
    processes.reset_idle_metrics(settings, {s.name for s in processes.specs(settings)})
    return processes.spawn(settings, processes.supervisor_spec(settings)).pid


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings()
    processes.prepare_home(settings)
    Supervisor(settings).run()


if __name__ == "__main__":
    main()
