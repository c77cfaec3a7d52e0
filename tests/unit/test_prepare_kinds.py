"""What ``pipeline.prepare()`` makes of each kind of document, pinned to a recorded output.

``tests/data/prepare_golden.json`` is the output of ``prepare()`` as it was before prose and code
became two document kinds (``ingest/kinds.py``): that move was meant to change no chunk, context,
layer, symbol record or stage timing, and this test holds the new code to the old code's output for
a matrix of documents: every document format of ``shared/sdk/formats.py``, a Python and two
non-Python source files (a grammar and one read by lines), a test file, files under ``tests/`` and
``docs/`` that are not code, inline content, symbol records off, and documents that fail in the
chunk and parse stages. A format added to the registry without a case here fails
:func:`test_every_registered_format_is_in_the_matrix`.

The golden file is written by ``python -m tests.unit.test_prepare_kinds --write``. Rewrite it only
for an intended change of what ingestion produces, and say so in the commit: a rewrite to make this
test pass hides exactly the regressions it exists to catch.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from ragline.ingest import pipeline
from ragline.ingest.load import Loaded
from ragline.shared.config.settings import reset_settings
from ragline.shared.sdk import formats
from ragline.shared.sdk.contracts import IngestRequest
from tests.pdfs import make_pdf

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "prepare_golden.json"

MARKDOWN = """---
title: Retrieval guide
related_code:
  - src/pkg/models.py
  - " "
tags: [search]
---
# Overview

Retrieval finds the chunks that answer a question. It fuses a lexical and a vector list. The lexical
list is BM25 over the chunk text and its context. The vector list is a cosine search over the
embedded chunks. Both lists are cut to the candidate pool before fusion.

## Settings

| name | default |
|------|---------|
| pool | 200 |
| fusion | convex |

```python
search("where is the session closed?")
```

## Long section

""" + " ".join(f"Sentence number {i} says something about retrieval and its ranking." for i in range(40))

HTML = """<html><head><title>Page</title></head><body><nav>Home | Docs</nav>
<h1>Operations</h1><p>Workers consume the ingest queue. Each task carries a batch of documents.</p>
<h2>Restarts</h2><p>A worker that dies mid-task leaves its task unacknowledged; another worker takes it.</p>
<table><tr><th>queue</th><th>pool</th></tr><tr><td>ingest</td><td>ingest</td></tr></table>
</body></html>"""

TEXT = """Release notes
=============

The ingest pool embeds documents in batches of up to 128 texts. A document that fails alone does not
fail its batch.

Upgrading
---------

Run the migrations before starting the new workers.
"""

RST = """Upgrading
=========

Run the migrations before starting the new workers, with :class:`~ragline.Migrator` or::

    ragline migrate --tenant acme

Rolling back
------------

.. versionchanged:: 2.0
   A rollback keeps the embeddings.
"""

PYTHON = (
    '''"""Models of the package."""

import dataclasses

from pkg import base


@dataclasses.dataclass
class User(base.Model):
    """A user of the service.

    Longer description that is not the first paragraph.
    """

    name: str
    email: str

    def greet(self) -> str:
        """Say hello."""
        return f"hello {self.name}"

    # the address shown in the interface
    @property
    def display(self) -> str:
        return f"{self.name} <{self.email}>"


def save(user: User, store) -> None:
    """Save a user; every field is written."""
'''
    + "".join(
        f"    store.write('field_{i}', user.name, user.email, {i})  # write field {i}\n" for i in range(40)
    )
    + """

def load(key):
    return base.get(key)
"""
)

PYTHON_TEST = """from pkg.models import User, save


def test_greet():
    assert User("a", "a@x").greet() == "hello a"


class TestSave:
    def test_writes_every_field(self):
        save(User("a", "a@x"), {})
"""

GO = """package server

import "net/http"

// Handler serves the API.
type Handler struct {
\tmux *http.ServeMux
}

// ServeHTTP answers one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
\th.mux.ServeHTTP(w, r)
}

func New() *Handler {
\treturn &Handler{mux: http.NewServeMux()}
}
"""

YAML = """# deployment
services:
  api:
    image: ragline
    replicas: 2

  worker:
    image: ragline
    command: celery
