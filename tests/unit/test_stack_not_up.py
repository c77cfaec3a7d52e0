"""Where a client or command looks for the embedded stack, and what it says when nothing is there.

Every case runs in a fresh interpreter with a private, empty ragline home: the producer clients and
the CLI resolve the broker the same way (``client_urls`` / ``reload_app`` -> ``effective_redis_url``),
so the matrix is entry point (sync client, asyncio client, a command) x variable (none, RAGLINE_SERVICES_HOME
pointing at an empty home)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CLIENT = """
import json, sys
import ragline
try:
    ragline.{cls}()
except ragline.RaglineUnavailable as exc:
    print(json.dumps({{"type": "RaglineUnavailable", "connection": isinstance(exc, ConnectionError),
                      "detail": exc.detail}}))
except Exception as exc:
    print(json.dumps({{"type": type(exc).__name__, "message": str(exc)}}))
"""


def _env(home: Path | None, cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("REDIS_URL", "DATABASE_URL"))}
    env.pop("RAGLINE_SERVICES_HOME", None)
    if home is not None:
        env["RAGLINE_SERVICES_HOME"] = str(home)
    env["RAGLINE_SERVICES_STACK_CHANGE_WAIT_S"] = "0"
    return env


@pytest.mark.parametrize("cls", ["RaglineClient", "AsyncRaglineClient"])
@pytest.mark.parametrize("private_home", [True, False], ids=["RAGLINE_SERVICES_HOME", "default-home"])
def test_a_client_without_a_stack_raises_unavailable_naming_where_it_looked(tmp_path, cls, private_home):
    home = tmp_path / "home" if private_home else None
    looked = (home or tmp_path / ".ragline").resolve() / "runtime.json"
    out = subprocess.run(
        [sys.executable, "-c", CLIENT.format(cls=cls)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(home, tmp_path),
        timeout=120,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["type"] == "RaglineUnavailable", got
    assert got["connection"] is True  # a chat backend's `except ConnectionError` catches it too
    detail = got["detail"]
    assert detail["runtime_file"] == str(looked) and detail["what"] == "broker"
    assert "REDIS_URL" in detail["variables"] and "RAGLINE_SERVICES_HOME" in detail["variables"]
    assert str(looked.parent) in detail["message"] and "RAGLINE_SERVICES_HOME" in detail["message"]


def test_a_command_without_a_stack_exits_4_naming_where_it_looked(tmp_path):
    home = tmp_path / "elsewhere"
    (tmp_path / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragline.cli",
            "ingest",
            str(tmp_path / "a.md"),
            "--tenant",
            "t",
            "--acl",
            "g",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(home, tmp_path),
        timeout=120,
    )
    assert out.returncode == 4, out.stdout + out.stderr
    text = " ".join(out.stderr.split())
    assert str(home.resolve()) in text and "REDIS_URL" in text and "RAGLINE_SERVICES_HOME" in text
