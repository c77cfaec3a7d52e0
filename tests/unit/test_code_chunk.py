"""Source code: tree-sitter definitions, chunks with spans and symbol paths, identifier terms."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ragline.ingest.chunk import chunk_code, code_chunks, code_context
from ragline.ingest.layers import document_layer, is_test_path
from ragline.ingest.parse import SUPPORTED, ParseError, front_matter, parse_bytes
from ragline.ingest.parse.code import GRAMMARS, language_for, parse_code
from ragline.shared.config.settings import CodeSettings
from ragline.shared.worker.identifiers import (
    code_tsquery,
    code_tsvector,
    identifier_terms,
    path_terms,
    whole_tsquery,
)

# one small file per grammar: (language, file name, source, a symbol path it must find, its first line)
SAMPLES = [
    (
        "python",
        "m.py",
        "import os\n\n\nclass Session:\n    def send(self, req):\n        return req\n",
        "Session.send",
        5,
    ),
    (
        "javascript",
        "m.js",
        "const x = 1;\nclass Client {\n  send(req) {\n    return req;\n  }\n}\n",
        "Client.send",
        3,
    ),
    (
        "typescript",
        "m.ts",
        "export const send = (req: string): string => {\n  return req;\n};\n",
        "send",
        1,
    ),
    ("tsx", "m.tsx", "export function View(p: {a: number}) {\n  return <div>{p.a}</div>;\n}\n", "View", 1),
    (
        "go",
        "m.go",
        "package m\n\ntype Client struct{}\n\nfunc (c *Client) Send(r int) int {\n\treturn r\n}\n",
        "Client.Send",
        5,
    ),
    (
        "java",
        "M.java",
        "package m;\npublic class Client {\n    public int send(int r) {\n        return r;\n    }\n}\n",
        "Client.send",
        3,
    ),
    (
        "rust",
        "m.rs",
        "struct Client;\nimpl Client {\n    fn send(&self, r: i32) -> i32 {\n        r\n    }\n}\n",
        "Client.send",
        3,
    ),
    ("c", "m.c", "#include <stdio.h>\n\nint send_all(int r) {\n    return r;\n}\n", "send_all", 3),
    (
        "cpp",
        "m.cpp",
        "namespace net {\nclass Client {\n public:\n  int send(int r) { return r; }\n};\n}\n",
        "net.Client.send",
        4,
    ),
    (
        "csharp",
        "m.cs",
        "namespace Net {\n    public class Client {\n        public int Send(int r) {\n            return r;\n"
        "        }\n    }\n}\n",
        "Net.Client.Send",
        3,
    ),
    (
        "ruby",
        "m.rb",
        "module Net\n  class Client\n    def send_it(r)\n      r\n    end\n  end\nend\n",
        "Net.Client.send_it",
        3,
    ),
    (
        "php",
        "m.php",
        "<?php\nclass Client {\n    public function send($r) {\n        return $r;\n    }\n}\n",
        "Client.send",
        3,
    ),
    (
        "kotlin",
        "m.kt",
        "package m\n\nclass Client {\n    fun send(r: Int): Int {\n        return r\n    }\n}\n",
        "Client.send",
        4,
    ),
]


@pytest.mark.parametrize(
    ("language", "name", "source", "symbol", "line"), SAMPLES, ids=[s[0] for s in SAMPLES]
)
def test_every_grammar_finds_its_definitions_with_spans(language, name, source, symbol, line):
    assert language_for(f"src/{name}") == language
    assert SUPPORTED[name[name.rindex(".") :]] == language  # the loader accepts the file
    doc = parse_code(source, language, name)
    assert doc.parsed_by == "tree-sitter"
    seg = next(s for s in doc.segments if ".".join(s.path) == symbol)
    assert seg.is_def and seg.start == line
    # min_chars 0: no merging, so each definition is a chunk of its own
    chunks = chunk_code(doc, max_chars=1500, min_chars=0)
    chunk = next(c for c in chunks if symbol in c.symbols)
    assert chunk.start <= line <= chunk.end
    lines = source.split("\n")
    assert chunk.content == "\n".join(lines[chunk.start - 1 : chunk.end])


def test_every_grammar_is_listed_and_loads_with_the_network_blocked():
    """The grammars come compiled in their wheels: loading all of them in a fresh process whose
    sockets raise must work (nothing is downloaded at run time)."""
    assert set(GRAMMARS) == {s[0] for s in SAMPLES}
    script = textwrap.dedent(
        """
        import socket

        class NoNetwork(socket.socket):
            def __init__(self, *a, **k):
                raise OSError("network disabled in this test")

        def refuse(*a, **k):
            raise OSError("network disabled in this test")

        socket.socket = NoNetwork
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from ragline.ingest.parse.code import GRAMMARS, parser_for
        for lang in GRAMMARS:
            tree = parser_for(lang).parse(b"x")
            assert tree.root_node is not None, lang
        print(len(GRAMMARS))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(len(GRAMMARS))


