"""The MCP Inspector's command-line mode (npm) lists and calls the four tools of `ragline mcp`.

A client that is not ours, in another language: over stdio (the Inspector starts `ragline mcp`) and
over Streamable HTTP with a bearer token. Skipped, saying why, where ``npx`` is missing or the
package cannot be fetched. The version is pinned, so the test reads the same CLI everywhere (it
asks for Node 22 and runs on Node 20 with an engine warning).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.integration.test_mcp import (  # noqa: F401 (fixtures)
    RAGLINE,
    SECRETS,
    TOOLS,
    A,
    B,
    _make_token,
    _markers,
    corpus,
    http_server,
)

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


def _npx(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["npx", "-y", INSPECTOR, "--cli", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def inspector():
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed (Node.js): the Inspector's CLI cannot run")
    try:
        found = _npx("--help", timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip(f"npx could not fetch {INSPECTOR} within 300 s")
    if found.returncode != 0:
        pytest.skip(f"npx could not fetch {INSPECTOR}: {found.stderr.strip()[-300:]}")


def _json(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout)


def test_inspector_lists_and_calls_the_tools(inspector, corpus, http_server):  # noqa: F811
    word = SECRETS[A][0]
    # stdio: the Inspector starts the server with only the environment it is given
    env = [f"RAGLINE_SERVICES_HOME={os.environ['RAGLINE_SERVICES_HOME']}"]
    stdio = ["-e", env[0], "--method", "tools/list", "--", RAGLINE, "mcp", "--tenant", A, "--groups", "ga"]
    assert {t["name"] for t in _json(_npx(*stdio))["tools"]} == TOOLS

    url, proc, log = http_server
    token = ["--transport", "http", "--header", f"Authorization: Bearer {_make_token(A, 'ga')}"]
    assert {t["name"] for t in _json(_npx(url, *token, "--method", "tools/list"))["tools"]} == TOOLS
    calls = {
        "search": [f"query=ретраи {word}", "mode=lexical"],
        "ask": [f"query=Как работают ретраи {word}?", "mode=lexical"],
        "read": [f"doc_id={word}.md"],
        "sources": [],
    }
    for tool, args in calls.items():
        argv = [url, *token, "--method", "tools/call", "--tool-name", tool]
        result = _json(_npx(*argv, *(["--tool-arg", *args] if args else [])))
        assert result.get("isError") is not True, (tool, result)
        text = json.dumps(result, ensure_ascii=False)
        assert not [m for m in _markers(A, B) if m in text], (tool, text)
        if tool in ("search", "read"):
            assert f"тело-{word}" in text, (tool, text)
    # no token: the server answers 401, which the Inspector reports as authentication required
    refused = _npx(url, "--transport", "http", "--stored-auth-only", "--method", "tools/list")
    assert refused.returncode != 0 and "auth" in refused.stdout + refused.stderr, refused.stdout
