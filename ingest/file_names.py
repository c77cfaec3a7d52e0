"""File names that cannot become doc ids: refused where ingestion lists files, each with its error.

A document's id and path come from its file's name (``<source>/<relative path>``). A name with a
newline splits log lines and citations in two; a bidi override (U+202E) or isolate shows
``cod.exe`` as ``exe.doc``; a zero-width character makes two ids look the same. The rule is the
contracts' own (:func:`ragline.shared.sdk.contracts.common.identifier_problem`, which also refuses such
ids in every task payload); this module applies it to listed files, for every source that lists
them: ``ragline ingest`` folders and files, configured folder, URL and git sources at reindex,
``ragline ingest REPO`` and push events. It runs before any request is built, so one bad name never
spoils the batch task it would have travelled in: the file becomes a failed document of its job, its
error open in ``document_errors`` (``ragline errors``), under its id with the characters escaped.
Events name their doc ids themselves: the contract refuses a bad one as an invalid payload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import psycopg
from psycopg.rows import DictRow

from ragline.shared.sdk.contracts.common import escaped, identifier_problem
from ragline.shared.worker import jobs

STAGE = "name"

T = TypeVar("T")


def name_problem(doc_id: str, path: str | None = None) -> str | None:
    """Why a listed file may not become the document ``doc_id`` (logical ``path``), or None (pure)."""
    for text in (doc_id, path):
        if text and (why := identifier_problem(text, "a doc id")):
            return (
                f"{STAGE}: the file name {why}: refused; rename the file (control and bidi characters"
                " make a doc id display as something it is not)"
            )
    return None


def split_named(
    items: Iterable[T], names: Callable[[T], tuple[str, str | None]]
) -> tuple[list[T], list[tuple[str, str]]]:
    """``items`` whose ``names(item)`` (doc id, path) pass :func:`name_problem`, and the others as
    ``(escaped doc id, error)`` for :func:`record_refused` (pure)."""
    kept: list[T] = []
    refused: list[tuple[str, str]] = []
    for item in items:
        doc_id, path = names(item)
        why = name_problem(doc_id, path)
        if why is None:
            kept.append(item)
        else:
            refused.append((escaped(doc_id), why))
    return kept, refused


def record_refused(
    conn: psycopg.Connection[DictRow], job_id: str, tenant: str, refused: list[tuple[str, str]]
) -> None:
    """Each refused file as a failed document of ``job_id`` with its error, open in ``document_errors``;
    nothing is stored for it (there is no document)."""
    if not refused:
        return
    jobs.add_documents(conn, job_id, tenant, [d for d, _ in refused])
    for doc_id, error in refused:
        conn.execute(
            "INSERT INTO document_errors (job_id, tenant, doc_id, source_uri, stage, error)"
            " VALUES (%s, %s, %s, NULL, %s, %s)",
            (job_id, tenant, doc_id, STAGE, error),
        )
        jobs.record_document(conn, job_id, tenant, doc_id, "failed", error=error)
