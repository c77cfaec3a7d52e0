"""The chunking stage's output: one chunk of a document, as every later stage reads it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Chunk:
    chunk_no: int
    content: str
    heading_path: tuple[str, ...]
    kind: str = "text"
    page: int | None = None
    metadata: dict = field(default_factory=dict, hash=False)  # code: span, language, symbols
