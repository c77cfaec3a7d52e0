"""Answer generators. ``extractive`` (the offline default) quotes the sentences of the retrieved
chunks that best answer the question: :mod:`ragline.query.answer.extractive`; the chat-model generators
are providers (:mod:`ragline.shared.worker.providers.generate`)."""

from __future__ import annotations

from ragline.query.answer.extractive import extract, extractive_answer
from ragline.query.answer.prompt import NO_ANSWER

__all__ = ["NO_ANSWER", "extract", "extractive_answer"]
