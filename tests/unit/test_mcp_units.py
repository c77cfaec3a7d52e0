"""`ragline mcp`'s pure parts: the token file, the tools' argument models, and `read`'s line assembly."""

from __future__ import annotations

import json
import stat

import pytest
from pydantic import ValidationError

from ragline.mcp import server, tokens
from ragline.shared.sdk.contracts import Hit


@pytest.fixture()
def store(tmp_path, monkeypatch):
    from ragline.shared.config.settings import get_settings, reset_settings

    monkeypatch.setenv("RAGLINE_SERVICES_HOME", str(tmp_path / "home"))
    reset_settings()
    yield tokens.TokenStore(get_settings())
    reset_settings()


def test_tokens_are_stored_hashed_private_and_revocable(store):
    made = [store.create("acme", ["staff", "eng"], note="ci") for _ in range(20)]
    for record, token in made:  # the secret is URL-safe base64: "_" in it must not break the parse
        assert store.verify(token) == tokens.Grant("acme", ("eng", "staff"), record.id)
    text = store.path.read_text()
    assert not [t for _, t in made if t in text] and all(r.sha256 in text for r, _ in made)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    record, token = made[0]
    for wrong in (
        "",
        "rlmcp",
        f"rlmcp_{record.id}_",
        token + "x",
        token.replace("rlmcp", "other"),
        "Bearer " + token,
    ):
        assert store.verify(wrong) is None, wrong
    assert store.revoke(record.id) and not store.revoke(record.id)
    assert store.verify(token) is None and store.verify(made[1][1]) is not None
    assert [r["id"] for r in json.loads(text)][0] == record.id


def test_a_token_scope_is_validated_like_a_contract(store):
    with pytest.raises(ValueError):
        store.create("", ["g"])
    with pytest.raises(ValueError):
        store.create("acme", ["bad\u202egroup"])


@pytest.mark.parametrize("args", [server.SearchArgs, server.AskArgs, server.ReadArgs, server.SourcesArgs])
def test_no_tool_argument_names_a_scope_and_undeclared_ones_are_refused(args):
    schema = args.model_json_schema()
    assert schema["additionalProperties"] is False
    assert not {"tenant", "groups", "query_vector"} & set(schema["properties"])
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        args.model_validate({"query": "q", "doc_id": "d", "tenant": "other"})


def _hit(no: int, start: int | None, content: str, **meta) -> Hit:
    metadata = {"span_start": start, "span_end": start + content.count("\n")} if start else {}
    return Hit(doc_id="m.py", chunk_no=no, path="src/m.py", content=content, metadata={**metadata, **meta})


def test_read_assembles_lines_from_chunks_that_are_exactly_their_span():
    hits = [
        _hit(0, 1, "import os\n"),
        _hit(1, 3, "def f():\n    return 1"),
        _hit(2, 3, "def f():  # a symbol record", kind="symbol"),
        # a later part of a split definition repeats its signature: not its span line for line
        Hit(
            doc_id="m.py",
            chunk_no=3,
            path="src/m.py",
            content="def f():\n    x\n    y",
            metadata={"span_start": 5, "span_end": 6},
        ),
    ]
    out = server.read_result(hits, server.ReadArgs(doc_id="m.py", start_line=2, end_line=4))
    assert out.text == "\n".join(["", "def f():", "    return 1"])
    assert [c.chunk_no for c in out.chunks] == [0, 1]
    one = server.read_result(hits, server.ReadArgs(doc_id="m.py", chunk_no=1))
    assert one.text == "def f():\n    return 1" and one.start_line is None
    with pytest.raises(server.ToolError):
        server.read_result(hits, server.ReadArgs(doc_id="m.py", chunk_no=7))
    prose = [Hit(doc_id="a.md", chunk_no=i, content=f"part {i}") for i in range(2)]
    assert server.read_result(prose, server.ReadArgs(doc_id="a.md")).text == "part 0\n\npart 1"
    with pytest.raises(server.ToolError, match="no line spans"):
        server.read_result(prose, server.ReadArgs(doc_id="a.md", start_line=1))
