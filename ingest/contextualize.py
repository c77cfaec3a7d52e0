"""Contextualize chunks: a short text stored beside each chunk, used for embedding and lexical search.

Default ``heading``: document title plus heading path; free and deterministic.
"""

from __future__ import annotations

from ingest.chunk import Chunk
from ingest.parse import HEADING_SEP


def heading_context(title: str, chunk: Chunk) -> str:
    parts = [title] if title else []
    parts += [h for h in chunk.heading_path if h and h != title]
    return HEADING_SEP.join(parts)


def contextualize(title: str, chunks: list[Chunk], full_text: str | None = None) -> list[str]:
    """One context string per chunk."""
    return [heading_context(title, c) for c in chunks]


def embedding_text(context: str, content: str) -> str:
    return f"{context}\n\n{content}" if context else content
