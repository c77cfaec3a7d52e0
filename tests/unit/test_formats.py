"""A document format is declared once (ragline.shared.sdk.formats) and every path reads that declaration:
the suffix map of the loaders, the content types of URL sources, the contracts' ``fmt``, the
binary/text split and the parser dispatch. A matrix over every declared format and every path."""

from __future__ import annotations

import importlib

import pytest
from pydantic import ValidationError

from ragline.ingest import parse
from ragline.ingest.parse import BINARY_FORMATS, SUPPORTED, ParseError, parse_bytes
from ragline.ingest.sources import guess_format
from ragline.shared.sdk import formats
from ragline.shared.sdk.contracts import IngestEvent, IngestRequest


def _request(fmt: str) -> IngestRequest:
    return IngestRequest(tenant="t", doc_id="d", content="x", fmt=fmt)


def _event(fmt: str) -> IngestEvent:
    return IngestEvent(type="upsert", tenant="t", doc_id="d", uri="/data/d", version=1, fmt=fmt)


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_every_declared_format_reaches_every_path(fmt):
    for suffix in fmt.suffixes:
        assert SUPPORTED[suffix] == fmt.name  # folder sources, `ragline ingest`, parse_file
        assert guess_format(f"https://docs.example/a/b{suffix}") == fmt.name  # URL sources by path
    for ctype in fmt.content_types:
        assert guess_format("https://docs.example/a/b", ctype) == fmt.name  # by content type
        assert formats.by_content_type(f"{ctype.upper()}; charset=utf-8") == fmt.name
    assert _request(fmt.name).fmt == fmt.name and _event(fmt.name).fmt == fmt.name  # the contracts
    assert (fmt.name in BINARY_FORMATS) is fmt.binary
    module = importlib.import_module(f"ragline.ingest.parse.{fmt.parser}")
    assert parse._PARSERS[fmt.name] is module.elements


def test_the_contracts_enumerate_exactly_the_declared_formats():
    for model in (IngestRequest, IngestEvent):
        schema = model.model_json_schema()["properties"]["fmt"]["anyOf"]
        assert [s["enum"] for s in schema if "enum" in s] == [list(formats.NAMES)], model.__name__
    assert set(parse._PARSERS) == set(formats.NAMES)


@pytest.mark.parametrize("path", ["contract request", "contract event", "url", "parser"])
def test_an_undeclared_format_is_refused_on_every_path(path):
    if path == "contract request":
        with pytest.raises(ValidationError, match="fmt"):
            _request("rtf")
    elif path == "contract event":
        with pytest.raises(ValidationError, match="fmt"):
            _event("rtf")
    elif path == "url":
        assert guess_format("https://docs.example/a.rtf", "application/rtf") is None
        assert ".rtf" not in SUPPORTED
    else:
        with pytest.raises(ParseError, match="unsupported format"):
            parse_bytes(b"{\\rtf1 hello}", "rtf")


def test_names_suffixes_and_content_types_are_each_declared_once():
    names = [f.name for f in formats.FORMATS]
    suffixes = [s for f in formats.FORMATS for s in f.suffixes]
    ctypes = [c for f in formats.FORMATS for c in f.content_types]
    for declared in (names, suffixes, ctypes):
        assert len(declared) == len(set(declared)), declared
    assert all(s.startswith(".") and s == s.lower() for s in suffixes)