"""


def _docx() -> bytes:
    import docx

    d = docx.Document()
    d.add_heading("Access policy", level=1)
    d.add_paragraph("Every document carries the groups that may read it. A query sees only those.")
    d.add_heading("Groups", level=2)
    d.add_paragraph("Groups come from the identity provider. They are synced every hour.")
    t = d.add_table(rows=2, cols=2)
    for (r, c), text in {(0, 0): "group", (0, 1): "members", (1, 0): "staff", (1, 1): "12"}.items():
        t.cell(r, c).text = text
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def _pdf() -> bytes:
    return make_pdf(
        [
            [
                (20, "Access Control"),
                (14, "Design Principles"),
                (10, "Verify that the application enforces access control rules."),
            ],
            [(14, "Operation Level"), (10, "Verify that sensitive data is protected against IDOR attacks.")],
        ]
    )


def _git(rel: str) -> dict:
    """A request's metadata as a git source sends it (its path inside the repository)."""
    return {"source": "repo", "repo_path": rel, "commit": "0" * 40}


#: name -> (fmt, path, bytes, request fields, environment): every case goes through prepare()
CASES: dict[str, tuple[str, str, bytes, dict, dict]] = {
    "md front matter": ("md", "docs/guide.md", MARKDOWN.encode(), {"metadata": _git("docs/guide.md")}, {}),
    "md titled by front matter": (
        "md",
        "docs/faq.md",
        b"---\ntitle: Questions\nrelated_code: src/pkg/models.py\n---\nWhere are users saved? In the store.\n",
        {},
        {},
    ),
    "md under tests/": ("md", "tests/README.md", b"# Tests\n\nHow to run them. Use make.\n", {}, {}),
    "md custom layer": ("md", "notes/a.md", b"# Notes\n\nA note in its own layer.\n", {"layer": "notes"}, {}),
    "html": ("html", "site/ops.html", HTML.encode(), {}, {}),
    "text": ("text", "docs/release.rst", TEXT.encode(), {}, {}),
    "rst": ("rst", "docs/upgrade.rst", RST.encode(), {}, {}),
    "pdf": ("pdf", "asvs.pdf", _pdf(), {}, {}),
    "docx": ("docx", "policy.docx", _docx(), {}, {}),
    "python source": (
        "python",
        "src/pkg/models.py",
        PYTHON.encode(),
        {"metadata": _git("src/pkg/models.py")},
        {},
    ),
    "python symbols off": (
        "python",
        "src/pkg/models.py",
        PYTHON.encode(),
        {"metadata": _git("src/pkg/models.py")},
        {"RAGLINE_CODE_SYMBOLS": "false"},
    ),
    "python test file": (
        "python",
        "tests/test_models.py",
        PYTHON_TEST.encode(),
        {"metadata": _git("tests/test_models.py")},
        {},
    ),
    "python in a source named tests": (
        "python",
        "tests/src/app.py",
        b"def main():\n    return 0\n",
        {"metadata": {"source": "tests"}},
        {},
    ),
    "go source": ("go", "server/handler.go", GO.encode(), {"metadata": _git("server/handler.go")}, {}),
    "go test file": (
        "go",
        "server/handler_test.go",
        b'package server\n\nimport "testing"\n\nfunc TestNew(t *testing.T) {\n\tNew()\n}\n',
        {"metadata": _git("server/handler_test.go")},
        {},
    ),
    "yaml by lines": (
        "yaml",
        "deploy/compose.yaml",
        YAML.encode(),
        {"metadata": _git("deploy/compose.yaml")},
        {},
    ),
    # not empty to the parser (its bytes are not ASCII blanks), but every line is blank text
    "python blank: no code": (
        "python",
        "src/blank.py",
        "\u00a0\n\n".encode(),
        {"metadata": _git("src/blank.py")},
        {},
    ),
    "python binary": ("python", "src/blob.py", b"def f():\x00\n", {"metadata": _git("src/blob.py")}, {}),
    "md empty": ("md", "docs/empty.md", b"   \n", {}, {}),
}

#: inline documents (``content``): the loader itself, and the doc id as a placeholder title
INLINE: dict[str, dict] = {
    "inline text": {"content": "Inline note. It has two sentences.", "fmt": "text"},
    "inline md": {"content": "# Inline\n\nA heading and a line.\n", "fmt": "md", "path": "notes/inline.md"},
}


