"""Which local folders a tenant's ingest tasks may read: default-deny.

A path in a task is read only below a root allowed for the task's tenant:

* ``RAGLINE_INGEST_ALLOWED_ROOTS``: set by the operator for every tenant;
* the folders of the tenant's configured sources (``RAGLINE_LIFECYCLE_SOURCES``);
* the roots granted to the tenant in ``ingest_roots`` (migration 0006) by ``ragline ingest PATH``.

The grant is tied to database access on purpose: a producer (a chat backend sending events or
ingest tasks) holds only Redis credentials, the operator's CLI holds the database, so a path in a
payload can never grant itself. Roots are stored and compared resolved (absolute, ``..`` and
symlinks resolved), so a symlink inside a root cannot lead a task out of it.

A git repository is stricter (:func:`admit_repository`, the one decision every git path takes: the
CLI's repository ingest, a configured git source listed or pushed to, a ``git:`` document address,
a clone fetched): it must *be* one of these roots or a configured git source of the tenant, not lie
somewhere below one, and it is opened at exactly that folder (``ingest/git.py``,
:func:`~ragline.ingest.git.open_repository`). A folder below a root may be a tenant's own upload,
and a ``.git`` placed there (a gitdir file, alternates) would make git read any repository.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import psycopg
from psycopg.rows import DictRow

from ragline.ingest import git
from ragline.ingest.source_spec import SourceSpec, configured_sources, repository_dir
from ragline.shared.config.settings import get_settings
from ragline.shared.worker import db


def resolve(path: str | os.PathLike) -> Path:
    """The absolute path with ``~``, ``..`` and every symlink resolved (the file need not exist)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def source_roots(specs: Iterable[SourceSpec], tenant: str) -> list[Path]:
    """The local folders of ``tenant``'s configured sources (pure)."""
    paths = [getattr(s, "path", None) for s in specs if s.tenant == tenant]
    return [resolve(p) for p in paths if p is not None]


def static_roots(tenant: str) -> list[Path]:
    """Roots from the settings alone: ``ingest.allowed_roots`` and the tenant's source folders."""
    settings = get_settings()
    roots = [resolve(r) for r in settings.ingest.allowed_roots]
    return roots + source_roots(configured_sources(settings.lifecycle.sources), tenant)


def granted_roots(conn: psycopg.Connection[DictRow], tenant: str) -> list[Path]:
    rows = conn.execute("SELECT root FROM ingest_roots WHERE tenant = %s ORDER BY root", (tenant,)).fetchall()
    return [Path(r["root"]) for r in rows]


def containing_root(path: Path, roots: Iterable[Path]) -> Path | None:
    """The innermost root that holds ``path`` (both resolved), or None (pure)."""
    inside = [r for r in roots if path == r or path.is_relative_to(r)]
    return max(inside, key=lambda r: len(r.parts)) if inside else None


def root_for(tenant: str, path: Path) -> Path | None:
    """The root allowed for ``tenant`` that holds the resolved ``path``, or None. The database is
    asked only when the settings' roots do not hold it."""
    found = containing_root(path, static_roots(tenant))
    if found is not None:
        return found
    with db.connection() as conn:
        return containing_root(path, granted_roots(conn, tenant))


def repository_roots(tenant: str) -> list[Path]:
    """The folders a ``tenant``'s git reads may open without asking the database: the settings' roots
    and the repositories (folders or clones) of its configured git sources."""
    specs = configured_sources(get_settings().lifecycle.sources)
    return static_roots(tenant) + [repository_dir(s) for s in specs if s.kind == "git" and s.tenant == tenant]


def admit_repository(tenant: str, path: str | os.PathLike) -> git.Repository:
    """The repository at ``path`` opened for ``tenant``, or :class:`~ragline.ingest.git.RepositoryRefused`.

    ``path`` (resolved) must be a root of the tenant itself, or the repository of one of its
    configured git sources: a folder below a root is refused, whatever it holds. It is then opened
    by :func:`~ragline.ingest.git.open_repository`, which refuses a ``.git`` file or symlink and
    object stores outside the folder."""
    real = resolve(path)
    if real not in repository_roots(tenant):
        with db.connection() as conn:
            granted = granted_roots(conn, tenant)
        if real not in granted:
            raise git.RepositoryRefused(
                f"repository {path} is not a root of tenant {tenant}: a git address names a granted"
                " root (`ragline ingest REPO`) or a configured git source itself, not a folder below one"
            )
    return git.open_repository(real)


def grant_roots(tenant: str, paths: Iterable[str | os.PathLike], granted_by: str = "cli") -> list[Path]:
    """Record ``paths`` (resolved; folders or single files) as roots ``tenant``'s tasks may read.

    Called by the operator's side (``ragline ingest``), never from a task: see the module docstring.
    Granting a root again is a no-op. Returns the resolved roots.
    """
    roots = sorted({resolve(p) for p in paths})
    with db.connection() as conn:
        conn.execute(
            "INSERT INTO ingest_roots (tenant, root, granted_by) SELECT %s, r, %s FROM unnest(%s::text[]) AS r"
            " ON CONFLICT (tenant, root) DO NOTHING",
            (tenant, granted_by, [str(r) for r in roots]),
        )
    return roots


def revoke_roots(tenant: str, paths: Iterable[str | os.PathLike]) -> int:
    """Forget granted roots (given as granted, or any path resolving to them); returns how many."""
    with db.connection() as conn:
        return conn.execute(
            "DELETE FROM ingest_roots WHERE tenant = %s AND root = ANY(%s)",
            (tenant, [str(resolve(p)) for p in paths]),
        ).rowcount
