"""The symbol layer: one short record per definition (signature, docstring, location), built from the
tree-sitter parse at ingest; and the generated-file markers that keep data tables out."""

from __future__ import annotations

import textwrap

import pytest

from ragline.ingest.chunk import code_chunks, symbol_chunks, symbol_records
from ragline.ingest.git import content_skip_reason
from ragline.ingest.kinds import related_code
from ragline.ingest.parse.code import parse_code
from ragline.shared.worker.identifiers import code_tsvector

PY = textwrap.dedent(
    '''\
    """Module docstring."""
    import os


    # the request registry
    class Request(object):
        """A user-created Request.

        Used to prepare a PreparedRequest, which is sent to the server.
        """

        def __init__(self, method=None):
            self.method = method

        @property
        def register_hook(self, event, hook):
            """Properly register a hook."""
            self.hooks[event].append(hook)


    def merge_setting(request_setting,
                      session_setting):
        """Determines the appropriate setting for a given request, taking into account
        the explicit setting on that request, and the setting in the session. If a
        setting is a dictionary, they will be merged together using `dict_class`."""
        return request_setting or session_setting
    '''
)


def records(text: str, language: str = "python", doc_chars: int = 300):
    return {".".join(r.path): r for r in symbol_records(parse_code(text, language, "m"), doc_chars)}


def test_one_record_per_definition_with_signature_docstring_and_whole_span():
    recs = records(PY)
    assert list(recs) == ["Request", "Request.__init__", "Request.register_hook", "merge_setting"]
    cls = recs["Request"]
    # the whole class, from the comment above it to its last member
    assert (cls.kind, cls.start, cls.end) == ("class", 5, 18)
    assert cls.content == (
        '# the request registry\nclass Request(object):\n    """A user-created Request.\n    """'
    )
    hook = recs["Request.register_hook"]
    assert (hook.kind, hook.start, hook.end) == ("method", 15, 18)
    assert hook.content == (
        '@property\ndef register_hook(self, event, hook):\n    """Properly register a hook."""'
    )
    merge = recs["merge_setting"]
    assert merge.kind == "function" and (merge.start, merge.end) == (21, 26)
    assert merge.content.startswith("def merge_setting(request_setting,\n                  session_setting):")
    assert "self.hooks" not in hook.content and "return" not in merge.content  # no bodies


def test_long_docstrings_and_comments_are_cut():
    recs = records(PY, doc_chars=60)
    merge = recs["merge_setting"].content
    assert merge.endswith('..."""') and len(merge) < 250
    long_comment = (
        "\n".join(f"// line {i} of a long comment" for i in range(20)) + "\nfunction f() { return 1 }\n"
    )
    (rec,) = records(long_comment, "javascript", 100).values()
    assert rec.content.endswith("function f() { return 1 }") and "line 19" in rec.content
    assert "line 0 " not in rec.content  # the lines nearest the definition are kept


@pytest.mark.parametrize(
    ("language", "source", "symbol", "first"),
    [
        (
            "go",
            "package p\n\n// Send sends.\nfunc (c *Client) Send(r int) error {\n\treturn nil\n}\n",
            "Client.Send",
            "// Send sends.",
        ),
        (
            "javascript",
            "/** Adds. */\nexport function add(a, b) {\n  return a + b;\n}\n",
            "add",
            "/** Adds. */",
        ),
        ("java", "class A {\n  /** Runs. */\n  void run() {\n    x();\n  }\n}\n", "A.run", "/** Runs. */"),
    ],
)
def test_other_languages_keep_the_comment_above_a_definition(language, source, symbol, first):
    rec = records(source, language)[symbol]
    assert rec.content.splitlines()[0] == first
    assert "return" not in rec.content and "x();" not in rec.content


def test_files_read_by_lines_have_no_symbols():
    assert records("a = 1\n\nb = 2\n", "toml") == {}


def test_symbol_chunks_follow_the_code_chunks_with_spans_and_symbols():
    doc = parse_code(PY, "python", "requests/models.py")
    code = code_chunks(doc)
    syms = symbol_chunks(doc, len(code), 300)
    assert [c.chunk_no for c in syms] == list(range(len(code), len(code) + 4))
    hook = next(c for c in syms if c.metadata["symbol"] == "Request.register_hook")
    assert hook.kind == "symbol"
    assert hook.heading_path == ("requests/models.py", "Request", "register_hook")
    assert hook.metadata == {
        "span_start": 15,
        "span_end": 18,
        "start_line": 15,
        "end_line": 18,
        "language": "python",
        "symbol": "Request.register_hook",
        "symbols": ["Request.register_hook"],
        "symbol_kind": "method",
    }
    # the definition's name carries weight A in its identifier terms, like a code chunk's
    assert "'register_hook':1A" in code_tsvector(hook.content, hook.metadata["symbols"], "requests/models.py")


def test_related_code_front_matter():
    assert related_code({"related_code": ["src/a.py", " ", 3, "src/b.py"]}) == ["src/a.py", "src/b.py"]
    assert related_code({"related_code": "src/a.py"}) == ["src/a.py"]
    assert related_code({"title": "x"}) == [] and related_code(None) == []


@pytest.mark.parametrize(
    ("head", "generated"),
    [
        (b'"""DICOM private dictionary auto-generated by generate_private_dict.py."""\n', True),
        (b"# Auto-generated by generate_concept_dicts.py.\n# -*- coding: utf-8 -*-\n", True),
        (b"// This file is automatically generated by a tool\n", True),
        (b'"""Utilities: nothing generated here."""\nimport os\n', False),
        (b"x = 1  # a value the user auto-generated by hand\n", False),
        (b'"""Models."""\n# ids are auto-generated by the database\n', False),  # the first line only
    ],
)
def test_generated_data_tables_are_skipped(head, generated):
    reason = content_skip_reason(head + b"x = 1\n" * 10, 1000)
    assert (reason == "generated (a generated-code marker)") is generated