def _run(name: str, monkeypatch: pytest.MonkeyPatch, seconds: list[float] | None = None) -> dict:
    """One case through ``prepare()``: what it stores (or the stage and message it fails with) and
    the stages it reports to the metrics (with their seconds appended to ``seconds`` when given)."""
    if name in INLINE:
        req = IngestRequest(tenant="t", doc_id=name.replace(" ", "-"), **INLINE[name])
        env: dict = {}
    else:
        fmt, path, data, fields, env = CASES[name]
        req = IngestRequest(tenant="t", doc_id=path, uri=f"/data/{path}", **fields)
        # a git source's file is titled by its path in the repository (the module), a folder's by its name
        title = path if "repo_path" in fields.get("metadata", {}) else Path(path).stem
        loaded = Loaded(data, fmt, title, path)
        monkeypatch.setattr(pipeline, "load", lambda r: loaded)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    reset_settings()
    observed: list = []

    def observe(stage: str, s: float, layers: dict) -> None:
        observed.append([stage, layers])
        if seconds is not None:
            seconds.append(s)

    monkeypatch.setattr(pipeline, "observe_stage", observe)
    try:
        out = pipeline.prepare(req, "model", None)
    except pipeline.DocumentFailed as exc:
        return {"failed": exc.stage, "message": str(exc), "observed": observed}
    finally:
        monkeypatch.undo()
        reset_settings()
    assert isinstance(out, pipeline.Prepared)
    return {
        "title": out.title,
        "fmt": out.fmt,
        "path": out.path,
        "rel_path": out.rel_path,
        "code": out.code,
        "layer": out.layer,
        "layers": out.layers,
        "chunk_layers": out.chunk_layers,
        "metadata": out.metadata,
        "timings": list(out.timings),
        "observed": observed,
        "chunks": [
            {
                "chunk_no": c.chunk_no,
                "content": c.content,
                "heading_path": list(c.heading_path),
                "kind": c.kind,
                "page": c.page,
                "metadata": c.metadata,
            }
            for c in out.chunks
        ],
        "contexts": out.contexts,
        "texts": out.texts,
    }


NAMES = [*CASES, *INLINE]


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", NAMES)
def test_prepare_makes_what_it_made_before_the_document_kinds(name, golden, monkeypatch):
    assert json.loads(json.dumps(_run(name, monkeypatch), ensure_ascii=False)) == golden[name]


@pytest.mark.parametrize("name", NAMES)
def test_a_stage_shorter_than_the_reported_rounding_still_adds_its_time(name, monkeypatch):
    """The clock moves 1 µs per reading, so every stage lasts a few µs: the result's timings round
    that to 0.0 ms, the stage histogram must still get the time."""
    ticks = iter(range(10**9))
    monkeypatch.setattr(pipeline.time, "perf_counter", lambda: next(ticks) * 1e-6)
    seconds: list[float] = []
    out = _run(name, monkeypatch, seconds)
    assert len(seconds) == len(out["observed"])
    assert out["observed"] or "failed" in out  # a failed document reports no stage
    assert all(s > 0 for s in seconds), list(zip(out["observed"], seconds, strict=True))


def test_every_registered_format_is_in_the_matrix(golden):
    assert set(golden) == set(NAMES)
    covered = {CASES[n][0] for n in CASES} | {INLINE[n]["fmt"] for n in INLINE}
    assert set(formats.NAMES) <= covered
    kinds = {n: golden[n]["code"] for n in NAMES if "code" in golden[n]}
    assert set(kinds.values()) == {True, False}  # both kinds, and a stored document of each
    layers = {layer for n in NAMES for layer in golden[n].get("layers", [])}
    assert {"docs", "notes", "C0_SOURCE_CHUNKS", "C0_TEST_CHUNKS", "C1_SYMBOLS"} <= layers
    assert {golden[n]["failed"] for n in NAMES if "failed" in golden[n]} == {"chunk", "parse"}


def _write() -> None:
    mp = pytest.MonkeyPatch()
    out = {name: _run(name, mp) for name in NAMES}
    GOLDEN.write_text(json.dumps(out, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN} ({len(out)} cases)")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    _write()
