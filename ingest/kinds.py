"""Document kinds: what ingestion does with a parsed document between parsing and embedding.

A document is prose (a format of ``shared/sdk/formats.py``) or source code (a language of
``ingest/parse/code.py``, parsed into a :class:`~ragline.ingest.parse.code.CodeDocument`). The kind
is chosen once, from the parsed document (:func:`kind_of`), and owns every step in which the two
differ, so ``pipeline.prepare()`` runs the same stages for both:

============  ====================================================  ==================================================
step          :class:`Prose`                                        :class:`Code`
============  ====================================================  ==================================================
chunks        sections and sentences (``ingest/chunk/prose.py``)    definitions with line spans (``ingest/chunk/code.py``)
contexts      title and heading path, or contextual retrieval       the symbol path only: a renamed file costs no
              (``ingest/contextualize.py``)                         embedding
layers        the request's (``ingest/layers.py``)                  source or tests by its path; symbol records in the
                                                                    symbols layer (``ingest/layers.py``)
extra rows    none                                                  a source file's symbol records (``ingest/chunk/symbols.py``)
annotations   the code its front matter names (``related_code``)    none
============  ====================================================  ==================================================

Every method is pure but for the contextualizer provider; ``prepare()`` times the stages, reports
them and turns a bad document's error into its failure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Protocol

from ragline.ingest.chunk import Chunk, chunk_blocks, code_chunks, code_context, symbol_chunks
from ragline.ingest.chunk import code as code_chunker
from ragline.ingest.contextualize import context_title, contextualize
from ragline.ingest.layers import LayerRules
from ragline.ingest.parse import CodeDocument, ParsedDocument, ParseError
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import IngestRequest


class DocumentKind(Protocol):
    #: source code (stored before its vectors under ``RAGLINE_INGEST_DEFER_VECTORS=code``)
    code: ClassVar[bool]
    #: the stage a failure of :meth:`extra_records` is recorded under
    extra_stage: ClassVar[str]

    def chunks(self, settings: Settings) -> list[Chunk]:
        """The document's own chunks (the chunk stage)."""
        ...

    def metadata(self) -> dict:
        """What the document's stored metadata says about its kind."""
        ...

    def contexts(self, chunks: list[Chunk], req: IngestRequest) -> list[str]:
        """One context per chunk (the contextualize stage), for the document's chunks and its extra rows."""
        ...

    def layers(self, path: str, requested: str, rules: LayerRules) -> tuple[str, str | None]:
        """The layer of the document's rows, and that of its extra rows (None: it gets none)."""
        ...

    def extra_records(self, first_no: int, settings: Settings) -> list[Chunk]:
        """Rows of the document beyond its chunks, numbered from ``first_no``."""
        ...

    def annotate(self, chunks: list[Chunk], metadata: dict) -> list[Chunk]:
        """The chunks as stored, given the document's metadata."""
        ...


@dataclass(frozen=True)
class Prose:
    doc: ParsedDocument
    code: ClassVar[bool] = False
    extra_stage: ClassVar[str] = "chunk"

    def chunks(self, settings: Settings) -> list[Chunk]:
        c = settings.chunk
        return chunk_blocks(self.doc.blocks, c.max_chars, hard_max_chars=c.hard_max_chars)

    def metadata(self) -> dict:
        return {}

    def contexts(self, chunks: list[Chunk], req: IngestRequest) -> list[str]:
        # an inline document's placeholder title (its doc id) is not embedded
        title = context_title(self.doc.title, req.doc_id if req.content is not None else None)
        return contextualize(title, chunks, self.doc.text)

    def layers(self, path: str, requested: str, rules: LayerRules) -> tuple[str, str | None]:
        return rules.document(path, False, requested), None

    def extra_records(self, first_no: int, settings: Settings) -> list[Chunk]:
        return []

    def annotate(self, chunks: list[Chunk], metadata: dict) -> list[Chunk]:
        """A document that says which code it describes: its hits carry it, for the structural ranking."""
        files = related_code(metadata.get("front_matter"))
        return (
            [replace(c, metadata={**c.metadata, "related_code": files}) for c in chunks] if files else chunks
        )


@dataclass(frozen=True)
class Code:
    doc: CodeDocument
    code: ClassVar[bool] = True
    extra_stage: ClassVar[str] = "symbols"

    def chunks(self, settings: Settings) -> list[Chunk]:
        chunks = code_chunks(self.doc, code_chunker.MAX_CHARS, code_chunker.MIN_CHARS)
        if not chunks:
            raise ParseError("no code found in document")
        return chunks

    def metadata(self) -> dict:
        return {"language": self.doc.language, "parsed_by": self.doc.parsed_by}

    def contexts(self, chunks: list[Chunk], req: IngestRequest) -> list[str]:
        return [code_context(c, self.doc.title) for c in chunks]

    def layers(self, path: str, requested: str, rules: LayerRules) -> tuple[str, str | None]:
        layer = rules.document(path, True, requested)
        return layer, rules.symbol_records(layer)

    def extra_records(self, first_no: int, settings: Settings) -> list[Chunk]:
        """The symbol records: one short row per definition, the repository's map."""
        return symbol_chunks(self.doc, first_no)

    def annotate(self, chunks: list[Chunk], metadata: dict) -> list[Chunk]:
        return chunks


def kind_of(doc: ParsedDocument) -> DocumentKind:
    """The kind of a parsed document: source code is what the parser read as code."""
    return Code(doc) if isinstance(doc, CodeDocument) else Prose(doc)


def related_code(front_matter: object, limit: int = 50) -> list[str]:
    """The files a Markdown document's front matter says it describes (``related_code``), or []."""
    related = front_matter.get("related_code") if isinstance(front_matter, dict) else None
    if isinstance(related, str):
        related = [related]
    if not isinstance(related, list):
        return []
    return [f.strip() for f in related if isinstance(f, str) and f.strip()][:limit]
