"""`ragline up` / `down` as a user runs them: real prefork pools, beat and Flower in the background,
on a fresh home with no password set."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from ragline.ingest.enqueue import default_source_name
from ragline.shared.stack.services import free_port
from tests.pools import free_port_run

RAGLINE = [sys.executable, "-m", "ragline.cli"]


def _ours(home: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(home) in cmd or env.get("RAGLINE_SERVICES_HOME") == str(home):
            out.append(p)
    return out


def _generated_secrets_are_private_used_and_never_printed(home: Path, env: dict, up_output: str, run) -> None:
    """A fresh home and no password set (what `make run` does): `ragline up` generated them, 0600 in
    a 0700 home, Flower asks for its own, and only `ragline secrets show` prints one."""
    import httpx

    from ragline.shared.config.settings import Settings
    from ragline.shared.worker import credentials
    from tests.pools import wait_port

    folder = home / "secrets"
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o600}
    secrets = {n: (folder / n).read_text().strip() for n in credentials.SECRET_SETTINGS}
    mode = credentials.home_mode(
        Settings(services_home=home)
    )  # 0700; 0711 as root (Postgres runs as pgserver)
    assert stat.S_IMODE(home.stat().st_mode) == mode
    assert "password: `ragline secrets show flower`" in up_output
    shown = run("secrets", "show", "flower")
    assert shown.returncode == 0 and shown.stdout.strip() == secrets["flower"]
    port = int(env["RAGLINE_FLOWER_PORT"])
    wait_port("127.0.0.1", port, timeout=60)
    assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 401
    assert (
        httpx.get(f"http://127.0.0.1:{port}/", auth=("admin", "ragline-admin"), timeout=10).status_code == 401
    )
    assert (
        httpx.get(f"http://127.0.0.1:{port}/", auth=("admin", secrets["flower"]), timeout=10).status_code
        == 200
    )
    printed = up_output + run("status", "--json").stdout + run("config").stdout
    printed += "".join(p.read_text(errors="replace") for p in (home / "logs").glob("*.log"))
    assert [n for n, value in secrets.items() if value in printed] == []


def _nothing_in_the_home_is_readable_by_others(home: Path) -> None:
    """Every folder 0700 and every file 0600 (no group or other bit), the Redis AOF, logs, pid files,
    metrics and Postgres's data included; only the home itself may be 0711 (run as root, the
    embedded Postgres's own user passes through it) and a socket is reached through its 0700 folder."""
    from ragline.shared.config.settings import Settings
    from ragline.shared.worker import credentials

    assert stat.S_IMODE(home.lstat().st_mode) == credentials.home_mode(Settings(services_home=home))
    exposed = []
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            path = Path(root) / name
            st = path.lstat()
            if stat.S_ISSOCK(st.st_mode):
                continue
            if stat.S_IMODE(st.st_mode) & 0o077:
                exposed.append(f"{stat.S_IMODE(st.st_mode):o} {path.relative_to(home)}")
    # the walk saw what it is about: the AOF with the task messages, the logs, pid files, metrics
    for part in ("redis/appendonly.aof", "logs/worker-query.log", "run/worker-query.pid", "metrics/query"):
        assert (home / part).exists(), part
    assert b"ragline.query.ask" in (home / "redis" / "appendonly.aof").read_bytes()
    assert exposed == [], exposed


#: a chat backend and an event relay on the embedded stack, each logged in as its own Redis user
PRODUCER = """
import asyncio, json, sys
from urllib.parse import urlsplit
from ragline import RaglineClient, RaglineForbidden
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.async_client import AsyncRaglineClient

role, question, doc_id = sys.argv[1:4]
out = {"user": urlsplit(get_settings().effective_redis_url()).username}
client = RaglineClient(timeout=120)
if role == "chat":
    answer = client.ask(question, tenant="cli", groups=["public"])
    out["answer"], out["cited"] = answer.answer, [c.doc_id for c in answer.citations]

    async def stream():
        async with AsyncRaglineClient(timeout=120) as ac:
            return [e.type async for e in ac.ask_stream(question, tenant="cli", groups=["public"])]

    out["stream"] = asyncio.run(stream())
try:
    synced = client.sync_acl([{"tenant": "cli", "doc_id": doc_id, "acl": ["public", "staff"], "version": 1}])
    out["sync"] = synced.documents_updated
except RaglineForbidden as exc:
    out["sync"] = exc.error
if role == "relay":
    try:
        client.ask(question, tenant="cli", groups=["public"])
    except RaglineForbidden as exc:
        out["ask"] = exc.error
print(json.dumps(out))
"""


