"""Markdown and reStructuredText chunks carry the source lines they came from (cited as
``path:start-end``, like code), and attribute lists never reach a heading (``ingest/parse/common.py``)."""

from __future__ import annotations

import pytest

from ragline.ingest.chunk.prose import chunk_blocks
from ragline.ingest.parse import parse_bytes
from ragline.ingest.parse.common import Block, _clean_heading, locate_lines
from ragline.shared.worker.text import words

MD = """---
title: Ошибки
---
# Обработка ошибок { #handling-errors }

Первый абзац про ошибки сервера. Его **жирный** текст и [ссылка](https://example.org/a) в конце.

## Исключения {: #exceptions .note }

Второй абзац объясняет исключения клиента
и продолжается на следующей строке.

- пункт один про повторы
- пункт два про таймауты

```python
def retry_call():
    return 1
```

Последний абзац документа о логировании.
"""

RST = """Обработка ошибок
================

Первый абзац про ошибки сервера. Его **жирный** текст и `ссылка <https://example.org/a>`_ в конце.

Исключения
----------

Второй абзац объясняет исключения клиента
и продолжается на следующей строке.

- пункт один про повторы
- пункт два про таймауты

.. code-block:: python

   def retry_call():
       return 1

Последний абзац документа о логировании.
"""


@pytest.mark.parametrize(("fmt", "source"), [("md", MD), ("rst", RST)])
@pytest.mark.parametrize("max_chars", [60, 800])
def test_every_chunk_says_the_lines_its_words_come_from(fmt, source, max_chars):
    doc = parse_bytes(source.encode(), fmt, "d")
    lines = source.splitlines()
    chunks = chunk_blocks(doc.blocks, max_chars)
    assert chunks
    for c in chunks:
        start, end = c.metadata["start_line"], c.metadata["end_line"]
        assert 1 <= start <= end <= len(lines)
        span = words(" ".join(lines[start - 1 : end]).lower())
        # the span holds the chunk (a chunk holding part of a paragraph cites the paragraph)
        assert all(w.lower() in span for w in words(c.content)), (c.content, start, end)
    assert chunks[0].metadata["start_line"] == (6 if fmt == "md" else 4)
    second = next(c for c in chunks if c.content.startswith("Второй абзац"))
    assert second.metadata["start_line"] == (10 if fmt == "md" else 9)


@pytest.mark.parametrize(
    ("heading", "title"),
    [
        ("Обработка ошибок { #handling-errors }", "Обработка ошибок"),
        ("Обработка ошибок {#handling-errors}", "Обработка ошибок"),
        ("Errors {: #errors .note data-x=1 }", "Errors"),
        ("Pandoc {#id .class}", "Pandoc"),
        ("Set literal {a, b}", "Set literal {a, b}"),  # not an attribute list: kept
        ("Dict {}", "Dict {}"),
    ],
)
def test_attribute_lists_never_reach_a_heading(heading, title):
    assert _clean_heading(heading) == title


def test_mkdocs_anchors_leave_titles_and_heading_paths():
    doc = parse_bytes(MD.encode(), "md", "d")
    assert doc.title == "Обработка ошибок"
    assert {b.heading for b in doc.blocks} == {"Обработка ошибок", "Обработка ошибок › Исключения"}


def test_a_block_not_in_the_source_is_left_unplaced_and_later_ones_still_placed():
    blocks = [Block("совсем другой текст"), Block("вторая строка здесь")]
    out = locate_lines("первая строка\nвторая строка здесь\n", blocks)
    assert out[0].lines is None and out[1].lines == (2, 2)


def test_a_word_of_the_front_matter_does_not_pull_a_block_up_to_it():
    """The block's first word also occurs in the front matter a few words before its paragraph:
    the block is placed where its lead words lie together, not at the first occurrence."""
    source = "---\ntitle: Retrieval guide\ntags: [search]\n---\n# Overview\n\nRetrieval finds the chunks.\n"
    block = Block(text="Retrieval finds the chunks.", heading_path=("Overview",))
    assert locate_lines(source, [block])[0].lines == (7, 7)
