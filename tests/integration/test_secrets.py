"""No default secrets on the embedded stack: Redis requires its generated password (kept off every
command line), the metrics endpoints answer only to theirs, ``ragline secrets show`` prints them,
``ragline status`` and ``ragline config`` never do, and an empty or well-known password is refused
before anything binds beyond loopback."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys

import httpx
import psutil
import pytest
from typer.testing import CliRunner

from ragline.shared.sdk.names import POOLS
from ragline.shared.worker import credentials
from tests.pools import free_port_run, listen_addresses, start_pool, wait_port

pytestmark = pytest.mark.slow


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _raw_redis(port: int, command: bytes) -> bytes:
    """One inline command's first reply line (redis-py would retry an authentication error)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(command + b"\r\n")
        return sock.makefile("rb").readline().rstrip(b"\r\n")


def test_embedded_redis_requires_its_generated_password(stack):
    import redis

    url = stack.effective_redis_url()
    password = credentials.password(stack, "redis")
    assert password and password not in credentials.WELL_KNOWN
    port = int(stack.runtime()["redis_port"])
    assert _raw_redis(port, b"PING").startswith(b"-NOAUTH")
    assert _raw_redis(port, b"AUTH ragline-admin").startswith(b"-WRONGPASS")
    assert _raw_redis(port, b"AUTH default " + password.encode()).startswith(b"-WRONGPASS")  # default: off
    assert _raw_redis(port, b"AUTH operator " + password.encode()) == b"+OK"
    assert redis.Redis.from_url(url, socket_timeout=2).ping()
    # the password is in private files only, never on the server's command line (ps shows it to all)
    server = psutil.Process(int((stack.home_dir / "redis" / "redis.pid").read_text()))
    assert password not in " ".join(server.cmdline())
    assert _mode(stack.home_dir) == credentials.home_mode(stack)  # 0700; 0711 as root (pgserver's user)
    assert _mode(stack.runtime_file) == 0o600
    assert _mode(stack.home_dir / "redis" / "redis.conf") == 0o600
    assert _mode(stack.home_dir / "secrets" / "redis") == 0o600


@pytest.mark.parametrize(
    "command",
    [
        "CONFIG SET dir /tmp",
        "CONFIG GET dir",
        "MODULE LOAD /tmp/x.so",
        "DEBUG SLEEP 0",
        "REPLICAOF 127.0.0.1 1",
        "SLAVEOF 127.0.0.1 1",
        "MIGRATE 127.0.0.1 1 key 0 1000",
    ],
)
def test_the_redis_password_cannot_reconfigure_the_server(stack, command):
    """Every producer holds the Redis password: it must not let them choose where Redis writes files
    (``CONFIG SET dir`` + ``SAVE`` writes a file anywhere the stack's user can), load a module, or copy
    the queues to another server."""
    import redis

    from ragline.shared.sdk.redis_acl import ROLES

    for role in ROLES:  # every component's user: the commands are gone, not only refused
        url = stack.redis_role_url(stack.runtime()["redis_url"], role)
        client = redis.Redis.from_url(url, socket_timeout=5)
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command(*command.split())
        assert client.ping()


def test_metrics_endpoint_answers_to_the_generated_password_only(stack, monkeypatch):
    from ragline.shared.config.settings import get_settings, reset_settings
    from ragline.shared.worker.metrics_server import metrics_dir, metrics_port, reset_dir

    monkeypatch.setenv("RAGLINE_OPS_METRICS_PORT", str(free_port_run(len(POOLS))))
    monkeypatch.delenv("RAGLINE_OPS_METRICS_PASSWORD", raising=False)
    reset_settings()
    s = get_settings()
    reset_dir(metrics_dir(s, "control"))
    server = start_pool(s, "control", spec_name="metrics-control")
    try:
        port = metrics_port(s, "control")
        wait_port("127.0.0.1", port)
        url = f"http://127.0.0.1:{port}/metrics"
        generated = credentials.password(s, "metrics")
        assert httpx.get(url, timeout=5).status_code == 401
        assert (
            httpx.get(url, auth=("metrics", "ragline-metrics"), timeout=5).status_code == 401
        )  # old default
        assert httpx.get(url, auth=("metrics", generated), timeout=5).status_code == 200
        assert listen_addresses(server.pid) == {"127.0.0.1"}
        assert generated not in server.log_text()

        from ragline.cli import app as cli

        shown = CliRunner().invoke(cli, ["secrets", "show", "metrics"])
        assert shown.exit_code == 0, shown.output
        assert shown.stdout.strip() == generated
        table = CliRunner().invoke(cli, ["secrets", "show", "--json"])
        rows = {r["name"]: r for r in json.loads(table.stdout)}
        assert rows["metrics"] == {
            "name": "metrics",
            "user": "metrics",
            "password": generated,
            "source": str(s.home_dir / "secrets" / "metrics"),
        }
        assert rows["redis"]["password"] == credentials.password(s, "redis")
    finally:
        server.stop()
        monkeypatch.undo()
        reset_settings()


