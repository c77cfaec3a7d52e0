"""Text helpers both sides need the same way: the chunker splits documents into sentences and the
extractive generator quotes whole sentences of the chunks it cites."""

from __future__ import annotations

from razdel import sentenize


def split_sentences(text: str) -> list[str]:
    """Russian-aware sentence split (razdel keeps "т.е.", "v1.2", "3.14" intact)."""
    return [s.text for s in sentenize(text) if s.text.strip()]