def _long_function(n: int) -> str:
    body = "".join(f"    value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, n))
    return (
        "def compute_everything(first_argument, second_argument):\n"
        '    """Many statements."""\n'
        "    value_0 = first_argument\n"
        + body
        + "    if value_0:\n        return [\n            value_0,\n            second_argument,\n        ]\n"
        "    return value_0\n"
    )


def test_long_definition_is_split_at_statements_with_the_signature_repeated():
    source = "import os\n\n\n" + _long_function(60)
    lines = source.split("\n")
    doc = parse_code(source, "python", "big.py")
    chunks = chunk_code(doc, max_chars=600, min_chars=0)
    parts = [c for c in chunks if "compute_everything" in c.symbols]
    assert len(parts) >= 4
    assert not parts[0].continued and all(p.continued for p in parts[1:])
    signature = "def compute_everything(first_argument, second_argument):"
    for p in parts:
        assert len(p.content) <= 600
        assert p.content.startswith(signature)  # the first part is the definition, later ones repeat it
        if p.continued:
            assert p.content == signature + "\n" + "\n".join(lines[p.start - 1 : p.end])
        # every part starts where a statement starts: never inside the multi-line return list
        assert not lines[p.start - 1].startswith(" " * 12)
    # the parts cover the function's lines exactly once, in order
    assert parts[0].start == 4 and parts[-1].end == len([x for x in lines if x is not None]) - 1
    for a, b in zip(parts, parts[1:], strict=False):
        assert b.start == a.end + 1


def test_tiny_neighbours_are_merged_within_their_class():
    getters = "".join(f"    def get_{i}(self):\n        return self._{i}\n\n" for i in range(10))
    source = f"class Point:\n    '''A point.'''\n\n{getters}\n\ndef other():\n    return 1\n"
    doc = parse_code(source, "python", "point.py")
    chunks = chunk_code(doc, max_chars=1500, min_chars=300)
    point = [c for c in chunks if any(s.startswith("Point") for s in c.symbols)]
    assert len(point) == 1  # the header and ten getters: one chunk, not eleven
    assert point[0].heading == ("Point",)
    assert point[0].symbols == ("Point", *(f"Point.get_{i}" for i in range(10)))
    # a top-level function is another scope: not merged into the class
    assert not any("other" in c.symbols for c in point)
    # without merging every getter stands alone
    assert (
        len([c for c in chunk_code(doc, 1500, 0) if c.symbols and c.symbols[0].startswith("Point.get_")])
        == 10
    )


def test_every_line_is_in_exactly_one_chunk_and_contents_are_the_spans():
    source = (
        "# a module\nimport sys\n\nCONSTANT = 3\n\n\nclass A:\n    x = 1\n\n    def f(self):\n        return 1\n\n"
        "    y = 2\n\n    def g(self):\n        return 2\n\n\nif __name__ == '__main__':\n    A().f()\n"
    )
    lines = source.split("\n")
    doc = parse_code(source, "python", "a.py")
    for min_chars in (0, 300):
        chunks = chunk_code(doc, 1500, min_chars)
        seen: list[int] = []
        for c in chunks:
            assert c.content == "\n".join(lines[c.start - 1 : c.end])
            seen.extend(range(c.start, c.end + 1))
        assert len(seen) == len(set(seen))
        assert {n for n, line in enumerate(lines, 1) if line.strip()} <= set(seen)


def test_code_chunks_carry_spans_symbols_and_a_module_heading():
    source = "class Session:\n    def send(self, request):\n        return request\n"
    doc = parse_bytes(source.encode(), "python", "requests/sessions.py")
    (chunk,) = code_chunks(doc, 1500, 300)
    assert chunk.kind == "code"
    assert chunk.heading_path == ("requests/sessions.py", "Session")
    assert chunk.metadata == {
        "span_start": 1,
        "span_end": 3,
        "start_line": 1,
        "end_line": 3,
        "language": "python",
        "symbol": "Session",
        "symbols": ["Session", "Session.send"],
    }
    # the embedding context is the symbol path: the same after the file is renamed
    assert code_context(chunk, "requests/sessions.py") == "Session"
    renamed = code_chunks(parse_bytes(source.encode(), "python", "lib/other.py"), 1500, 300)[0]
    assert code_context(renamed, "lib/other.py") == code_context(chunk, "requests/sessions.py")


def test_files_without_a_grammar_are_split_by_lines_at_blank_lines():
    source = "[tool.a]\nx = 1\n\n[tool.b]\ny = 2\n" + "".join(f"k{i} = {i}\n" for i in range(200))
    doc = parse_bytes(source.encode(), "toml", "pyproject.toml")
    assert doc.parsed_by == "lines" and language_for("pyproject.toml") == "toml"
    chunks = code_chunks(doc, 400, 100)
    assert len(chunks) > 3
    lines = source.split("\n")
    for c in chunks:
        assert c.content == "\n".join(lines[c.metadata["span_start"] - 1 : c.metadata["span_end"]])
        assert len(c.content) <= 400


def test_a_broken_file_still_chunks_and_binary_is_an_error():
    doc = parse_code("def ok():\n    return 1\n\ndef broken(:\n    pass\n", "python", "b.py")
    assert {c for ch in chunk_code(doc, 1500, 0) for c in ch.symbols} >= {"ok"}
    with pytest.raises(ParseError, match="binary"):
        parse_bytes(b"def f():\x00\n", "python", "x.py")


def test_tests_and_source_layers_by_path_rules():
    code = CodeSettings()
    layer = lambda p, fmt="python": document_layer(  # noqa: E731
        p, fmt, "docs", code.source_layer, code.tests_layer, code.test_globs
    )
    assert layer("requests/models.py") == "C0_SOURCE_CHUNKS"
    for path in ("tests/test_models.py", "pkg/tests/helpers.py", "test_x.py", "conftest.py"):
        assert layer(path) == "C0_TEST_CHUNKS", path
    assert layer("server/handler_test.go", "go") == "C0_TEST_CHUNKS"
    assert layer("web/app.spec.ts", "typescript") == "C0_TEST_CHUNKS"
    assert layer("src/FooTest.java", "java") == "C0_TEST_CHUNKS"
    assert layer("docs/index.md", "md") == "docs"  # not code: the request's layer
    assert not is_test_path("requests/testing_utils_not.py", ["tests/*"])


def test_identifier_terms_split_and_keep_the_whole():
    groups = list(identifier_terms("getUserName(register_hook) HTTPAdapter.send the x"))
    assert groups == [
        ["getusername", "get", "user", "name"],
        ["register_hook", "register", "hook"],
        ["httpadapter.send", "httpadapter", "http", "adapter", "send"],
    ]
    assert path_terms("requests/sessions.py") == ["sessions.py", "requests", "sessions"]
    query = code_tsquery("Where is register_hook defined?")
    assert query == "'register_hook' | 'defined' | 'register' | 'hook'"
    assert code_tsquery("как работает поиск") == ""  # no identifiers: no code search
    assert whole_tsquery("HTTPAdapter.send or getUserName") == "'httpadapter.send' | 'getusername'"


def test_code_tsvector_weights_names_and_path():
    vec = code_tsvector(
        "def register_hook(self, event):\n    self.hooks[event].append(hook)",
        ["Request.register_hook"],
        "requests/models.py",
    )
    lexemes = dict(part.split(":", 1) for part in vec.split(" "))
    assert lexemes["'register_hook'"].endswith("A")  # a definition name: weight A
    assert lexemes["'models'"] == "2A"  # the path
    assert lexemes["'append'"].isdigit()  # a mere use: default weight
    assert lexemes["'hook'"] == "1A,3A,8A"  # one position per identifier, parts share it


def test_front_matter_is_metadata():
    text = "---\nid: logic-rag\nrelated_code:\n  - src/a.py\ndate: 2026-03-13\n---\n# Title\n\nBody.\n"
    assert front_matter(text.encode()) == {
        "id": "logic-rag",
        "related_code": ["src/a.py"],
        "date": "2026-03-13",
    }
    assert front_matter(b"# no front matter\n") == {}
    assert front_matter(b"---\n: [unbalanced\n---\ntext\n") == {}