def test_status_and_config_never_print_a_password(stack, monkeypatch):
    from ragline.cli import app as cli
    from ragline.shared.config.settings import reset_settings

    secrets = [credentials.password(stack, n) for n in credentials.SECRET_SETTINGS]
    status = CliRunner().invoke(cli, ["status", "--json"])
    assert status.exit_code in (0, 1), status.output  # 1: the stack's processes are not all up here
    assert json.loads(status.stdout)["redis"]["embedded"] is True
    assert not [s for s in secrets if s in status.output]

    monkeypatch.setenv("REDIS_URL", "redis://:redis-pass-42@cache.internal:6379/0")
    monkeypatch.setenv("DATABASE_URL", "postgresql://rag:pg-pass-42@db.internal:5432/ragline")
    monkeypatch.setenv("RAGLINE_FLOWER_PASSWORD", "flower-pass-42")
    reset_settings()
    try:
        shown = CliRunner().invoke(cli, ["config"])
        assert shown.exit_code == 0, shown.output
        assert "pass-42" not in shown.output
        config = json.loads(shown.stdout)
        assert config["services"]["redis_url"] == "redis://:***@cache.internal:6379/0"
        assert config["services"]["database_url"] == "postgresql://rag:***@db.internal:5432/ragline"
        assert config["flower"]["password"] == "***"
    finally:
        monkeypatch.undo()
        reset_settings()


@pytest.mark.parametrize("password", ["ragline-metrics", ""])
def test_metrics_server_refuses_a_weak_password_beyond_loopback(stack, password):
    from ragline.shared.stack.processes import child_env
    from ragline.shared.stack.services import free_port
    from ragline.shared.worker.metrics_server import metrics_dir

    port = free_port()
    metrics_dir(stack, "query").mkdir(parents=True, exist_ok=True)
    env = {
        **child_env(stack),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir(stack, "query")),
        "RAGLINE_OPS_METRICS_HOST": "0.0.0.0",
        "RAGLINE_OPS_METRICS_PORT": str(port - 1),  # the query pool's endpoint is base + 1
        "RAGLINE_OPS_METRICS_PASSWORD": password,
    }
    out = subprocess.run(
        [sys.executable, "-m", "ragline.shared.worker.metrics_server", "query"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out
    assert "refusing to serve the query metrics endpoint on 0.0.0.0" in out.stderr
    assert "empty" in out.stderr if not password else "well-known" in out.stderr


def test_flower_with_a_default_password_beyond_loopback_is_never_started(stack, monkeypatch):
    from ragline.shared.config.settings import get_settings, reset_settings
    from ragline.shared.stack import processes

    monkeypatch.setenv("RAGLINE_FLOWER_HOST", "0.0.0.0")
    monkeypatch.setenv("RAGLINE_FLOWER_PASSWORD", "ragline-admin")
    reset_settings()
    try:
        s = get_settings()
        with pytest.raises(credentials.InsecureSecretError, match="refusing to serve Flower on 0.0.0.0"):
            processes.start_all(s, only={"flower"})
        assert processes.running(s)["flower"] is None
    finally:
        monkeypatch.undo()
        reset_settings()
