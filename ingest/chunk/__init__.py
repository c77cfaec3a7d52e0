"""The chunking stage: a parsed document cut into the chunks that are embedded and stored.

Each document kind (``ingest/kinds.py``) chunks in its own module: prose by sections and sentences
(:mod:`.prose`), source code along its definitions with line spans (:mod:`.code`), and a source
file's definitions also as short symbol records (:mod:`.symbols`). All of them produce
:class:`~.base.Chunk` values. Pure functions only.
"""

from __future__ import annotations

from ragline.ingest.chunk.base import Chunk
from ragline.ingest.chunk.code import CodeChunk, chunk_code, code_chunks, code_context
from ragline.ingest.chunk.prose import chunk_blocks, pack_section
from ragline.ingest.chunk.symbols import SymbolRecord, symbol_chunks, symbol_records

__all__ = [
    "Chunk",
    "CodeChunk",
    "SymbolRecord",
    "chunk_blocks",
    "chunk_code",
    "code_chunks",
    "code_context",
    "pack_section",
    "symbol_chunks",
    "symbol_records",
]
