"""A question or search restricted to a source, a path prefix, layers, with paths left out or
ranked higher: the same scope from the CLI (``ragline ask/search --source --prefix --exclude
--prefer --layers``) and from both clients' keywords (``source=``, ``prefix=``, ...), mapped once
onto the retrieval contract's filters (``shared/sdk/client.py``, ``scope_filters``) and applied by
the query pool's SQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.async_client import AsyncRaglineClient
from ragline.shared.sdk.client import RaglineClient, scope_filters
from tests.conftest import REPO
from tests.integration.query_corpus import store_docs

TEXT = "повторная попытка запроса после ошибки соединения retry backoff"
DOCS = [
    {"doc_id": "web/docs/retry.md", "layer": "docs", "content": TEXT + " руководство"},
    {"doc_id": "web/docs/old/retry.md", "layer": "docs", "content": TEXT + " старое руководство"},
    {"doc_id": "web/src/retry.py", "layer": "source", "content": TEXT + " def retry(): pass"},
    {"doc_id": "cli/docs/retry.md", "layer": "docs", "content": TEXT + " другой источник"},
]
# scope -> the doc ids it keeps
CASES = [
    ({"source": "web"}, {"web/docs/retry.md", "web/docs/old/retry.md", "web/src/retry.py"}),
    ({"source": "web", "prefix": ["docs/"]}, {"web/docs/retry.md", "web/docs/old/retry.md"}),
    ({"source": "web", "prefix": ["docs/"], "exclude": ["docs/old/"]}, {"web/docs/retry.md"}),
    ({"prefix": ["cli/"]}, {"cli/docs/retry.md"}),
    ({"source": "web", "layers": ["source"]}, {"web/src/retry.py"}),
]


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, DOCS)
    return tenant


def test_the_scope_names_map_onto_the_contract_fields():
    assert scope_filters("web", ["docs/"], "docs/old/", "docs/") == {
        "path_prefixes": ["web/docs/"],
        "exclude_path_prefixes": ["web/docs/old/"],
        "prefer_path_prefixes": ["web/docs/"],
    }
    assert scope_filters("web") == {"path_prefixes": ["web/"]}
    assert scope_filters() == {}


def _cli(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "ragline.cli", *args, "--json"],
        cwd=REPO,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def retrieved(trace: dict) -> set[str]:
    return {h["doc_id"] for h in trace["retrieved"]}


def _options(scope: dict) -> list[str]:
    args = ["--source", scope["source"]] if "source" in scope else []
    for name in ("prefix", "exclude", "layers"):
        for value in scope.get(name, []):
            args += [f"--{name}", value]
    return args


def test_every_entry_point_applies_the_same_scope(celery_worker, corpus):
    url = get_settings().effective_redis_url()
    client = RaglineClient(url, timeout=60)

    async def async_ids(scope: dict) -> tuple[set[str], set[str]]:
        async with AsyncRaglineClient(url, timeout=60) as c:
            found = await c.search(TEXT, tenant=corpus, groups=["g"], k=10, mode="lexical", **scope)
            answer = await c.ask(TEXT, tenant=corpus, groups=["g"], k=10, mode="lexical", **scope)
        return {h.doc_id for h in found.hits}, retrieved(answer.trace)

    for scope, expected in CASES:
        base = ["--tenant", corpus, "--groups", "g", "--mode", "lexical", *_options(scope)]
        cli_search = {h["doc_id"] for h in _cli("search", TEXT, *base, "--k", "10")["hits"]}
        cli_ask = retrieved(_cli("ask", TEXT, *base, "--k", "10")["trace"])
        sdk = {h.doc_id for h in client.search(TEXT, corpus, ["g"], k=10, mode="lexical", **scope).hits}
        sdk_ask = retrieved(client.ask(TEXT, corpus, ["g"], k=10, mode="lexical", **scope).trace)
        a_search, a_ask = asyncio.run(async_ids(scope))
        assert cli_search == sdk == a_search == expected, scope
        assert cli_ask == sdk_ask == a_ask == expected, scope  # what the answer was composed from


def test_prefer_ranks_the_preferred_paths_first(celery_worker, corpus):
    client = RaglineClient(get_settings().effective_redis_url(), timeout=60)
    hits = client.search(TEXT, corpus, ["g"], k=10, mode="lexical", source="web", prefer="src/").hits
    assert hits[0].doc_id == "web/src/retry.py" and hits[0].prefer_bonus > 0
    cli = _cli(
        "search", TEXT, "--tenant", corpus, "--groups", "g", "--mode", "lexical", "--prefer", "web/docs/old/"
    )
    assert cli["hits"][0]["doc_id"] == "web/docs/old/retry.md"
