"""Contextualize chunks: a short text stored beside each chunk, used for embedding and lexical search.

``heading`` (default): document title plus heading path; free and deterministic.
``anthropic``: the heading context plus 50-100 tokens from Claude that situate the chunk in the whole
document (contextual retrieval). Any failure falls back to the heading context for that chunk and is
counted in ``rag_contextualize_fallback``.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from ragline.ingest.chunk import Chunk
from ragline.ingest.parse import HEADING_SEP
from ragline.shared.config.settings import get_settings
from ragline.shared.worker.metrics import CONTEXTUALIZE_FALLBACK
from ragline.shared.worker.providers import ProviderError, cached
from ragline.shared.worker.providers.registry import CONTEXTUALIZER
from ragline.shared.worker.text import embedding_form

log = logging.getLogger(__name__)
PARALLEL = 4  # concurrent requests per document once the first one has written the prompt cache


def context_title(title: str, placeholder: str | None = None) -> str:
    """The title to embed beside each chunk: none when it is only the ``placeholder`` the loader
    gave a document that brought no title (an inline document's doc id): an id such as
    ``tydi-ru-p0206`` or ``Super_Bowl_50_p0`` is noise to the embedder, or worse, words of another
    language the lexical side then matches (docs/evaluation.md, "Retrieval quality")."""
    return "" if placeholder is not None and title.strip() == placeholder.strip() else title


def heading_context(title: str, chunk: Chunk) -> str:
    parts = [title] if title else []
    parts += [h for h in chunk.heading_path if h and h != title]
    return HEADING_SEP.join(parts)


def contextualize(title: str, chunks: list[Chunk], full_text: str | None = None) -> list[str]:
    """One context string per chunk."""
    base = [heading_context(title, c) for c in chunks]
    settings = get_settings()
    if CONTEXTUALIZER.offline(settings) or not chunks:
        return base
    if not full_text or len(full_text) > settings.context.max_doc_chars:
        CONTEXTUALIZE_FALLBACK.inc(len(chunks))
        return base
    try:
        # the registry imports the provider's module now: the control pool loads none
        ctx = cached("contextualizer", CONTEXTUALIZER.build)
    except ProviderError as exc:
        log.warning("contextualizer unavailable, using headings: %s", exc)
        CONTEXTUALIZE_FALLBACK.inc(len(chunks))
        return base
    system = ctx.system_blocks(full_text)

    def one(i: int) -> str:
        try:
            extra = ctx.situate(system, chunks[i].content)
        except ProviderError as exc:
            log.warning("contextualize chunk %d fell back to headings: %s", i, exc)
            CONTEXTUALIZE_FALLBACK.inc()
            return base[i]
        return f"{base[i]}\n{extra}" if base[i] else extra

    first = one(0)  # writes the prompt cache; the rest read it
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        rest = list(pool.map(one, range(1, len(chunks))))
    return [first, *rest]


def embedding_text(context: str, content: str) -> str:
    """What the embedder sees of a chunk, in the form questions are embedded in (:func:`embedding_form`)."""
    return embedding_form(f"{context}\n\n{content}" if context else content)
