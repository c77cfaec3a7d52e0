"""ragline's text classifier in unstructured's HTML parser yields the same blocks as unstructured's own
(the narrative-text test it skips decides nothing ragline reads), on every Markdown and HTML file
of the repository and on the lines that classifier treats specially."""

from __future__ import annotations

import pytest
from unstructured.partition.html import parser

from ragline.ingest.parse import parse_bytes
from ragline.ingest.parse.common import fast_element_type
from tests.conftest import REPO

SPECIAL = """# Заголовок

Обычный абзац. В нём два предложения.

КРИК ЗАГЛАВНЫМИ БУКВАМИ БЕЗ ГЛАГОЛА

* пункт списка
- другой пункт

• третий пункт, абзац с маркером

x

ivan.petrov@example.com

Springfield, IL 62704

12345

Short line

<p>a paragraph inside raw HTML</p>
"""


def blocks(data: bytes, fmt: str) -> tuple:
    d = parse_bytes(data, fmt, default_title="t")
    return d.title, [(b.text, b.kind, b.heading_path, b.page) for b in d.blocks]


#: unstructured's own classifier, taken when pytest imports this module: before any test parses
ORIGINAL = parser.derive_element_type_from_text


@pytest.fixture()
def original_classifier():
    assert ORIGINAL is not fast_element_type
    parse_bytes(b"# x\n\ny", "md")  # installs ragline's classifier
    assert parser.derive_element_type_from_text is fast_element_type

    def use(which):
        parser.derive_element_type_from_text = which

    yield ORIGINAL, use
    use(fast_element_type)


def test_the_same_blocks_as_unstructured_s_own_classifier(original_classifier):
    original, use = original_classifier
    files = [SPECIAL.encode()] + [
        p.read_bytes()
        for p in sorted(
            [*REPO.glob("*.md"), *(REPO / "docs").rglob("*.md"), *(REPO / "tests").rglob("*.htm*")]
        )
    ]
    assert len(files) >= 8
    for fmt in ("md", "html"):
        for data in files:
            if fmt == "html" and data is not files[0] and not data.lstrip().startswith(b"<"):
                continue
            use(original)
            expected = blocks(data, fmt)
            use(fast_element_type)
            assert blocks(data, fmt) == expected


def test_list_items_and_fragments_are_still_told_apart():
    from unstructured.documents.elements import ListItem, Text

    assert fast_element_type("• пункт") is ListItem
    assert fast_element_type("x") is None
    assert fast_element_type("ivan.petrov@example.com") is Text
    kinds = [b[1] for b in blocks(SPECIAL.encode(), "md")[1]]
    assert kinds.count("list") == 3 and "x" not in [b[0] for b in blocks(SPECIAL.encode(), "md")[1]]
