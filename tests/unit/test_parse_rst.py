"""reStructuredText: section titles become the heading path, literal blocks stay code, Sphinx
directives and roles become their text, and a broken or unreadable file gives its text or an error.

The real pages are two files of the requests documentation (tests/data/rst, Apache-2.0)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ragline.ingest.parse import SUPPORTED, ParseError, parse_bytes, parse_file
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "rst"


def _blocks(path: str):
    doc = parse_file(DATA / path)
    assert doc.fmt == "rst"
    return doc, [(b.kind, b.heading, b.text) for b in doc.blocks]


def test_rst_files_are_their_own_format():
    assert SUPPORTED[".rst"] == "rst"


def test_section_titles_are_the_heading_path_and_literal_blocks_are_code():
    doc, blocks = _blocks("authentication.rst")
    assert doc.title == "Authentication"
    headings = {h for _, h, _ in blocks}
    assert {
        "Authentication",
        "Authentication › Basic Authentication",
        "Authentication › Basic Authentication › netrc Authentication",
        "Authentication › Digest Authentication",
    } <= headings
    assert not any(set(t) <= set("=-~") for _, _, t in blocks)  # no underline survives as text
    code = [t for k, h, t in blocks if k == "code" and h == "Authentication › Basic Authentication"]
    assert code[0].splitlines() == [
        ">>> from requests.auth import HTTPBasicAuth",
        ">>> requests.get('https://api.github.com/user', auth=HTTPBasicAuth('user', 'pass'))",
        "<Response [200]>",
    ]
    # a paragraph is one block however its lines wrap; the ``::`` marker becomes a colon; an inline
    # literal keeps its markup, as in a docstring (the answer path reads it as a name)
    assert (
        "text",
        "Authentication › Basic Authentication",
        "Making requests with HTTP Basic Auth is very simple:",
    ) in blocks
    netrc = [t for _, h, t in blocks if h.endswith("netrc Authentication")]
    assert netrc[0].startswith(
        "If no authentication method is given with the ``auth`` argument, Requests will attempt"
    )
    assert ("list", "Authentication › Other Authentication", "Kerberos") in blocks


def test_sphinx_directives_and_roles_become_their_text():
    _, blocks = _blocks("api.rst")
    lower = [t for _, h, t in blocks if h == "Developer Interface › Main Interface › Lower-Level Classes"]
    assert lower == ["requests.Request", "Response"]  # autoclass arguments, options dropped
    assert ("text", "Developer Interface › Main Interface", "get") in blocks  # autofunction
    lookup = [t for k, h, t in blocks if k == "code" and h.endswith("Status Code Lookup")]
    assert lookup and lookup[0].startswith(">>> requests.codes['temporary_redirect']\n307")
    assert not any("autoclass" in t or ":class:" in t or "System Message" in t for _, _, t in blocks)


SPHINX = """\
Guide
=====

Use :class:`~requests.Session` or :meth:`requests.Session.get`, see :ref:`the advanced page <advanced>`.

.. versionadded:: 2.3
   Sessions persist cookies.

.. code-block:: python
   :emphasize-lines: 1

   s = requests.Session()
   s.get(url)

.. someextension:: an argument
   :flag:

   Content of an unknown directive.

=====  ======
Name   Value
=====  ======
retry  3
=====  ======

* first item
* second item

.. include:: /etc/passwd

.. raw:: html

   <script>alert(1)</script>
"""


def test_unknown_directives_roles_and_tables():
    doc = parse_bytes(SPHINX.encode(), "rst", default_title="guide")
    blocks = [(b.kind, b.text) for b in doc.blocks]
    assert all(b.heading_path == ("Guide",) for b in doc.blocks)
    assert blocks == [
        ("text", "Use ``Session`` or ``requests.Session.get``, see the advanced page."),
        ("text", "New in version 2.3: Sessions persist cookies."),
        ("code", "s = requests.Session()\ns.get(url)"),
        ("text", "an argument"),
        ("text", "Content of an unknown directive."),
        ("table", "Name | Value\nretry | 3"),
        ("list", "first item"),
        ("list", "second item"),
    ]  # nothing included from disk, no raw markup


def test_broken_markup_still_gives_its_text():
    doc = parse_bytes(b"Title\n=====\n\nAn `unclosed link <and *emphasis\n\n.. broken::\n", "rst", "x")
    assert doc.blocks[0].heading_path == ("Title",)
    assert "unclosed link" in doc.blocks[0].text


def test_a_docutils_crash_falls_back_to_plain_text(monkeypatch):
    from ragline.ingest.parse import rst

    def crash(text):
        raise AssertionError("docutils bug")

    monkeypatch.setattr(rst, "_parse", crash)
    doc = parse_bytes(b"Some words of a page that docutils cannot read.\n", "rst", "x")
    assert doc.text == "Some words of a page that docutils cannot read."


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty document"),
        (b"\x00\x01binary\x00" * 50, "binary content"),
        (b".. a comment only\n", "no text"),
    ],
)
def test_unreadable_rst_is_a_document_error(data, message):
    with pytest.raises(ParseError, match=message):
        parse_bytes(data, "rst")


def test_rst_is_parsed_without_network():
    code = r"""
import socket
def deny(*a, **k):
    raise OSError("network disabled in this test")
socket.socket.connect = deny
socket.create_connection = deny
from pathlib import Path
from ragline.ingest.parse import parse_file
doc = parse_file(Path("tests/data/rst/api.rst"))
print(doc.title, len(doc.blocks) > 20)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["Developer", "Interface", "True"]
