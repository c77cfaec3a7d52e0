"""Which layer a document's rows are stored in: one rule for both document kinds.

A source file goes to the tests layer when its path inside its source says test
(``RAGLINE_CODE_TEST_GLOBS``, matched by :mod:`ragline.ingest.globs` like a git source's include and
exclude globs), else to the source layer; a source file's definitions also become symbol records in
the symbols layer (``RAGLINE_CODE_SYMBOLS``), a test file's do not (tests are not the repository's
map). Every other document keeps the layer its request asks for, so a repository's docs keep their
source's layer. Pure.

Which of these layers get vectors is the embedding budget's
(:class:`ragline.shared.worker.pending_vectors.VectorBudget`, ``RAGLINE_INGEST_LEXICAL_ONLY_LAYERS``),
not this rule's: it lives below both pools because search reports it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ragline.ingest.globs import matches_any
from ragline.ingest.parse.code import FORMATS
from ragline.shared.config.settings import CodeSettings


@dataclass(frozen=True)
class LayerRules:
    source: str
    tests: str
    test_globs: tuple[str, ...]
    #: the layer of the symbol records; None: source files get none
    symbols: str | None = None

    @classmethod
    def from_settings(cls, code: CodeSettings) -> LayerRules:
        return cls(
            code.source_layer,
            code.tests_layer,
            tuple(code.test_globs),
            code.symbols_layer if code.symbols else None,
        )

    def document(self, path: str, code: bool, requested: str) -> str:
        """The layer of a document's own rows: a source file's by its ``path``, else ``requested``."""
        if not code:
            return requested
        return self.tests if is_test_path(path, self.test_globs) else self.source

    def symbol_records(self, layer: str) -> str | None:
        """The layer of a source file's symbol records given the file's own ``layer``, or None when
        it gets none (a test file, or the symbol layer off)."""
        return self.symbols if layer == self.source else None


def is_test_path(path: str, globs: Iterable[str]) -> bool:
    """A test file by its path, with the glob rule of the git sources."""
    return matches_any(path, globs)


def document_layer(
    path: str, fmt: str, requested: str, source_layer: str, tests_layer: str, test_globs: list[str]
) -> str:
    """:meth:`LayerRules.document` for a file known by its format only: the languages of
    ``ingest/parse/code.py`` are source code."""
    return LayerRules(source_layer, tests_layer, tuple(test_globs)).document(path, fmt in FORMATS, requested)