def _each_component_uses_its_own_redis_user(home: Path, env: dict, doc_id: str) -> None:
    """Every process of the stack logs in as its role's Redis user (shared/sdk/redis_acl.py), and with
    only that user a chat backend asks (also streamed) but cannot change permissions, a relay syncs
    permissions but cannot ask, Flower sees the workers and the metrics servers read queue depths."""
    import httpx

    by_kind: dict[str, set] = {"worker": set(), "beat": set(), "flower": set(), "metrics": set()}
    for p in _ours(home):
        with contextlib.suppress(psutil.NoSuchProcess):
            argv = p.cmdline()
            if "ragline.shared.stack.metrics_endpoint" in argv:
                kind = "metrics"
            elif "celery" in argv:
                kind = next((k for k in ("worker", "beat", "flower") if k in argv), "")
            else:
                continue  # Postgres, Redis
            by_kind.setdefault(kind, set()).add(p.environ().get("RAGLINE_SERVICES_REDIS_ROLE"))
    assert by_kind == {"worker": {"worker"}, "beat": {"worker"}, "flower": {"flower"}, "metrics": {"metrics"}}
    results = {}
    for role in ("chat", "relay"):
        run = subprocess.run(
            [sys.executable, "-c", PRODUCER, role, "Что делает ragline?", doc_id],
            env={**env, "RAGLINE_SERVICES_REDIS_ROLE": role},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        results[role] = json.loads(run.stdout.strip().splitlines()[-1])
    chat, relay = results["chat"], results["relay"]
    assert chat["user"] == "chat" and chat["cited"] == [doc_id] and "[1]" in chat["answer"]
    assert chat["stream"][-1] == "answer" and chat["sync"] == "forbidden"
    assert relay == {"user": "relay", "sync": 1, "ask": "forbidden"}
    from ragline.shared.config.settings import Settings
    from ragline.shared.worker import credentials

    settings = Settings(services_home=home)
    flower = ("admin", credentials.password(settings, "flower"))
    workers = httpx.get(
        f"http://127.0.0.1:{env['RAGLINE_FLOWER_PORT']}/api/workers?refresh=1", auth=flower, timeout=60
    ).json()
    assert {name.split("@")[0] for name in workers} == {"ingest", "query", "control"}, workers
    metrics = ("metrics", credentials.password(settings, "metrics"))
    port = int(env["RAGLINE_OPS_METRICS_PORT"]) + 1  # the query pool's endpoint
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", auth=metrics, timeout=30).text
    assert 'rag_queue_depth{queue="query"}' in text
    logs = "".join(p.read_text(errors="replace") for p in (home / "logs").glob("*.log"))
    assert "no permissions" not in logs


@pytest.mark.slow
def test_up_ingest_ask_down_leaves_nothing(tmp_path):
    # not under tmp_path: run as root, the embedded Postgres runs as another user that must traverse
    # the home's parents, and every pytest session that starts closes /tmp/pytest-of-<user> to 0700
    home = Path(tempfile.mkdtemp(prefix="rl-cli-")) / "home"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "about.md").write_text("# О системе\n\nragline отвечает на вопросы со ссылками на документы.\n")
    env = {
        **os.environ,
        "RAGLINE_SERVICES_HOME": str(home),
        "RAGLINE_FLOWER_PORT": str(free_port()),
        "RAGLINE_OPS_METRICS_PORT": str(free_port_run(3)),
        "RAGLINE_WORKERS_INGEST_CONCURRENCY": "1",
        "RAGLINE_WORKERS_QUERY_CONCURRENCY": "1",
    }

    def run(*a, **kw):
        return subprocess.run([*RAGLINE, *a], env=env, capture_output=True, text=True, timeout=300, **kw)  # noqa: E731

    try:
        up = run("up")
        assert up.returncode == 0, up.stderr
        st = json.loads(run("status", "--json").stdout)
        assert all(st["processes"].values()), st
        _generated_secrets_are_private_used_and_never_printed(home, env, up.stdout + up.stderr, run)
        ing = run("ingest", str(docs), "--tenant", "cli", "--acl", "public", "--wait", "--json")
        assert ing.returncode == 0, ing.stderr
        summary = json.loads(ing.stdout)
        assert summary["documents"] == 1 and summary["chunks"] >= 1 and summary["failed"] == 0
        ask = run("ask", "Что делает ragline?", "--tenant", "cli", "--groups", "public", "--json")
        answer = json.loads(ask.stdout)
        assert answer["citations"]
        assert answer["citations"][0]["doc_id"] == f"{default_source_name(docs)}/about.md"
        assert "[1]" in answer["answer"]
        _each_component_uses_its_own_redis_user(home, env, f"{default_source_name(docs)}/about.md")
        _nothing_in_the_home_is_readable_by_others(home)
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    psutil.wait_procs(_ours(home), timeout=10)
    assert _ours(home) == []
    shutil.rmtree(home.parent, ignore_errors=True)
